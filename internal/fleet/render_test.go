// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sluice/internal/config"
	"sluice/internal/fleet/v1alpha1"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func host(name, vtep, under string, age int, lbl map[string]string) v1alpha1.Host {
	if lbl == nil {
		lbl = map[string]string{"sluice.dev/overlay": "prod"}
	}
	return v1alpha1.Host{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec: v1alpha1.HostSpec{VTEP: vtep, Underlay: v1alpha1.Underlay{Address: under, Interface: "eth0"}}}
}

func overlay(name string, age int, vnis ...uint32) v1alpha1.Overlay {
	o := v1alpha1.Overlay{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sluice-system", CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec: v1alpha1.OverlaySpec{Members: metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/overlay": "prod"}},
			VTEPPool: "10.99.0.0/24", Keying: v1alpha1.OverlayKeying{Mode: "ike"}, Offload: v1alpha1.OffloadPreferPacket, InitiationWindowSeconds: 30}}
	for i, v := range vnis {
		o.Spec.Segments = append(o.Spec.Segments, v1alpha1.Segment{Name: "seg" + string(rune('a'+i)), VNI: v})
	}
	return o
}

var local = Local{Name: "a", CA: "/etc/sluice/ca.pem", Cert: "/etc/sluice/host.pem", PrivKey: "/etc/sluice/host.key"}

// Every member computes its own peers from the same objects: each peers
// with all the others, the pair's lower name initiates, both agree on the
// slot, and the document is one the engine's parser accepts.
func TestRenderMesh(t *testing.T) {
	hosts := []v1alpha1.Host{host("a", "10.99.0.1", "192.0.2.1/24", 0, nil), host("b", "10.99.0.2", "192.0.2.2/24", 1, nil),
		host("c", "10.99.0.3", "198.51.100.3/24", 2, nil), host("x", "10.99.0.9", "192.0.2.9/24", 3, map[string]string{"other": "1"})}
	// Two subnets: each has a gateway to the other (without one, the
	// other subnet's hosts are left out: TestRenderUnreachablePeerLeftOut).
	for i, gw := range []string{"192.0.2.254", "192.0.2.254", "198.51.100.254", "192.0.2.254"} {
		hosts[i].Spec.Underlay.Gateway = gw
	}
	ovs := []v1alpha1.Overlay{overlay("prod", 0, 100, 200)}
	for _, self := range []string{"a", "b", "c"} {
		l := local
		l.Name = self
		d := Render(self, ovs, hosts, l)
		if d.Refused || len(d.Problems) > 0 {
			t.Fatalf("%s: refused %v: %v", self, d.Refused, d.Problems)
		}
		if len(d.Peers) != 2 {
			t.Fatalf("%s: peers %v", self, d.Peers)
		}
		h, err := config.ParseHost(d.Doc, "x.yaml")
		if err != nil {
			t.Fatalf("%s: %v\n%s", self, err, d.Doc)
		}
		if len(h.VTEPs) != 2 || len(h.VTEPs[0].Remotes) != 2 || len(h.IPsec.Peers) != 2 || h.IPsec.Peers[0].Keying != config.KeyingIKE ||
			h.IPsec.Peers[0].Offload != config.OffloadModeAuto || h.VTEPs[0].Type != config.VTEPVXLAN ||
			h.IPsec.Peers[0].Mode != config.ModeTransport || h.IPsec.Peers[0].KeyBits != 128 {
			t.Fatalf("%s: %+v", self, h)
		}
		for _, p := range d.Peers {
			if p.Initiator != (self < p.Name) || p.Slot != Slot(p.Name, self, 30*time.Second) {
				t.Errorf("%s-%s: initiator %v slot %v", self, p.Name, p.Initiator, p.Slot)
			}
		}
		if pr := h.IPsec.Peers[0]; pr.LocalID != self || pr.RemoteID != pr.Name || pr.OffloadDev != "eth0" || h.IPsec.IKE.CA != l.CA || h.IPsec.IKE.Cert != l.Cert {
			t.Errorf("%s: peer %+v ike %+v:\n%s", self, pr, h.IPsec.IKE, d.Doc)
		}
		if strings.Contains(string(d.Doc), "10.99.0.9") {
			t.Errorf("%s: host x is not a member:\n%s", self, d.Doc)
		}
	}
	// c is in another subnet: a's route to it goes via a's gateway.
	hosts[0].Spec.Underlay.Gateway = "192.0.2.254"
	d := Render("a", ovs, hosts, local)
	h, err := config.ParseHost(d.Doc, "a.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, d.Doc)
	}
	routes := map[string]string{}
	for _, r := range h.VTEPs[0].Remotes {
		routes[r.Address.String()] = r.Via.String()
	}
	if routes["10.99.0.3"] != "192.0.2.254" || routes["10.99.0.2"] != "192.0.2.2" {
		t.Errorf("routes %v, want 10.99.0.3 via 192.0.2.254 and 10.99.0.2 via 192.0.2.2:\n%s", routes, d.Doc)
	}
}

