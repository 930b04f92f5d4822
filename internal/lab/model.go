// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"sluice/internal/driverquirk"
	"sluice/internal/fileread"
	"sluice/internal/kernel/xfrm"
)

// The gateway-model topology: the NIC model (kmod/nicmodel) under a sluice
// gateway, so a machine without an offloading NIC can watch the whole path
// and its counters (the test VM; the host has no ESP):
//
//	gen 10.0.0.1 -- lan0 [dut: sluice gateway] nm0 123.0.0.1 ==model wire== nm1 123.0.0.254 [peer: software ESP] lo 48.0.0.1
//
// The dut's SAs and policies are packet-offloaded to nm0, as on a gateway
// with a ConnectX; the peer decrypts in software. Its nm1 holds no SA, so
// its rx_cleartext_packets counts every cleartext IP packet on the wire.
const (
	ModelPort     = "nm0" // the dut's model port
	ModelPeerPort = "nm1" // the peer's model port
	modelPeerAddr = "123.0.0.254"
	modelSPIOut   = 0x1001 // dut -> peer
	modelSPIIn    = 0x1002 // peer -> dut
)

// ModelTarget is what bench ping and iperf3 reach behind the peer.
var ModelTarget = netip.MustParseAddr("48.0.0.1")

// modelCounters are the ethtool -S counters 'lab status' shows, per port.
var modelCounters = map[string][]string{
	ModelPort:     {"tx_ipsec_packets", "rx_ipsec_packets", "xdp_xmit", "xdp_redirect", "tx_cleartext_packets", "tx_ipsec_drop_no_state"},
	ModelPeerPort: {"rx_cleartext_packets", "tx_cleartext_packets"},
}

// PortCounters are one model port's IPsec counters (ethtool -S).
type PortCounters struct {
	Role     string            `json:"role"`
	Port     string            `json:"port"`
	Counters map[string]uint64 `json:"counters"`
	Order    []string          `json:"-"`
	Err      string            `json:"error,omitempty"`
}

// modelPlan fills p for gateway-model.
func modelPlan(p *plan, add func(role string, lines ...string)) {
	p.roles = []string{"gen", "dut", "peer"}
	p.forward = []string{"dut"}
	p.sinkRole, p.sinkIf, p.target, p.model = "peer", ModelPeerPort, ModelTarget, true
	g0, lan0 := endpoint{"gen", "g0", mac(1, 1)}, endpoint{"dut", "lan0", mac(1, 2)}
	p.segments = []segment{{g0, lan0}}
	add("gen", "addr replace 10.0.0.1/24 dev g0",
		"route replace default via 10.0.0.254 dev g0",
		"neigh replace 10.0.0.254 lladdr "+lan0.MAC+" dev g0 nud permanent")
	add("dut", "link set "+ModelPort+" up",
		"addr replace 10.0.0.254/24 dev lan0", "addr replace 123.0.0.1/16 dev "+ModelPort,
		"route replace 48.0.0.0/8 via "+modelPeerAddr+" dev "+ModelPort,
		"neigh replace 10.0.0.1 lladdr "+g0.MAC+" dev lan0 nud permanent",
		"neigh replace "+modelPeerAddr+" lladdr "+mac(2, 2)+" dev "+ModelPort+" nud permanent")
	add("peer", "link set "+ModelPeerPort+" up",
		"addr replace "+modelPeerAddr+"/16 dev "+ModelPeerPort, "addr replace "+ModelTarget.String()+"/32 dev lo",
		"route replace 10.0.0.0/8 via 123.0.0.1 dev "+ModelPeerPort,
		"neigh replace 123.0.0.1 lladdr "+mac(2, 1)+" dev "+ModelPeerPort+" nud permanent")
	p.hops = []hop{{"dut", "lan0", ModelPort, mac(2, 2)}}
}

