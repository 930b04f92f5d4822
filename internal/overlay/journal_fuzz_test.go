// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"unicode"

	"sluice/internal/config"
)

// FuzzLoadJournal reads apply's journal from any bytes. What loads must
// survive its own writer (load -> save -> load gives the same journal),
// and a teardown planned from it must not panic and must print only
// single-line commands without control characters: the journal's names
// and old values go into those commands and into sysfs paths.
//
//	go test -run '^$' -fuzz '^FuzzLoadJournal$' -fuzztime 30s ./internal/overlay/
func FuzzLoadJournal(f *testing.F) {
	seed := Journal{Name: "node-a", File: "/etc/sluice/host.yaml", Netns: "4026531840",
		Created: []entry{{Kind: kindLink, Link: "vxlan1"}, {Kind: kindAddr, Link: "lo", Prefix: "192.168.80.2/32"},
			{Kind: kindRoute, Prefix: "192.168.80.3/32", Via: "192.168.70.3", Src: "192.168.80.2"},
			{Kind: kindSA, Src: "192.168.80.2", Dst: "192.168.80.3", SPI: 0x1001},
			{Kind: kindPolicy, Src: "192.168.80.2/32", Dst: "192.168.80.3/32", Dir: "out"}, {Kind: kindLink, Link: "bond0"}},
		Changed: []entry{{Kind: kindMTU, Link: "p0", Old: "1500", New: "9216"}, {Kind: kindUp, Link: "p1"},
			{Kind: kindMaster, Link: "p0", OldUp: true}, {Kind: kindFeature, Link: "p0", Name: "esp-hw-offload", Old: "off", New: "on"},
			{Kind: kindNumVFs, Link: "p0", Old: "0", New: "2"}, {Kind: kindEswitch, Handle: "pci/0000:03:00.0", Old: "legacy", New: "switchdev"},
			{Kind: kindParam, Handle: "pci/0000:03:00.0", Name: "flow_steering_mode", Old: "dmfs", New: "smfs"},
			{Kind: kindVF, Link: "p0", VF: 1, Old: "02:00:00:00:00:01", New: "02:00:00:00:00:02"},
			{Kind: kindCaps, Handle: "pci/0000:03:00.0", VF: 0, Old: "0", New: "3"},
			{Kind: kindPrivFlag, Link: "p0", Name: "vf-ipsec", Old: "off", New: "on"}}}
	b, _ := json.MarshalIndent(seed, "", "  ")
	f.Add(b)
	f.Add([]byte(`{"name":"x","created":[{"kind":"link","link":"../../x"}],"changed":[{"kind":"mtu","link":"p0","old":"1500\nrm -rf /","new":"9216"}]}`))
	f.Add([]byte(`{"changed":null,"created":[{}]}`))
	dir := f.TempDir()
	h, err := config.ParseHost([]byte(seedHost("packet", "p0")), "host.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(JournalPath(dir, "fuzz"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		j, exists, err := LoadJournal(dir, "fuzz", "host.yaml")
		if err != nil {
			if j != nil || !strings.HasPrefix(err.Error(), "journal "+JournalPath(dir, "fuzz")) {
				t.Fatalf("journal %v and error %q", j, err)
			}
			return
		}
		if !exists || j.path != JournalPath(dir, "fuzz") {
			t.Fatalf("exists %v path %q", exists, j.path)
		}
		if err := j.save(); err != nil {
			t.Fatal(err)
		}
		back, _, err := LoadJournal(dir, "fuzz", "host.yaml")
		if err != nil || !reflect.DeepEqual(back, j) {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, back, j)
		}
		for _, s := range NewTeardown(h, matchingLive(t), j, true).Steps {
			for _, c := range s.Commands {
				if strings.IndexFunc(c, unicode.IsControl) >= 0 {
					t.Fatalf("step %q has the command %q", s.Object, c)
				}
			}
		}
	})
}