// A host claiming another's VTEP is left out by everyone, and its own
// agent refuses to change anything; the first claimant keeps working.
func TestRenderVTEPClaim(t *testing.T) {
	hosts := []v1alpha1.Host{host("a", "10.99.0.1", "192.0.2.1/24", 0, nil), host("b", "10.99.0.2", "192.0.2.2/24", 1, nil),
		host("evil", "10.99.0.1", "192.0.2.66/24", 2, nil)}
	ovs := []v1alpha1.Overlay{overlay("prod", 0, 100)}
	d := Render("a", ovs, hosts, local)
	if d.Refused || len(d.Peers) != 1 || d.Peers[0].Name != "b" || !strings.Contains(strings.Join(d.Problems, "\n"), "host evil left out: spec.vtep 10.99.0.1 is already claimed by host a") {
		t.Fatalf("a: %+v", d)
	}
	d = Render("evil", ovs, hosts, local)
	if !d.Refused || d.Doc != nil || !strings.Contains(strings.Join(d.Problems, "\n"), "this host is left out") {
		t.Fatalf("evil: %+v", d)
	}
}

// Two overlays selecting one host: the older wins, the other is reported.
func TestRenderTwoOverlays(t *testing.T) {
	hosts := []v1alpha1.Host{host("a", "10.99.0.1", "192.0.2.1/24", 0, nil), host("b", "10.99.0.2", "192.0.2.2/24", 1, nil)}
	ovs := []v1alpha1.Overlay{overlay("late", 5, 100), overlay("first", 1, 100)}
	d := Render("a", ovs, hosts, local)
	if d.Overlay == nil || d.Overlay.Name != "first" || !strings.Contains(strings.Join(d.Problems, "\n"), "overlay late also selects this host") {
		t.Fatalf("%+v", d)
	}
}

// The slots of a 100-host mesh's 4,950 pairs spread over the window: no
// second holds more than 3x its share.
func TestSlotSpread(t *testing.T) {
	const n, window = 100, 60
	perSec := make([]int, window)
	pairs := 0
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			s := Slot(name(i), name(j), window*time.Second)
			if s != Slot(name(j), name(i), window*time.Second) {
				t.Fatal("slot depends on the order")
			}
			perSec[int(s/time.Second)]++
			pairs++
		}
	}
	for s, c := range perSec {
		if c > 3*pairs/window {
			t.Errorf("second %d holds %d of %d initiations", s, c, pairs)
		}
	}
}

func name(i int) string { return "hv-" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }

// A Host being deleted (a finalizer holds it) is a member of no overlay:
// no other member peers or routes to it, and its own agent sees no
// overlay (so it leaves, like a relabelled host).
func TestRenderIgnoresDeletingHost(t *testing.T) {
	hosts := []v1alpha1.Host{host("a", "10.99.0.1", "192.0.2.1/24", 0, nil), host("b", "10.99.0.2", "192.0.2.2/24", 1, nil),
		host("gone", "10.99.0.7", "192.0.2.7/24", 2, nil)}
	now := metav1.NewTime(t0.Add(time.Hour))
	hosts[2].DeletionTimestamp = &now
	hosts[2].Finalizers = []string{"example.com/hold"}
	ovs := []v1alpha1.Overlay{overlay("prod", 0, 100)}
	d := Render("a", ovs, hosts, local)
	if d.Refused || len(d.Peers) != 1 || d.Peers[0].Name != "b" || strings.Contains(string(d.Doc), "10.99.0.7") {
		t.Fatalf("a peers with a host being deleted: %+v\n%s", d.Peers, d.Doc)
	}
	if d := Render("gone", ovs, hosts, local); d.Overlay != nil || d.Doc != nil {
		t.Fatalf("a host being deleted is still a member of %v:\n%s", d.Overlay.Name, d.Doc)
	}
}

