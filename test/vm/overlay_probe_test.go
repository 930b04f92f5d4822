//go:build vmtest

// SPDX-License-Identifier: Apache-2.0

package vm

import (
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/testutil"
)

// ovProbeHost is host A of the subnet probe: one model port, a tunnel
// whose selectors are subnets, packet offload, ESN (no anti-replay note).
const ovProbeHost = `name: a
uplinks:
  ports: [a0]
  addresses: [192.168.70.1/24]
ipsec:
  keys: a.keys
  peers:
    - name: peer
      local: 192.168.70.1
      remote: 192.168.70.2
      spi-out: 0x1001
      spi-in: 0x2001
      mode: tunnel
      esn: true
      replay-window: 64
      offload: packet
      offload-dev: a0
      selectors: [{local: 10.0.0.0/24, remote: 10.1.0.0/16}]
      accept-leaks: [exact-selector-match]
`

// TestOverlaySubnetProbe: `verify --traffic` sends datagrams to 10.1.0.1,
// inside the 10.1.0.0/16 selector, and reads the port's ESP counter. On
// a model that matches prefixes (mlx5-upstream) the probe passes; under
// mlx5-6.12, which matches the selector's addresses exactly, it fails
// and says so, and the model's cleartext counter shows the datagrams left
// unencrypted. The profile is switched through testutil, never by
// writing the module parameter: the first model load of the process sets
// the lab's profile and would undo a write made before it.
func TestOverlaySubnetProbe(t *testing.T) {
	l := newLab(t)
	for _, c := range []struct {
		profile  string
		encrypts bool
	}{{testutil.ProfileMlx5Upstream, true}, {testutil.ProfileMlx5_612, false}} {
		profile, encrypts := c.profile, c.encrypts
		step(t, "profile "+profile, func(t *testing.T) {
			testutil.UseNicmodelProfile(t, profile)
			a, b := l.netns(t), l.netns(t)
			l.nicPairNamed(t, a, "a0", b, "b0")
			dir := t.TempDir()
			ovWrite(t, filepath.Join(dir, "a.keys"), "peer out "+ovKeyAB+"\npeer in "+ovKeyBA+"\n", 0o600)
			af := filepath.Join(dir, "a.yaml")
			ovWrite(t, af, ovProbeHost, 0o644)
			// The probe's source inside the local selector; the route and a
			// neighbour for the inner destination (6.12 sends locally made
			// tunnel-mode packets to the inner address as next hop).
			nsRun(t, a, "ip", "addr", "add", "10.0.0.5/32", "dev", "lo")
			ovMust(t, a, "apply", "-f", af)
			nsRun(t, a, "ip", "route", "replace", "10.1.0.0/16", "dev", "a0", "src", "10.0.0.5")
			nsRun(t, a, "ip", "neigh", "replace", "10.1.0.1", "lladdr", macOf(t, b, "b0"), "dev", "a0", "nud", "permanent")
			before := ethStats(t, a, "a0")
			// The IN SA counts nothing (B runs no tunnel): verify exits 3
			// on the traffic check whatever the probe says.
			out, _ := ovSluice(t, a, "verify", "-f", af, "--traffic", "--window", "1s")
			t.Logf("%s", out)
			d := statDelta(before, ethStats(t, a, "a0"), "tx_ipsec_packets", "tx_cleartext_packets")
			probe := ""
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "probe datagrams") {
					probe = line
				}
			}
			if encrypts {
				mustContain(t, probe, "encrypts the whole subnet")
				if d["tx_ipsec_packets"] < 20 {
					t.Errorf("a0 %v: the probe's 20 datagrams were not encrypted", d)
				}
				return
			}
			mustContain(t, probe, "matches the selector's addresses exactly", "/32 selectors")
			if d["tx_cleartext_packets"] < 20 {
				t.Errorf("a0 %v: the probe reported a leak the model did not count", d)
			}
		})
	}
}
