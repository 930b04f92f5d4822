// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sluice/internal/fileread"
)

// The key ledger remembers every manual key apply has installed, so that
// apply refuses to install one again (unless forced). A manually keyed SA
// that is created again — after teardown, a reboot, an SA flushed by hand —
// starts its ESP sequence number at 1 under the same AES-GCM key. Where
// the GCM nonce is derived from the sequence number alone (NICs may do
// this; the kernel's software seqiv XORs it with a salt drawn per SA
// instance), the same nonce is used twice under one key, which reveals the
// XOR of two plaintexts and lets an attacker forge packets. IKE avoids it:
// every SA gets fresh keys.
//
// The ledger holds no key: only an HMAC, under a random salt of its own,
// of each key with its SA's destination and SPI. It lives beside the journals (default
// /run: lost at reboot, like the SAs — point --state-dir at persistent
// storage to keep it across reboots) and teardown never removes it.

// ErrKeyReuse is wrapped by the error of an apply that would install a
// manual key again.
var ErrKeyReuse = errors.New("manual key used before")

type keyUse struct {
	SA    string    `json:"sa"`
	Since time.Time `json:"first_installed"`
}

type keyLedger struct {
	Salt string            `json:"salt"`
	Keys map[string]keyUse `json:"keys"` // HMAC of the key -> first use
	path string
}

// ledgerPath names the ledger after the namespace (netnsID: its cookie), so
// a new namespace neither inherits the keys of an unrelated old one nor is
// refused them.
func ledgerPath(journalPath string) string {
	return filepath.Join(filepath.Dir(journalPath), fmt.Sprintf("keys-used@netns-%s.json", netnsID()))
}

func loadLedger(path string) (*keyLedger, error) {
	l := &keyLedger{Keys: map[string]keyUse{}, path: path}
	b, err := fileread.Read(path, fileread.StateLimit)
	if errors.Is(err, os.ErrNotExist) {
		salt := make([]byte, 16)
		if _, err := rand.Read(salt); err != nil {
			return nil, err
		}
		l.Salt = hex.EncodeToString(salt)
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("key ledger %s: %w", path, err)
	}
	if err := json.Unmarshal(b, l); err != nil || l.Salt == "" {
		return nil, fmt.Errorf("key ledger %s is damaged (%v); it only remembers which manual keys were used: move it away to start afresh, knowing that keys used before are then forgotten", path, err)
	}
	if l.Keys == nil {
		l.Keys = map[string]keyUse{}
	}
	l.path = path
	return l, nil
}

// mac binds a key to its SA (destination and SPI): installing that key
// for that SA again is what restarts the SA's sequence numbers. (The same
// key under another SPI is not caught: a key file that does that is
// already broken.)
func (l *keyLedger) mac(w wantSA) string {
	salt, _ := hex.DecodeString(l.Salt)
	m := hmac.New(sha256.New, salt)
	m.Write(w.key.Bytes())
	fmt.Fprintf(m, "|%s|%d", w.dst, w.spi)
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// check refuses a key the ledger has seen.
func (l *keyLedger) check(w wantSA) error {
	if u, ok := l.Keys[l.mac(w)]; ok {
		return fmt.Errorf("%w: the %s key of peer %s was installed before (by %s, first on %s); installing it again restarts the ESP sequence number under the same AES-GCM key, which can repeat GCM nonces. Put a new key in the key file for both ends (or use keying: ike, which rekeys), or apply --force to install it anyway", ErrKeyReuse, w.dir, w.peer.Name, u.SA, u.Since.Format(time.RFC3339))
	}
	return nil
}

// manualKeyNote states the hazard of manual keys in the plan (apply
// prints it).
func (p *planner) manualKeyNote(path string) {
	p.note("%s: keyed manually: its keys never rotate, and an SA created again with the same key (after teardown, a reboot, a peer restart) restarts its sequence number under that AES-GCM key; apply refuses a key it installed before (--force overrides). Use keying: ike outside labs (docs/overlay.md, Keying)", path)
}

// checkKey refuses a manual key used before, unless the apply is forced.
func (r *runner) checkKey(w wantSA) error {
	if r.force || w.key == nil {
		return nil
	}
	l, err := r.keyLedger()
	if err != nil {
		return err
	}
	return l.check(w)
}

// recordKey notes w's key as used.
func (r *runner) recordKey(w wantSA) error {
	if w.key == nil {
		return nil
	}
	l, err := r.keyLedger()
	if err != nil {
		return err
	}
	return l.record(w)
}

// keyLedger loads the namespace's ledger on first use: a run that installs
// no manual key never reads or creates it.
func (r *runner) keyLedger() (*keyLedger, error) {
	if r.ledger == nil {
		l, err := loadLedger(ledgerPath(r.j.path))
		if err != nil {
			return nil, err
		}
		r.ledger = l
	}
	return r.ledger, nil
}

// record notes that w's key is in use, and saves the ledger (0600).
func (l *keyLedger) record(w wantSA) error {
	id := l.mac(w)
	if _, ok := l.Keys[id]; !ok {
		l.Keys[id] = keyUse{SA: w.String(), Since: time.Now().UTC()}
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	tmp := l.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("key ledger: %w", err)
	}
	return os.Rename(tmp, l.path)
}