// A host in another subnet, and no gateway to it: every member's route to
// its VTEP would name an off-link next hop, which the kernel refuses, and
// the whole apply would fail and roll back on every member. It is left
// out alone, with the reason, and the rest of the mesh is rendered.
func TestRenderUnreachablePeerLeftOut(t *testing.T) {
	hosts := []v1alpha1.Host{host("a", "10.99.0.1", "192.0.2.1/24", 0, nil), host("b", "10.99.0.2", "192.0.2.2/24", 1, nil),
		host("far", "10.99.0.3", "198.51.100.3/24", 2, nil)}
	ovs := []v1alpha1.Overlay{overlay("prod", 0, 100)}
	d := Render("a", ovs, hosts, local)
	if d.Refused || len(d.Peers) != 1 || d.Peers[0].Name != "b" || strings.Contains(string(d.Doc), "198.51.100.3") {
		t.Fatalf("a: refused %v peers %+v:\n%s", d.Refused, d.Peers, d.Doc)
	}
	if len(d.LeftOut) != 1 || !strings.Contains(d.LeftOut[0], "host far left out: its underlay address 198.51.100.3 is outside this host's underlay subnet 192.0.2.0/24 and this host has no spec.underlay.gateway") {
		t.Fatalf("a: left out %q", d.LeftOut)
	}
	if _, err := config.ParseHost(d.Doc, "a.yaml"); err != nil {
		t.Fatal(err)
	}
	// With a gateway, far is a peer again, routed through it.
	hosts[0].Spec.Underlay.Gateway = "192.0.2.254"
	if d := Render("a", ovs, hosts, local); len(d.Peers) != 2 || len(d.LeftOut) != 0 {
		t.Fatalf("a with a gateway: peers %+v, left out %q", d.Peers, d.LeftOut)
	}
}

// The overlay's VTEP pool is the administrator's: a member whose VTEP lies
// outside it (a storage VIP, a DNS server) is left out by every agent, so
// no member routes that address to it, and its own agent applies nothing.
func TestRenderVTEPOutsidePoolLeftOut(t *testing.T) {
	hosts := []v1alpha1.Host{host("a", "10.99.0.1", "192.0.2.1/24", 0, nil), host("b", "10.99.0.2", "192.0.2.2/24", 1, nil),
		host("vip", "10.20.30.40", "192.0.2.66/24", 2, nil)}
	ovs := []v1alpha1.Overlay{overlay("prod", 0, 100)}
	d := Render("a", ovs, hosts, local)
	if d.Refused || len(d.Peers) != 1 || d.Peers[0].Name != "b" || strings.Contains(string(d.Doc), "10.20.30.40") {
		t.Fatalf("a peers with a VTEP outside the pool: %+v\n%s", d.Peers, d.Doc)
	}
	if !strings.Contains(strings.Join(d.Problems, "\n"), "host vip left out: spec.vtep 10.20.30.40 is outside the overlay's vtepPool 10.99.0.0/24") {
		t.Fatalf("a: problems %q", d.Problems)
	}
	if d := Render("vip", ovs, hosts, local); !d.Refused || d.Doc != nil {
		t.Fatalf("vip applies a VTEP outside the pool: %+v", d)
	}
	// An overlay without a pool (the CRD requires one) renders nothing.
	ovs[0].Spec.VTEPPool = ""
	if d := Render("a", ovs, hosts, local); !d.Refused || d.Doc != nil {
		t.Fatalf("an overlay without a pool was rendered: %+v", d)
	}
}

// A member the agent found it must leave out (Local.LeaveOut: a route on
// this host to its VTEP that sluice did not make) goes alone, with the
// reason; the other pairs are rendered.
func TestRenderLeaveOut(t *testing.T) {
	hosts := []v1alpha1.Host{host("a", "10.99.0.1", "192.0.2.1/24", 0, nil), host("b", "10.99.0.2", "192.0.2.2/24", 1, nil),
		host("c", "10.99.0.3", "192.0.2.3/24", 2, nil)}
	l := local
	l.LeaveOut = map[string]string{"c": "a route it did not make"}
	d := Render("a", []v1alpha1.Overlay{overlay("prod", 0, 100)}, hosts, l)
	if d.Refused || len(d.Peers) != 1 || d.Peers[0].Name != "b" || strings.Contains(string(d.Doc), "10.99.0.3") {
		t.Fatalf("peers %+v:\n%s", d.Peers, d.Doc)
	}
	if len(d.LeftOut) != 1 || d.LeftOut[0] != "host c left out: a route it did not make" {
		t.Fatalf("left out %q", d.LeftOut)
	}
}
