// SPDX-License-Identifier: Apache-2.0

package swan

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode"
)

// FuzzParsePSK checks --psk-file's key notations: an accepted key is not
// empty and reads back the same from the 0x form secrets.conf holds; its
// errors are fixed sentences (they never quote the file); and whatever
// formats a PSK prints "<psk redacted>".
//
//	go test -run '^$' -fuzz '^FuzzParsePSK$' -fuzztime 30s ./internal/swan/
func FuzzParsePSK(f *testing.F) {
	for _, s := range []string{"0x00112233445566778899aabbccddeeff", "0sAAECAwQFBgcICQoLDA0ODw==", "'a text key'", `"0xzz"`, "0s!!", "  ", "''", "0x"} {
		f.Add(s)
	}
	errs := []string{"the key starts with 0x but is not hex", "the key starts with 0s but is not base64", "the key is empty"}
	f.Fuzz(func(t *testing.T, text string) {
		k, err := ParsePSK(text)
		if err != nil {
			if !strings.Contains(strings.Join(errs, "\n"), err.Error()) {
				t.Fatalf("error %q is not one of the fixed sentences", err)
			}
			return
		}
		if len(k.Bytes()) == 0 {
			t.Fatal("an empty key accepted")
		}
		back, err := ParsePSK(k.Hex())
		if err != nil || !bytes.Equal(back.Bytes(), k.Bytes()) {
			t.Fatalf("%q -> %s -> %v", text, k.Hex(), err)
		}
		if len(k.Bytes()) < 4 {
			return // "<psk redacted>" itself holds short hex runs such as "ed"
		}
		h := hex.EncodeToString(k.Bytes())
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
			got := fmt.Sprintf(verb, k) + fmt.Sprintf(verb, struct{ K PSK }{k})
			if strings.Contains(strings.ToLower(got), h) || strings.Contains(got, string(k.Bytes())) || strings.Contains(got, fmt.Sprint([]byte(k.Bytes()))) {
				t.Fatalf("%s shows the key: %s", verb, got)
			}
		}
	})
}

// FuzzLoadSpec checks sluice-swan.json as `swan up --dir` reads it: an
// accepted spec passes Validate again, reads back the same after being
// written, and generates a swanctl.conf with one connection per tunnel
// whose braces balance (a proposal cannot open or close a section).
//
//	go test -run '^$' -fuzz '^FuzzLoadSpec$' -fuzztime 30s ./internal/swan/
func FuzzLoadSpec(f *testing.F) {
	for _, s := range []Spec{
		{Topology: TopologyTest0, Role: RoleGW0, Tunnels: 3, PSKFile: "psk"},
		{Topology: TopologyRouted, Role: RoleGW1, Ports: []int{0, 1}, Tunnels: 2, HWOffload: "crypto", Encap: true, PSKFile: "/etc/k"},
		{Topology: TopologyRouted, Role: RoleGW0, Ports: []int{1}, Tunnels: 255, ESP: "aes128gcm16", IKE: "aes128-sha256-x25519"},
	} {
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	f.Add([]byte(`{"topology":"test0","role":"gw0","tunnels":1,"esp_proposals":"aes\r}"}`))
	f.Add([]byte(`{"topology":"routed","role":"gw0","tunnels":1,"ports":[1,1],"proposals":"aes\u2028x"}`))
	f.Add([]byte(`{"topology":"routed","role":"gw0","tunnels":1,"ports":[0,0]}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, SpecFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := LoadSpec(dir)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("loaded, then refused: %v", err)
		}
		for _, v := range []string{s.ESP, s.IKE} {
			if strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
				t.Fatalf("proposal %q is not one swanctl.conf token", v)
			}
		}
		if s.PSKFile != "" && !filepath.IsAbs(s.PSKFile) {
			t.Fatalf("psk_file %q not absolute", s.PSKFile)
		}
		out, _ := json.Marshal(s)
		if err := os.WriteFile(filepath.Join(dir, SpecFile), out, 0o600); err != nil {
			t.Fatal(err)
		}
		back, err := LoadSpec(dir)
		if err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, back, s)
		}
		if s.Count() > 64 {
			return // keep the executions fast; the addressing tests cover the large counts
		}
		var conf bytes.Buffer
		if err := WriteConf(&conf, s); err != nil {
			t.Fatal(err)
		}
		c := conf.String()
		if strings.Count(c, "{") != strings.Count(c, "}") || strings.Count(c, "children {") != s.Count() {
			t.Fatalf("swanctl.conf for %+v:\n%s", s, c)
		}
		conns := map[string]bool{}
		for _, tn := range s.All() {
			if conns[tn.Conn] {
				t.Fatalf("connection %s twice", tn.Conn)
			}
			conns[tn.Conn] = true
		}
	})
}
