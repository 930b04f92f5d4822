// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"fmt"
	"os"
	"testing"

	"sluice/internal/config"
	"sluice/internal/testutil"
)

// TestOverlayFiles: the host files the overlay-pair writes are valid
// host.yaml for 'sluice apply' (the same parser and validation), mirror
// each other (one side's out SPI and key is the other's in), follow the
// seeds' plan, and survive a second write unchanged.
func TestOverlayFiles(t *testing.T) {
	testutil.RequireRoot(t, "writes under /run/sluice/lab")
	l := &Lab{Spec: Spec{Name: fmt.Sprintf("t%d", os.Getpid()%100000), Topology: OverlayPair, Tunnels: 300}}
	t.Cleanup(func() { os.RemoveAll(l.Dir()) })
	if err := l.writeOverlayFiles(); err != nil {
		t.Fatal(err)
	}
	var hosts [2]*config.Host
	var keys [2]*config.Keys
	for side, role := range []string{"h0", "h1"} {
		h, err := config.LoadHost(l.overlayFile(role))
		if err != nil {
			t.Fatalf("%s: %v", role, err)
		}
		ks, err := config.LoadKeys(h.KeysPath())
		if err != nil {
			t.Fatalf("%s keys: %v", role, err)
		}
		hosts[side], keys[side] = h, ks
		if len(h.VTEPs) != 300 || len(h.IPsec.Peers) != 300 {
			t.Fatalf("%s: %d VTEPs, %d peers, want 300 each", role, len(h.VTEPs), len(h.IPsec.Peers))
		}
	}
	// Tunnel 300: VNI 300, h0's VTEP 123.0.0.1, h1's 123.0.1.46 (the
	// seeds' 123.0.(i/255).(i%255+1)), overlay 48.1.44.0/24.
	v0, v1 := hosts[0].VTEPs[299], hosts[1].VTEPs[299]
	if v0.VNI != 300 || v0.Local.String() != "123.0.0.1" || v0.Remotes[0].Address.String() != "123.0.1.46" ||
		v1.Local.String() != "123.0.1.46" || v0.Addresses[0].String() != "48.1.44.1/24" || v1.Addresses[0].String() != "48.1.44.2/24" {
		t.Fatalf("tunnel 300: h0 %+v, h1 %+v", v0, v1)
	}
	for i := range hosts[0].IPsec.Peers {
		p0, p1 := hosts[0].IPsec.Peers[i], hosts[1].IPsec.Peers[i]
		if p0.SPIOut != p1.SPIIn || p0.SPIIn != p1.SPIOut || p0.Local != p1.Remote {
			t.Fatalf("tunnel %d: h0 %+v does not mirror h1 %+v", i+1, p0, p1)
		}
		out0, in0, err := keys[0].PeerKeys(p0.Name, 128)
		if err != nil {
			t.Fatal(err)
		}
		out1, in1, err := keys[1].PeerKeys(p1.Name, 128)
		if err != nil {
			t.Fatal(err)
		}
		if !out0.Equal(in1) || !in0.Equal(out1) || out0.Equal(in0) {
			t.Fatalf("tunnel %d: keys do not mirror, or one key serves both directions", i+1)
		}
	}
	before, _ := os.ReadFile(hosts[0].KeysPath())
	if err := l.writeOverlayFiles(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(hosts[0].KeysPath()); string(after) != string(before) {
		t.Fatalf("a second 'lab up' changed the keys")
	}
}
