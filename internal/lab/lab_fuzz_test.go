// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzParseLab reads lab.json (what `lab status`, `bench` and `lab down`
// trust) from any bytes. What it accepts is a lab Up could have written:
// its spec passes Validate, its namespaces are sl-NAME-ROLE for exactly
// its topology's roles; it reads back the same after being written; and
// every refusal is errBadLabFile, which `lab down` still cleans up.
//
//	go test -run '^$' -fuzz '^FuzzParseLab$' -fuzztime 30s ./internal/lab/
func FuzzParseLab(f *testing.F) {
	for _, s := range []Spec{{Name: "lab", Topology: Forwarder, Forwarder: FwdSluice}, {Name: "lab", Topology: GatewayPair, Tunnels: 3},
		{Name: "lab", Topology: OverlayPair, Tunnels: 2}} {
		if err := s.Validate(); err != nil {
			f.Fatal(err)
		}
		p, _ := buildPlan(s)
		l := &Lab{Spec: s, Namespaces: map[string]string{}, Roles: p.roles, Created: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC),
			Daemons: map[string]int{"dut": 1234}}
		for _, r := range p.roles {
			l.Namespaces[r] = nsName(s.Name, r)
		}
		b, _ := json.Marshal(l)
		f.Add(b)
	}
	f.Add([]byte(`{"name":"lab","topology":"gateway-pair","tunnels":400000000,"roles":["gen"],"namespaces":{"gen":"sl-lab-gen"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := parseLab(b, "lab", "lab.json")
		if err != nil {
			if l != nil || !errors.Is(err, errBadLabFile) || !strings.HasPrefix(err.Error(), "lab.json: ") {
				t.Fatalf("lab %v, error %v", l, err)
			}
			return
		}
		s := l.Spec
		if err := s.Validate(); err != nil || l.Name != "lab" || len(l.Namespaces) != len(l.Roles) {
			t.Fatalf("accepted %+v: %v", l, err)
		}
		for r, ns := range l.Namespaces {
			if ns != nsName("lab", r) {
				t.Fatalf("namespace %q for %s", ns, r)
			}
		}
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		// Compared as JSON: "daemons": {} comes back as no map (omitempty).
		back, err := parseLab(out, "lab", "lab.json")
		if err != nil {
			t.Fatalf("round trip: %v", err)
		}
		again, _ := json.Marshal(back)
		if string(again) != string(out) || !reflect.DeepEqual(back.plan, l.plan) {
			t.Fatalf("round trip:\n got %s\nwant %s", again, out)
		}
	})
}
