// SPDX-License-Identifier: Apache-2.0

package testutil

import "testing"

// TestWireOracleOnVeth: the capture sees what arrives on a device in
// another namespace, classified, and leaves out what the device sends.
func TestWireOracleOnVeth(t *testing.T) {
	a, _ := NewNetNS(t)
	b, _ := NewNetNS(t)
	Veth(t, a, "wa", "10.99.0.1/24", b, "wb", "10.99.0.2/24")
	Run(t, "ip", "-n", a, "neigh", "replace", "10.99.0.2", "lladdr", MacOf(t, b, "wb"), "dev", "wa", "nud", "permanent")
	Run(t, "ip", "-n", b, "neigh", "replace", "10.99.0.1", "lladdr", MacOf(t, a, "wa"), "dev", "wb", "nud", "permanent")
	o := StartWireOracle(t, b, "wb")
	m := o.Drain(t)
	if out, err := Try("ip", "netns", "exec", a, "ping", "-c", "3", "-i", "0.2", "-W", "1", "10.99.0.2"); err != nil {
		t.Fatalf("ping a -> b: %v\n%s", err, out)
	}
	leaks := o.Leaks(t, m, FlowOf("10.99.0.1", "10.99.0.2"))
	if len(leaks) != 3 {
		t.Errorf("3 pings a -> b: the oracle on wb saw %d cleartext frames of the flow, want 3 (%s)",
			len(leaks), Tally(o.Since(m), Flow{}))
	}
	if n := len(o.Leaks(t, m, FlowOf("10.99.0.2", "10.99.0.1"))); n != 0 {
		t.Errorf("the oracle counted %d frames wb sent", n)
	}
}
