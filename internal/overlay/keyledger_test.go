// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/config"
)

// The ledger refuses a manual key for an SA it was installed for before,
// survives a reload (a later apply), and never stores the key.
func TestKeyLedgerRefusesReuse(t *testing.T) {
	dir := t.TempDir()
	j := &Journal{path: filepath.Join(dir, "node-a@netns-1.json")}
	pr := &config.Peer{Name: "node-b"}
	key := config.Key([]byte("0123456789abcdefSALT"))
	w := wantSA{peer: pr, dir: "out", src: netip.MustParseAddr("10.0.0.1"), dst: netip.MustParseAddr("10.0.0.2"), spi: 0x1001, key: key}

	r := &runner{j: j}
	if err := r.checkKey(w); err != nil {
		t.Fatalf("first use refused: %v", err)
	}
	if err := r.recordKey(w); err != nil {
		t.Fatal(err)
	}
	// A later apply (a new runner reads the ledger from disk).
	r = &runner{j: j}
	err := r.checkKey(w)
	if !errors.Is(err, ErrKeyReuse) || !strings.Contains(err.Error(), "the out key of peer node-b was installed before") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("second use: %v", err)
	}
	// Another SPI, or another key, is a new SA instance.
	w2 := w
	w2.spi = 0x1003
	if err := r.checkKey(w2); err != nil {
		t.Fatalf("another SPI refused: %v", err)
	}
	w3 := w
	w3.key = config.Key([]byte("fedcba9876543210SALT"))
	if err := r.checkKey(w3); err != nil {
		t.Fatalf("another key refused: %v", err)
	}
	if err := (&runner{j: j, force: true}).checkKey(w); err != nil {
		t.Fatalf("forced: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "keys-used@netns-*.json"))
	if len(files) != 1 {
		t.Fatalf("ledger files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	fi, _ := os.Stat(files[0])
	if strings.Contains(string(b), "0123456789") || strings.Contains(string(b), "30313233") || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ledger (mode %v) holds the key or is readable by others:\n%s", fi.Mode(), b)
	}
}
