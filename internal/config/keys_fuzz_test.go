// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// FuzzParseKeys checks the key file reader's promises: its errors (and
// PeerKeys' errors) never contain key material, whatever formats a parsed
// key prints <redacted>, and the keys it accepts read back the same from a
// canonical key file (parse -> write -> parse).
//
//	go test -run '^$' -fuzz '^FuzzParseKeys$' -fuzztime 30s ./internal/config/
func FuzzParseKeys(f *testing.F) {
	secret := "deadbeefdeadbeefdeadbeefdeadbeefcafecafe"
	f.Add([]byte(lines("# node-a's keys", "node-b out 0x"+key128a, "node-b in "+key128b+"   # from node-b")))
	f.Add([]byte(lines("node-b out "+secret+" extra", secret+" out "+key128a, "node-b sideways "+secret,
		"node-b in 0x"+secret[:39], "node-b in "+key128b, "node-b in "+secret, "node-c out 0x"+secret+"00")))
	f.Add([]byte(lines("b out "+key128a, "b in "+key128a)))
	f.Add([]byte("node-b out 0X" + key128a + key128b[:32] + "\r\nnode-b in " + key128b + key128a[:32]))
	f.Fuzz(func(t *testing.T, data []byte) {
		ks, err := parseKeys(data, "fuzz.keys")
		if err != nil {
			if ks != nil {
				t.Fatalf("keys and an error")
			}
			checkNoKeyText(t, data, err.Error())
			return
		}
		var canon []string
		for id, e := range ks.m {
			if len(e.key) == 0 || e.line < 1 {
				t.Fatalf("%s: entry %+v", id, e)
			}
			checkRedacted(t, e.key)
			canon = append(canon, id+" "+hex.EncodeToString(e.key))
			peer, _, _ := strings.Cut(id, " ")
			for _, bits := range []int{128, 256} {
				if _, _, err := ks.PeerKeys(peer, bits); err != nil {
					checkNoKeyText(t, data, err.Error())
				}
			}
		}
		sort.Strings(canon)
		back, err := parseKeys([]byte(strings.Join(canon, "\n")), "canon.keys")
		if err != nil {
			t.Fatalf("the canonical form of accepted keys is refused: %v", err)
		}
		if len(back.m) != len(ks.m) {
			t.Fatalf("%d keys read back as %d", len(ks.m), len(back.m))
		}
		for id, e := range ks.m {
			if !back.m[id].key.Equal(e.key) {
				t.Fatalf("%s: key changed on the way back", id)
			}
		}
	})
}

// checkNoKeyText fails when msg holds a hex run (8 or more digits) of the
// file that is not part of a peer name: messages may name peers, never
// keys. Key material may be written in either case, so the check is too.
func checkNoKeyText(t *testing.T, data []byte, msg string) {
	t.Helper()
	var names []string
	for _, l := range strings.Split(string(data), "\n") {
		l, _, _ = strings.Cut(l, "#")
		if fs := strings.Fields(l); len(fs) > 0 {
			names = append(names, strings.ToLower(fs[0]))
		}
	}
	lower := strings.ToLower(msg)
	for _, tok := range strings.FieldsFunc(strings.ToLower(string(data)), func(r rune) bool { return !isHexDigit(r) }) {
		if len(tok) < 8 || !strings.Contains(lower, tok) {
			continue
		}
		named := false
		for _, n := range names {
			named = named || strings.Contains(n, tok)
		}
		if !named {
			t.Fatalf("the message shows %q of the file:\n%s", tok, msg)
		}
	}
}

func isHexDigit(r rune) bool { return r >= '0' && r <= '9' || r >= 'a' && r <= 'f' }

// checkRedacted prints k with every verb fmt knows and wants <redacted>.
func checkRedacted(t *testing.T, k Key) {
	t.Helper()
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		if got := fmt.Sprintf(verb, k); got != Redacted {
			t.Fatalf("%s prints %q", verb, got)
		}
	}
	// "<redacted>" itself holds the hex digits "edac": look for 4 bytes or more.
	if got := fmt.Sprint([]Key{k}, struct{ K Key }{k}); len(k) >= 4 && bytes.Contains([]byte(got), []byte(hex.EncodeToString(k))) {
		t.Fatalf("a key inside a value prints %q", got)
	}
}
