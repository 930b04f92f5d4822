// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/swan"
)

const testPSK = "0x5ec1e75ec1e75ec1e75ec1e75ec1e7aa"

// ikeHost is the ConnectX-6 SR-IOV guide's node A keyed by IKE with a PSK; offload through
// dev, the local address on lo or (local != "") on the bond.
func ikeHost(t *testing.T, offload, dev, extra string, pskMode os.FileMode) *config.Host {
	t.Helper()
	body := strings.Replace(seedHost(offload, dev), "  keys: node-a.keys\n", "  keying: ike\n  ike: {psk: node-a.psk, rekey-time: 10m}\n", 1)
	body = strings.Replace(body, "      spi-out: 0x1001\n      spi-in: 0x1002\n", extra, 1)
	dir := t.TempDir()
	f := filepath.Join(dir, "host.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "node-a.psk")
	if err := os.WriteFile(p, []byte(testPSK+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, pskMode); err != nil {
		t.Fatal(err)
	}
	h, err := config.LoadHost(f)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func planText(p *Plan) string {
	var b strings.Builder
	for _, s := range p.Steps {
		b.WriteString(s.Action + " " + s.Object + ": " + s.Why + "\n" + strings.Join(s.Commands, "\n") + "\n")
	}
	return b.String() + strings.Join(p.Notes, "\n")
}

func TestPlanIKEShowsSwanctlWithoutSecrets(t *testing.T) {
	h := ikeHost(t, "none", "", "", 0o600)
	live := bareLive("6.12.95")
	live.IKE = &IKELive{Children: map[string][]swan.OverlayChild{}}
	p, err := NewPlan(h, nil, live)
	if err != nil {
		t.Fatal(err)
	}
	out := planText(p)
	for _, want := range []string{"create IKE connection sluice-node-a-node-b-", "mode = transport", "local_ts = 192.168.80.2/32", "remote_ts = 192.168.80.3/32",
		"esp_proposals = aes128gcm16-x25519-esn", "replay_window = 64", "hw_offload = no", "start_action = trap", "rekey_time = 600s", "life_time = 660s", "rand_time = 60s",
		"reauth_time = 0", "secret = <redacted: read from", "swanctl --initiate --child sluice-node-a-node-b-"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "5ec1e7") || strings.Contains(out, "xfrm state add") {
		t.Fatalf("the plan shows the PSK or manual SAs:\n%s", out)
	}
	// The IKE steps come before the VTEP, like manual SAs.
	if i, v := strings.Index(out, "IKE connection"), strings.Index(out, "type vxlan"); !(i >= 0 && i < v) {
		t.Fatalf("IKE connection at %d, vxlan at %d", i, v)
	}
}

func TestPlanIKEMatchesWhenLoadedAndInstalled(t *testing.T) {
	h := ikeHost(t, "none", "", "", 0o600)
	o, err := ikeConn(h, &h.IPsec.Peers[0], "none")
	if err != nil {
		t.Fatal(err)
	}
	live := matchingLive(t)
	live.SAs, live.Policies = nil, blockPoliciesLive(h) // sluice's own block policies, in place
	live.IKE = &IKELive{Conns: []string{o.Name, connPrefix(h, "node-b") + "00000000"}, Children: map[string][]swan.OverlayChild{o.Name: {{State: "INSTALLED"}}}}
	p, err := NewPlan(h, nil, live)
	if err != nil {
		t.Fatal(err)
	}
	out := planText(p)
	if len(p.Steps) != 1 || !strings.Contains(out, "delete IKE connection sluice-node-a-node-b-00000000") {
		t.Fatalf("want only the stale connection replaced:\n%s", out)
	}
}

func TestPlanIKERefusals(t *testing.T) {
	for _, tc := range []struct {
		name, offload, dev string
		mode               os.FileMode
		release, want      string
	}{
		{"psk readable by group", "none", "", 0o640, "6.12.95", "secret refused: "},
		{"crypto through the bond on 6.12", "crypto", "bond0", 0o600, "6.12.95", "offload crypto refused: ESP offload through bond bond0 is broken on Linux 6.12.95"},
		{"local address not on the offload device", "crypto", "bond0", 0o600, "6.18.0", "needs local 192.168.80.2 on offload-dev bond0: strongSwan offloads an SA to the interface that holds its local address"},
		{"charon not running", "none", "", 0o600, "6.12.95", "keying: ike needs charon at unix:///var/run/charon.vici"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := ikeHost(t, tc.offload, tc.dev, "", tc.mode)
			live := bareLive(tc.release)
			live.IKE = &IKELive{Children: map[string][]swan.OverlayChild{}}
			if tc.name == "charon not running" {
				live.IKE.Err = swan.ErrNoCharon
			}
			_, err := NewPlan(h, nil, live)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPlanIKEOffloadMapping(t *testing.T) {
	for offload, want := range map[string]string{"none": "no", "crypto": "yes", "packet": "packet", "auto": "auto"} {
		if got := swan.HWOffloadFor(offload); got != want {
			t.Errorf("offload %s -> hw_offload %q, want %q", offload, got, want)
		}
	}
	// packet on a port holding the local address: generated as asked,
	// with the strongSwan 6 note (5.9.8 refuses it at load time).
	h := ikeHost(t, "packet", "bond0", "", 0o600)
	h.Uplinks.Addresses = append(h.Uplinks.Addresses, netip.PrefixFrom(h.IPsec.Peers[0].Local, 32))
	live := bareLive("6.18.0")
	live.IKE = &IKELive{Children: map[string][]swan.OverlayChild{}}
	p, err := NewPlan(h, nil, live)
	if err != nil {
		t.Fatal(err)
	}
	out := planText(p)
	for _, want := range []string{"hw_offload = packet", "needs strongSwan 6"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
}