// makeModelPair inserts the model (SLUICE_NICMODEL, which --vm and
// scripts/vmtest.sh export) and creates the pair, nm0 in dut and nm1 in
// peer. It reports whether the pair is new (the SAs then go on it).
func (l *Lab) makeModelPair() (bool, error) {
	if linkExists(l.NS("dut"), ModelPort) {
		return false, nil
	}
	if err := needModel(); err != nil {
		return false, err
	}
	if _, err := os.Stat("/sys/module/nicmodel"); err != nil {
		args := []string{os.Getenv("SLUICE_NICMODEL")}
		// The driver the model follows (kmod/nicmodel/README.md); the
		// module's default, mlx5-6.12, when unset.
		if p := os.Getenv("SLUICE_NICMODEL_PROFILE"); p != "" {
			args = append(args, "profile="+p)
		}
		if err := run("insmod", args...); err != nil {
			return false, err
		}
	}
	// The module creates both ports in the writer's namespace.
	if err := run("ip", "netns", "exec", l.NS("dut"), "sh", "-c",
		"echo '"+ModelPort+" "+ModelPeerPort+"' > /sys/module/nicmodel/parameters/new_pair"); err != nil {
		return false, err
	}
	if err := run("ip", "-n", l.NS("dut"), "link", "set", ModelPort, "address", mac(2, 1)); err != nil {
		return false, err
	}
	return true, run("ip", "-n", l.NS("dut"), "link", "set", ModelPeerPort, "address", mac(2, 2), "netns", l.NS("peer"))
}

// needModel says how to get the NIC model when it is neither loaded nor
// given as SLUICE_NICMODEL (the host kernel cannot load modules here).
func needModel() error {
	if _, err := os.Stat("/sys/module/nicmodel"); err == nil || os.Getenv("SLUICE_NICMODEL") != "" {
		return nil
	}
	return &NeedsVMError{Topology: GatewayModel, Feature: "the NIC model (not loaded, SLUICE_NICMODEL unset; or insmod what 'sluice vm nicmodel' prints)"}
}

// modelKeys returns the lab's two keys (out: dut -> peer, in), written
// once with fresh random bytes to a 0600 file in the lab's directory and
// never printed.
func (l *Lab) modelKeys() (out, in []byte, err error) {
	path := filepath.Join(l.Dir(), "model.keys")
	b, err := fileread.Read(path, 1<<10) // 80 hex digits
	if errors.Is(err, os.ErrNotExist) {
		// rfc4106(gcm(aes)) with a 128-bit key: 16 key bytes + 4 salt.
		k := make([]byte, 40)
		if _, err := rand.Read(k); err != nil {
			return nil, nil, err
		}
		b = []byte(hex.EncodeToString(k))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, nil, err
		}
	} else if err != nil {
		return nil, nil, err
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != 40 {
		return nil, nil, fmt.Errorf("%s: want 80 hex digits (two AES-GCM-128 keys with salt); remove the lab with 'sluice lab down %s'", path, l.Name)
	}
	return k[:20], k[20:], nil
}

// modelGen is the generator host's address, the one source the lab's
// traffic has.
var modelGen = netip.MustParseAddr("10.0.0.1")

// modelSelectors returns the tunnel's selectors and, when they are not
// the lab's subnets, why. The lab's tunnel is 10.0.0.0/8 <-> 48.0.0.0/8;
// on a device that matches selector addresses exactly (the model under
// its mlx5-6.12 profile, as mlx5 in Linux 6.12: driverquirk's
// exact-selector-match) such a policy has the device encrypt only the
// network addresses and send the rest in cleartext, on the kernel's path
// as on XDP's. There the lab installs what sluice recommends for that
// driver: one policy per host pair, the generator and the target.
func modelSelectors() (lan, remote netip.Prefix, why string) {
	set := driverquirk.ForDevice(driverquirk.ModelDriver, kernelRelease(), "/")
	if e, ok := set.Get(driverquirk.ExactSelectorMatch); ok {
		return netip.PrefixFrom(modelGen, 32), netip.PrefixFrom(ModelTarget, 32),
			fmt.Sprintf("%s matches selector addresses exactly (%s): subnet policies would leave in cleartext, so the tunnel has per-host policies %s <-> %s (fix: %s)",
				ModelPort, set.As, modelGen, ModelTarget, e.Fix)
	}
	return netip.MustParsePrefix("10.0.0.0/8"), RemotePrefix, ""
}

func kernelRelease() string {
	var uts unix.Utsname
	if unix.Uname(&uts) != nil {
		return ""
	}
	return unix.ByteSliceToString(uts.Release[:])
}

