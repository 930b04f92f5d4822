// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sluice/internal/kernel"
)

// The overlay-pair plan: the ConnectX-6 SR-IOV guide's two hosts, joined by one underlay link
// (192.168.70.0/24, as the BlueField-3 benchmark's bonds), with tunnel i a VXLAN (VNI i)
// between h0's VTEP 123.0.0.1 and h1's TunnelPeer(i), carried in ESP
// transport mode, and overlay subnet TunnelSubnet(i): h0 .1, h1 .2.
var (
	OverlayUnderlay0 = netip.MustParseAddr("192.168.70.2")
	OverlayUnderlay1 = netip.MustParseAddr("192.168.70.3")
)

// OverlayMTU is the underlay MTU of overlay-pair (the ConnectX-6 SR-IOV guide's 9216): the
// VTEPs get the largest MTU that fits it after VXLAN and ESP.
const OverlayMTU = 9216

// OverlayAddr is side's (0: h0, 1: h1) overlay address of tunnel i.
func OverlayAddr(i, side int) netip.Addr {
	a := TunnelSubnet(i).Addr().As4()
	a[3] = byte(side + 1)
	return netip.AddrFrom4(a)
}

// overlaySPI is the SPI of the SA from side to the other side in tunnel i:
// h0 -> h1 0x10000+i, h1 -> h0 0x20000+i (>= 0x100, unique per destination).
func overlaySPI(i, from int) uint32 { return uint32(0x10000*(from+1) + i) }

// overlayVTEP is side's VTEP address of tunnel i.
func overlayVTEP(i, side int) netip.Addr {
	if side == 0 {
		return LocalTunnel
	}
	return TunnelPeer(i)
}

// overlayDir holds the overlay-pair's host files, key files and the
// journals of 'sluice apply' (so that Down removes them with the lab).
func (l *Lab) overlayDir() string { return filepath.Join(l.Dir(), "overlay") }

func (l *Lab) overlayFile(role string) string {
	return filepath.Join(l.overlayDir(), role+".yaml")
}

// OverlayFiles are the host files 'sluice apply' applied in h0 and h1: the
// same files 'sluice verify -f' and 'sluice plan -f' take.
func (l *Lab) OverlayFiles() map[string]string {
	if l.Topology != OverlayPair {
		return nil
	}
	return map[string]string{"h0": l.overlayFile("h0"), "h1": l.overlayFile("h1")}
}

// OverlayStateDir is the --state-dir of the lab's applies.
func (l *Lab) OverlayStateDir() string { return filepath.Join(l.overlayDir(), "state") }

// overlayHostYAML is the host.yaml of side (0: h0, 1: h1).
func overlayHostYAML(name string, side, tunnels int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by 'sluice lab up overlay-pair'; applied with 'sluice apply'\nname: %s\n", name)
	fmt.Fprintf(&b, "uplinks:\n  ports: [p0]\n  mtu: %d\n", OverlayMTU)
	b.WriteString("vteps:\n")
	for i := 1; i <= tunnels; i++ {
		fmt.Fprintf(&b, "  - name: vx%d\n    vni: %d\n    local: %s\n    remotes: [{address: %s}]\n    addresses: [%s/24]\n",
			i, i, overlayVTEP(i, side), overlayVTEP(i, 1-side), OverlayAddr(i, side))
	}
	fmt.Fprintf(&b, "ipsec:\n  keys: %s.keys\n  peers:\n", name)
	for i := 1; i <= tunnels; i++ {
		fmt.Fprintf(&b, "    - name: t%d\n      local: %s\n      remote: %s\n      spi-out: %#x\n      spi-in: %#x\n      esn: true\n      replay-window: 128\n",
			i, overlayVTEP(i, side), overlayVTEP(i, 1-side), overlaySPI(i, side), overlaySPI(i, 1-side))
	}
	return b.String()
}

// writeOverlayFiles writes both sides' host and key files, once: the keys
// are random per lab and kept, so that 'lab up' again changes nothing.
func (l *Lab) writeOverlayFiles() error {
	if err := os.MkdirAll(l.overlayDir(), 0o700); err != nil {
		return err
	}
	// h1.yaml is written last: when it exists, everything does.
	if _, err := os.Stat(l.overlayFile("h1")); err == nil {
		return nil
	}
	var k0, k1 strings.Builder
	for i := 1; i <= l.Tunnels; i++ {
		// rfc4106(gcm(aes)) with a 128-bit key: 16 key bytes + 4 salt.
		fwd, rev := make([]byte, 20), make([]byte, 20)
		if _, err := rand.Read(fwd); err != nil {
			return err
		}
		if _, err := rand.Read(rev); err != nil {
			return err
		}
		fmt.Fprintf(&k0, "t%d out %s\nt%d in %s\n", i, hex.EncodeToString(fwd), i, hex.EncodeToString(rev))
		fmt.Fprintf(&k1, "t%d out %s\nt%d in %s\n", i, hex.EncodeToString(rev), i, hex.EncodeToString(fwd))
	}
	for side, keys := range []string{k0.String(), k1.String()} {
		role := fmt.Sprintf("h%d", side)
		name := nsName(l.Name, role)
		if err := os.WriteFile(filepath.Join(l.overlayDir(), name+".keys"), []byte(keys), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(l.overlayFile(role), []byte(overlayHostYAML(name, side, l.Tunnels)), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// needOverlayKernel says which features the running kernel lacks for the
// overlay (nil when it has them all).
func needOverlayKernel() error {
	f := kernel.ProbeFeatures()
	var missing []string
	for _, n := range []string{kernel.FeatureVXLAN, kernel.FeatureESP, kernel.FeatureGCM} {
		if !f.Have[n] {
			missing = append(missing, n+" ("+f.Evidence[n]+")")
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &NeedsVMError{Topology: OverlayPair, Feature: strings.Join(missing, ", ")}
}

// applyOverlay runs 'sluice apply' and 'sluice verify' in h0 and h1: the
// overlay is built by the same code and files an operator would use.
func (l *Lab) applyOverlay(progress func(string)) error {
	if err := l.writeOverlayFiles(); err != nil {
		return fmt.Errorf("writing the overlay files: %w", err)
	}
	bin, err := l.sluiceBin()
	if err != nil {
		return err
	}
	for _, step := range []string{"apply", "verify"} {
		for _, role := range []string{"h0", "h1"} {
			args := []string{"netns", "exec", l.NS(role), bin, step, "-f", l.overlayFile(role)}
			if step == "apply" {
				args = append(args, "--state-dir", l.OverlayStateDir())
			}
			var out bytes.Buffer
			cmd := exec.Command("ip", args...)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					return fmt.Errorf("sluice %s -f %s in %s: exit %d:\n%s", step, l.overlayFile(role), l.NS(role), ee.ExitCode(), strings.TrimSpace(out.String()))
				}
				return err
			}
		}
	}
	progress(fmt.Sprintf("overlay: %d VXLAN tunnel(s) over ESP transport (AES-GCM-128, ESN), applied and verified in %s and %s; files in %s",
		l.Tunnels, l.NS("h0"), l.NS("h1"), l.overlayDir()))
	return nil
}

// sluiceBin is the executable that runs sluice's own subcommands for the
// lab (the gateway daemons, the overlay's apply).
func (l *Lab) sluiceBin() (string, error) {
	if l.SluiceBin != "" {
		return l.SluiceBin, nil
	}
	return os.Executable()
}
