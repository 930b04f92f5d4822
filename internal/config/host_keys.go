// SPDX-License-Identifier: Apache-2.0

package config

import (
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"sluice/internal/fileread"
)

// Redacted is what a key prints as, everywhere.
const Redacted = "<redacted>"

// Key is key material (for rfc4106: the AES key followed by the 4-byte
// salt). Whatever formats it — %v, %s, %x, %#v, JSON — prints <redacted>.
type Key []byte

func (Key) String() string               { return Redacted }
func (Key) GoString() string             { return Redacted }
func (Key) Format(f fmt.State, _ rune)   { io.WriteString(f, Redacted) }
func (Key) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }
func (Key) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// Equal compares two keys in constant time.
func (k Key) Equal(o Key) bool { return subtle.ConstantTimeCompare(k, o) == 1 }

// Bytes is the key material, for the kernel only.
func (k Key) Bytes() []byte { return []byte(k) }

func (k Key) lenMsg(bits int) (string, bool) { return rfc4106LenMsg(len(k), bits) }

// rfc4106Len is the XFRM key length of rfc4106(gcm(aes)): key + salt.
func rfc4106Len(bits int) int { return bits/8 + 4 }

func keyID(peer, dir string) string { return peer + " " + dir }

func (ks *Keys) get(peer, dir string) (Key, int) {
	e := ks.m[keyID(peer, dir)]
	return e.key, e.line
}

func rfc4106LenMsg(n, bits int) (string, bool) {
	want := rfc4106Len(bits)
	if n == want {
		return "", true
	}
	return fmt.Sprintf("the key is %d bytes; rfc4106(gcm(aes)) with a %d-bit key needs %d (%d key + 4 salt), written as %d hex digits", n, bits, want, bits/8, 2*want), false
}

type keyEntry struct {
	key  Key
	line int
}

// Keys is a key file: one key per peer and direction.
type Keys struct {
	Path string
	m    map[string]keyEntry
}

// KeyFileProblem says why a key file's permissions are unsafe, or "".
// The file must be a regular file readable and writable by its owner only,
// owned by root or by the user running sluice: anyone else able to read it
// can decrypt the overlay, and anyone able to write it can choose the keys.
func KeyFileProblem(path string, fi os.FileInfo) string {
	if !fi.Mode().IsRegular() {
		return fmt.Sprintf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		who := "group"
		if perm&0o007 != 0 {
			who = "everyone"
		}
		return fmt.Sprintf("%s has mode %04o, so %s can read or change the keys; make it readable by its owner only: chmod 600 %s", path, perm, who, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if uid := uint32(os.Geteuid()); st.Uid != 0 && st.Uid != uid {
			return fmt.Sprintf("%s is owned by uid %d, who can change the keys; make it owned by root (or by the user running sluice): chown root %s", path, st.Uid, path)
		}
	}
	return ""
}

// ManualKeys reads h's key file when a peer is keyed manually (nil, nil
// otherwise): the one loader the overlay engine and the agent share.
// The error names the file's ipsec.keys line.
func (h *Host) ManualKeys() (*Keys, error) {
	if !h.HasKeying(KeyingManual) {
		return nil, nil
	}
	keys, err := LoadKeys(h.KeysPath())
	if err != nil {
		return nil, fmt.Errorf("%s: ipsec.keys (line %d): %w", h.File, h.IPsec.KeysLine, err)
	}
	return keys, nil
}

// LoadKeys reads a key file. Its lines are
//
//	<peer> <out|in> <key in hex, 0x optional>
//
// with # comments and blank lines. Messages name the line and never
// contain any part of the file's text.
func LoadKeys(path string) (*Keys, error) {
	// Stat, not Open, first: opening a FIFO would block until a writer came.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if problem := KeyFileProblem(path, fi); problem != "" {
		return nil, fmt.Errorf("key file refused: %s", problem)
	}
	data, err := fileread.Read(path, fileread.KeyLimit)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	return parseKeys(data, path)
}

func parseKeys(data []byte, path string) (*Keys, error) {
	ks := &Keys{Path: path, m: map[string]keyEntry{}}
	var errs []string
	bad := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", path, line, fmt.Sprintf(format, args...)))
	}
	// Split by hand: bufio.Scanner's token limit would end the parse with
	// an error naming no line; the file itself is bounded by LoadKeys.
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		if len(fs) != 3 {
			bad(n, "want three fields: peer name, out or in, and the key in hex (such as: node-b out 0x...); this line has %d", len(fs))
			continue
		}
		if !nameRE.MatchString(fs[0]) {
			bad(n, "the first field is not a peer name (letters, digits, '.', '_', '-')")
			continue
		}
		if fs[1] != "out" && fs[1] != "in" {
			bad(n, "the second field must be out or in")
			continue
		}
		h := strings.TrimPrefix(strings.TrimPrefix(fs[2], "0x"), "0X")
		k, err := hex.DecodeString(h)
		if err != nil || len(k) == 0 {
			bad(n, "the third field is not a key in hex digits (optionally starting with 0x)")
			continue
		}
		id := keyID(fs[0], fs[1])
		if first, dup := ks.m[id]; dup {
			bad(n, "a second %s key for peer %s (first on line %d); keep one", fs[1], fs[0], first.line)
			continue
		}
		ks.m[id] = keyEntry{key: Key(k), line: n}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("key file %s:\n%s", path, strings.Join(errs, "\n"))
	}
	return ks, nil
}

// PeerKeys returns the out and in keys of peer, checked against the key
// size; a missing or wrong key is an error naming the file, line and the
// fix (never the key).
func (ks *Keys) PeerKeys(peer string, bits int) (out, in Key, err error) {
	var errs []string
	get := func(dir string) Key {
		k, line := ks.get(peer, dir)
		if k == nil {
			errs = append(errs, fmt.Sprintf("%s: no %s key for peer %s; add a line: %s %s 0x<%d hex digits>", ks.Path, dir, peer, peer, dir, 2*rfc4106Len(bits)))
			return nil
		}
		if msg, ok := k.lenMsg(bits); !ok {
			errs = append(errs, fmt.Sprintf("%s:%d: peer %s %s: %s", ks.Path, line, peer, dir, msg))
			return nil
		}
		return k
	}
	out, in = get("out"), get("in")
	if out != nil && in != nil && out.Equal(in) {
		_, l := ks.get(peer, "in")
		errs = append(errs, fmt.Sprintf("%s:%d: peer %s uses the same key in both directions; with AES-GCM that risks nonce reuse: generate two keys", ks.Path, l, peer))
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, in, nil
}