// installModelSAs installs the tunnel: in dut packet-offloaded on nm0
// (SAs and the IN and OUT policies; the FWD policy stays the kernel's, as
// mlx5 refuses to offload it), in peer in software. It returns why the
// selectors are per host, when they are (modelSelectors).
func (l *Lab) installModelSAs() (string, error) {
	kOut, kIn, err := l.modelKeys()
	if err != nil {
		return "", err
	}
	dutA, peerA := LocalTunnel, netip.MustParseAddr(modelPeerAddr)
	lan, remote, why := modelSelectors()
	// replay: the receiving side's window (a sender's SA has none).
	sa := func(src, dst netip.Addr, spi uint32, key []byte, replay int, off *xfrm.Offload) error {
		return xfrm.StateAddESP(xfrm.ESPState{Src: src, Dst: dst, SPI: spi, Reqid: spi, Tunnel: true,
			AEAD: "rfc4106(gcm(aes))", Key: key, ICVBits: 128, ReplayWindow: replay, Offload: off})
	}
	pol := func(dir xfrm.Dir, src, dst netip.Prefix, tsrc, tdst netip.Addr, reqid uint32, off *xfrm.Offload) error {
		return xfrm.PolicyAdd(xfrm.ESPPolicy{Dir: dir, Src: src, Dst: dst, TmplSrc: tsrc, TmplDst: tdst, Reqid: reqid, Tunnel: true, Offload: off}, true)
	}
	err = l.Do("dut", func() error {
		ifc, err := net.InterfaceByName(ModelPort)
		if err != nil {
			return err
		}
		out := &xfrm.Offload{Ifindex: ifc.Index, Flags: xfrm.OffloadPacket}
		// A policy takes its direction from dir: only an SA says inbound.
		in := &xfrm.Offload{Ifindex: ifc.Index, Flags: xfrm.OffloadPacket | xfrm.OffloadInbound}
		return errors.Join(
			sa(dutA, peerA, modelSPIOut, kOut, 0, out),
			sa(peerA, dutA, modelSPIIn, kIn, 64, in),
			pol(xfrm.DirOut, lan, remote, dutA, peerA, modelSPIOut, out),
			pol(xfrm.DirIn, remote, lan, peerA, dutA, modelSPIIn, out),
			pol(xfrm.DirFwd, remote, lan, peerA, dutA, modelSPIIn, nil))
	})
	if err != nil {
		return "", fmt.Errorf("dut's SAs on %s: %w", ModelPort, err)
	}
	err = l.Do("peer", func() error {
		return errors.Join(
			sa(dutA, peerA, modelSPIOut, kOut, 64, nil),
			sa(peerA, dutA, modelSPIIn, kIn, 0, nil),
			pol(xfrm.DirOut, remote, lan, peerA, dutA, modelSPIIn, nil),
			pol(xfrm.DirIn, lan, remote, dutA, peerA, modelSPIOut, nil),
			pol(xfrm.DirFwd, lan, remote, dutA, peerA, modelSPIOut, nil))
	})
	if err != nil {
		return "", fmt.Errorf("peer's SAs: %w", err)
	}
	return why, nil
}

// ModelCounters reads the model ports' IPsec counters (gateway-model only).
func (l *Lab) ModelCounters() []PortCounters {
	if l.Topology != GatewayModel {
		return nil
	}
	var res []PortCounters
	for _, e := range [][2]string{{"dut", ModelPort}, {"peer", ModelPeerPort}} {
		pc := PortCounters{Role: e[0], Port: e[1], Counters: map[string]uint64{}, Order: modelCounters[e[1]]}
		out, err := exec.Command("ip", "netns", "exec", l.NS(e[0]), "ethtool", "-S", e[1]).CombinedOutput()
		if err != nil {
			pc.Err = fmt.Sprintf("ethtool -S %s: %v: %s", e[1], err, strings.TrimSpace(string(out)))
		}
		for _, line := range strings.Split(string(out), "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !slices.Contains(pc.Order, k) {
				continue
			}
			if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
				pc.Counters[k] = n
			}
		}
		res = append(res, pc)
	}
	return res
}
