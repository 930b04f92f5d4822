// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// addDocBlocks seeds f with every ```lang block of docs/name.
func addDocBlocks(f *testing.F, name, lang string) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
	if err != nil {
		f.Fatal(err)
	}
	for _, block := range bytes.Split(data, []byte("```"+lang+"\n"))[1:] {
		if end := bytes.Index(block, []byte("```")); end >= 0 {
			f.Add(block[:end])
		}
	}
}

// FuzzParseHost checks that ParseHost either returns a Host that keeps
// every rule its validation promises (so plan never meets a half-valid
// file), or a *ValidationErrors of single-line messages sorted by line;
// never both, never a panic.
//
//	go test -run '^$' -fuzz '^FuzzParseHost$' -fuzztime 30s ./internal/config/
func FuzzParseHost(f *testing.F) {
	f.Add([]byte(hostSeed000))
	f.Add([]byte(""))
	f.Add([]byte("- a\n"))
	f.Add([]byte(lines("ipsec:", "  keys: k", "  peers:", "    - {name: b, local: 10.0.0.1, remote: 10.0.0.2, spi-out: 1, spi-in: 2, mode: tunnel,",
		"       selectors: [{local: 10.1.0.0/16, remote: 10.2.0.0/16}], esn: true, replay-window: 4096, key-bits: 256}")))
	f.Add([]byte(lines("ipsec:", "  keys: k", "  peers: [{name: b, local: '::ffff:10.0.0.1', remote: '::ffff:10.0.0.2', spi-out: 1, spi-in: 2}]")))
	f.Add([]byte(lines("vteps:", "  - {name: gv0, type: geneve, vni: 7, local: fd00::1, remotes: [{address: fd00::2, via: fe80::1}], geneve-options: 8}")))
	addDocBlocks(f, "overlay.md", "yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHost(data, "fuzz.yaml")
		if err != nil {
			if h != nil {
				t.Fatalf("got a Host and an error")
			}
			checkErrors(t, data, nil, err)
			return
		}
		checkHost(t, h)
	})
}

// checkHost asserts the rules on an accepted host.yaml.
func checkHost(t *testing.T, h *Host) {
	t.Helper()
	if !nameRE.MatchString(h.Name) {
		t.Fatalf("name %q", h.Name)
	}
	if h.Uplinks == nil && len(h.SRIOV) == 0 && len(h.VTEPs) == 0 && h.IPsec == nil {
		t.Fatalf("an empty host accepted")
	}
	devs := map[string]bool{}
	claim := func(name string) {
		if name == "" || devs[name] {
			t.Fatalf("device name %q empty or used twice", name)
		}
		devs[name] = true
	}
	if u := h.Uplinks; u != nil {
		if len(u.Ports) == 0 {
			t.Fatalf("uplinks without ports")
		}
		for _, p := range u.Ports {
			claim(p)
		}
		if b := u.Bond; b != nil {
			claim(b.Name)
			if b.Mode != BondModeActiveBackup || (b.Primary != "" && !slices.Contains(u.Ports, b.Primary)) {
				t.Fatalf("bond %+v over %q", b, u.Ports)
			}
		}
		checkPrefixes(t, u.Addresses)
	}
	pfs := map[string]bool{}
	for _, s := range h.SRIOV {
		if s.PF == "" || pfs[s.PF] {
			t.Fatalf("sriov pf %q empty or twice", s.PF)
		}
		pfs[s.PF] = true
		if len(s.VF) > 0 && s.VFs == nil {
			t.Fatalf("per-VF settings without vfs")
		}
		for _, vf := range s.VF {
			if vf.Index < 0 || (s.VFs != nil && vf.Index >= *s.VFs) {
				t.Fatalf("VF index %d of %v", vf.Index, s.VFs)
			}
		}
	}
	for _, v := range h.VTEPs {
		claim(v.Name)
		if (v.Type != VTEPVXLAN && v.Type != VTEPGeneve) || !v.Local.IsValid() || v.Local.Is4In6() || v.Port == 0 || len(v.Remotes) == 0 {
			t.Fatalf("vtep %+v", v)
		}
		for _, r := range v.Remotes {
			if !r.Address.IsValid() || r.Address.Is4() != v.Local.Is4() || r.Address == v.Local || (r.Via.IsValid() && r.Via.Is4() != r.Address.Is4()) {
				t.Fatalf("vtep %s remote %+v from %s", v.Name, r, v.Local)
			}
		}
		checkPrefixes(t, v.Addresses)
	}
	if s := h.IPsec; s != nil {
		if h.HasKeying(KeyingManual) && s.Keys == "" {
			t.Fatalf("manual peers without a key file")
		}
		if h.HasKeying(KeyingIKE) && (s.IKE == nil || (s.IKE.PSK == "") == (s.IKE.CA == "" || s.IKE.Cert == "" || s.IKE.PrivateKey == "") || (s.IKE.RekeyTime > 0 && s.IKE.LifeTime <= s.IKE.RekeyTime)) {
			t.Fatalf("IKE peers with ike %+v", s.IKE)
		}
		names := map[string]bool{}
		for _, p := range s.Peers {
			if !nameRE.MatchString(p.Name) || names[p.Name] {
				t.Fatalf("peer name %q", p.Name)
			}
			names[p.Name] = true
			if !p.Local.IsValid() || !p.Remote.IsValid() || p.Local.Is4() != p.Remote.Is4() || p.Local == p.Remote || p.Local.Is4In6() || p.Remote.Is4In6() {
				t.Fatalf("peer %s: %s -> %s", p.Name, p.Local, p.Remote)
			}
			if (p.Keying == KeyingManual && (p.SPIOut == 0 || p.SPIIn == 0)) || (p.Keying != KeyingManual && p.Keying != KeyingIKE) || (p.Mode != ModeTransport && p.Mode != ModeTunnel) || (p.KeyBits != 128 && p.KeyBits != 256) {
				t.Fatalf("peer %+v", p)
			}
			if (p.ESN && (p.ReplayWindow == 0 || p.ReplayWindow > MaxESNReplay)) || (!p.ESN && p.ReplayWindow > MaxLegacyReplay) || p.ReplayWindow < 0 {
				t.Fatalf("peer %s: esn %v replay-window %d", p.Name, p.ESN, p.ReplayWindow)
			}
			switch p.Offload {
			case OffloadModeNone:
				if p.OffloadDev != "" {
					t.Fatalf("offload-dev with offload none")
				}
			case OffloadModeCrypto, OffloadModePacket, OffloadModeAuto:
				if p.OffloadDev == "" {
					t.Fatalf("offload %s without a device", p.Offload)
				}
			default:
				t.Fatalf("offload %q", p.Offload)
			}
			if len(p.Selectors) > 0 && p.Mode != ModeTunnel {
				t.Fatalf("selectors in %s mode", p.Mode)
			}
			for _, sel := range p.Selectors {
				if !sel.Local.IsValid() || !sel.Remote.IsValid() || sel.Local.Addr().Is4() != sel.Remote.Addr().Is4() {
					t.Fatalf("selector %+v", sel)
				}
			}
		}
	}
}

func checkPrefixes(t *testing.T, ps []netip.Prefix) {
	t.Helper()
	seen := map[netip.Addr]bool{}
	for _, p := range ps {
		if !p.IsValid() || seen[p.Addr()] || p.Addr().Is4In6() {
			t.Fatalf("address %s invalid or listed twice", p)
		}
		seen[p.Addr()] = true
	}
}
