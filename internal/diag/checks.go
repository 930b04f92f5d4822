// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
	"sluice/internal/mtu"
)

func featureState(f kernel.EthFeature) string {
	s := "off"
	if f.Active {
		s = "on"
	}
	if !f.Available {
		s += " [fixed]"
	}
	return s
}

func checkKernelFeatures(f *Facts, _ *DoctorOptions) []Result {
	k := f.Kernel
	if k == nil {
		return []Result{{Verdict: Skip, Summary: "kernel features were not probed"}}
	}
	unknown := map[string]bool{}
	for _, n := range k.Unknown {
		unknown[n] = true
	}
	var ev []string
	var missing, unk []string
	for _, n := range []string{kernel.FeatureXFRM, kernel.FeatureESP, kernel.FeatureGCM} {
		ev = append(ev, fmt.Sprintf("%s: %s", n, k.Evidence[n]))
		switch {
		case unknown[n]:
			unk = append(unk, n)
		case !k.Have[n]:
			missing = append(missing, n)
		}
	}
	for _, n := range []string{kernel.FeatureBonding, kernel.FeatureVLAN, kernel.FeatureXDP} {
		if !k.Have[n] && !unknown[n] {
			ev = append(ev, fmt.Sprintf("%s (optional): %s", n, k.Evidence[n]))
		}
	}
	switch {
	case len(missing) > 0:
		return []Result{{Verdict: Fail, Subject: "kernel " + k.Release, Summary: "missing " + strings.Join(missing, ", ") + ": the kernel cannot do IPsec ESP with AES-GCM", Evidence: ev,
			Fix: "boot a kernel with CONFIG_XFRM_USER, CONFIG_INET_ESP, CONFIG_INET6_ESP, CONFIG_CRYPTO_GCM (and CONFIG_INET_ESP_OFFLOAD for NIC offload), or load esp4/esp6/gcm: modprobe esp4 esp6 gcm"}}
	case len(unk) > 0:
		return []Result{{Verdict: Skip, Subject: "kernel " + k.Release, Summary: "could not probe " + strings.Join(unk, ", ") + " (run as root)", Evidence: ev}}
	}
	return []Result{{Verdict: OK, Subject: "kernel " + k.Release, Summary: "XFRM, ESP and rfc4106(gcm(aes)) work (probed in a throwaway namespace)", Evidence: ev}}
}

// ports are the interfaces that can carry ESP themselves: hardware (and
// netdevsim) ports, not bonds, VLANs or tunnels.
func (f *Facts) ports() []kernel.NetdevFacts {
	var out []kernel.NetdevFacts
	for _, n := range f.Netdevs {
		if n.Kind == "device" {
			out = append(out, n)
		}
	}
	return out
}

func checkESPOffload(f *Facts, _ *DoctorOptions) []Result {
	var rs []Result
	for _, p := range f.ports() {
		feats, ok := f.Features[p.Name]
		if !ok {
			rs = append(rs, Result{Verdict: Skip, Subject: p.Name, Summary: "ethtool features unreadable: " + f.Errors["ethtool -k "+p.Name]})
			continue
		}
		esp, gso := feats["esp-hw-offload"], feats["tx-esp-segmentation"]
		ev := []string{fmt.Sprintf("driver %s: esp-hw-offload %s, tx-esp-segmentation %s", orNone(p.Driver), featureState(esp), featureState(gso))}
		switch {
		case !esp.Available && !esp.Active:
			rs = append(rs, Result{Verdict: Info, Subject: p.Name, Summary: "cannot offload ESP (the driver offers no IPsec offload): the CPU encrypts", Evidence: ev})
		case !esp.Active:
			rs = append(rs, Result{Verdict: Warn, Subject: p.Name, Summary: "can offload ESP but esp-hw-offload is off: SAs bound to it are refused and the CPU encrypts", Evidence: ev,
				Fix: "ethtool -K " + p.Name + " esp-hw-offload on"})
		case gso.Available && !gso.Active:
			rs = append(rs, Result{Verdict: Warn, Subject: p.Name, Summary: "esp-hw-offload on but tx-esp-segmentation off: the kernel segments every large ESP packet in software", Evidence: ev,
				Fix: "ethtool -K " + p.Name + " tx-esp-segmentation on"})
		case !gso.Active:
			rs = append(rs, Result{Verdict: Info, Subject: p.Name, Summary: "esp-hw-offload on; no ESP segmentation offload (the kernel segments large ESP packets)", Evidence: ev})
		default:
			rs = append(rs, Result{Verdict: OK, Subject: p.Name, Summary: "esp-hw-offload and tx-esp-segmentation on", Evidence: ev})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no hardware network port in this namespace"}}
	}
	return rs
}

// espFeatures are the features a bond in active-backup mode claims for
// ESP offload (BOND_XFRM_FEATURES).
var espFeatures = []string{"esp-hw-offload", "tx-esp-segmentation"}

// checkBondOffload: a bond in active-backup mode advertises ESP offload
// whatever its slaves can do (bond_fix_features never clears these
// features), and hands SAs to the active slave only: an SA is refused
// ("Slave does not support ipsec offload") or lost at fail-over when a
// slave cannot offload. The other way round, slaves that offload behind a
// bond that does not are offload left unused.
func checkBondOffload(f *Facts, _ *DoctorOptions) []Result {
	var rs []Result
	for _, b := range f.Netdevs {
		if b.Kind != "bond" {
			continue
		}
		bf := f.Features[b.Name]
		ev := []string{fmt.Sprintf("%s mode %s, active slave %s: esp-hw-offload %s, tx-esp-segmentation %s", b.Name, b.BondMode, orNone(b.ActiveSlave),
			featureState(bf["esp-hw-offload"]), featureState(bf["tx-esp-segmentation"]))}
		if len(b.Slaves) == 0 {
			rs = append(rs, Result{Verdict: Info, Subject: b.Name, Summary: "bond has no slaves", Evidence: ev})
			continue
		}
		var lacking []string // "slave lacks feature" pairs
		var fixes []string
		allHave := true
		for _, s := range b.Slaves {
			sf := f.Features[s]
			ev = append(ev, fmt.Sprintf("slave %s (%s): esp-hw-offload %s, tx-esp-segmentation %s", s, orNone(driverOf(f, s)), featureState(sf["esp-hw-offload"]), featureState(sf["tx-esp-segmentation"])))
			for _, feat := range espFeatures {
				if bf[feat].Active && !sf[feat].Active {
					lacking = append(lacking, fmt.Sprintf("bond claims %s but slave %s lacks it", feat, s))
					if sf[feat].Available {
						fixes = append(fixes, fmt.Sprintf("ethtool -K %s %s on", s, feat))
					} else {
						fixes = append(fixes, fmt.Sprintf("replace slave %s with a port that offloads ESP, or turn it off on the bond (ethtool -K %s %s off) so SAs stay in software", s, b.Name, feat))
					}
				}
			}
			allHave = allHave && sf["esp-hw-offload"].Active
		}
		switch {
		case len(lacking) > 0:
			rs = append(rs, Result{Verdict: Fail, Subject: b.Name, Summary: strings.Join(lacking, "; ") + ": SAs offloaded to the bond are refused or lost when it is active", Evidence: ev, Fix: strings.Join(fixes, "; ")})
		case allHave && b.BondMode != "active-backup":
			rs = append(rs, Result{Verdict: Warn, Subject: b.Name, Summary: fmt.Sprintf("slaves %s offload ESP but bond mode %s cannot: the kernel offloads ESP on active-backup bonds only", strings.Join(b.Slaves, ", "), b.BondMode), Evidence: ev,
				Fix: "ip link set " + b.Name + " type bond mode active-backup (with the bond down and no slaves), if the redundancy model allows"})
		case allHave && !bf["esp-hw-offload"].Active:
			rs = append(rs, Result{Verdict: Warn, Subject: b.Name, Summary: fmt.Sprintf("slaves %s offload ESP but the bond does not offer it: SAs on the bond are encrypted by the CPU", strings.Join(b.Slaves, ", ")), Evidence: ev,
				Fix: "ethtool -K " + b.Name + " esp-hw-offload on (needs Linux 6.10+ for tx-esp-segmentation on bonds)"})
		case allHave:
			rs = append(rs, Result{Verdict: OK, Subject: b.Name, Summary: "bond and every slave offload ESP", Evidence: ev})
		default:
			rs = append(rs, Result{Verdict: Info, Subject: b.Name, Summary: "no ESP offload on this bond (neither claimed nor available on every slave)", Evidence: ev})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no bond interface"}}
	}
	return rs
}

func driverOf(f *Facts, name string) string {
	if n := f.netdev(name); n != nil {
		return n.Driver
	}
	return ""
}

func checkOffloadProbe(f *Facts, _ *DoctorOptions) []Result {
	if f.Probes == nil {
		why := "probe skipped (--no-probe)"
		if f.Kernel != nil && !f.Kernel.Have[kernel.FeatureESP] {
			why = "the kernel has no ESP: no SA can be installed"
		}
		return []Result{{Verdict: Skip, Summary: why}}
	}
	names := make([]string, 0, len(f.Probes))
	for n := range f.Probes {
		names = append(names, n)
	}
	sort.Strings(names)
	var rs []Result
	for _, n := range names {
		p := f.Probes[n]
		if p.Skipped != "" {
			rs = append(rs, Result{Verdict: Warn, Subject: n, Summary: "not probed: " + p.Skipped,
				Fix: "run a kernel with the bonding fix (6.16+); offloading to one port of the bond instead keeps the SAs on that port at a failover (see the bond-port-offload check)"})
			continue
		}
		if p.Caps != nil {
			rs = append(rs, probeResult(n, p))
			continue
		}
		ev := []string{"ip xfrm state add src 192.0.2.1 dst 198.51.100.1 proto esp mode tunnel aead 'rfc4106(gcm(aes))' ... offload [packet] dev " + n + " dir out, then deleted"}
		ev = append(ev, "crypto offload: "+acceptedOr(p.Crypto), "packet offload: "+acceptedOr(p.Packet))
		switch {
		case p.Crypto != "":
			rs = append(rs, Result{Verdict: Fail, Subject: n, Summary: "esp-hw-offload is on, yet the driver refused a crypto-offload SA: " + p.Crypto, Evidence: ev,
				Fix: "see the bond-offload and esp-offload checks for " + n + "; for a bond, the active slave must offload ESP"})
		case p.Packet != "":
			rs = append(rs, Result{Verdict: Warn, Subject: n, Summary: "crypto offload only: packet offload refused (" + p.Packet + "); the sluice fast path needs packet offload", Evidence: ev,
				Fix: "packet offload needs a driver that implements it (mlx5 on ConnectX-6 Dx/7 with IPsec-enabled firmware, Linux 6.2+), flow_steering_mode dmfs, and no tc offload on the port first"})
		default:
			rs = append(rs, Result{Verdict: OK, Subject: n, Summary: "crypto- and packet-offload SAs accepted (and removed)", Evidence: ev})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no interface with esp-hw-offload on to probe"}}
	}
	return rs
}

func acceptedOr(err string) string {
	if err == "" {
		return "accepted"
	}
	return "refused: " + err
}

// checkMlx5TCOrder: mlx5 allows tc offload or IPsec packet offload on an
// uplink, not both, and the first one installed wins (en_tc.c
// is_tc_ipsec_order_check_needed; ipsec_fs.c mlx5e_ipsec_block_tc_offload):
// the other fails with EBUSY, or tc falls back to software.
func checkMlx5TCOrder(f *Facts, _ *DoctorOptions) []Result {
	var rs []Result
	for _, n := range f.Netdevs {
		if n.Driver != "mlx5_core" || n.Kind != "device" {
			continue
		}
		hwTC := 0
		for _, t := range f.TC[n.Name] {
			if !t.SkipHW {
				hwTC++
			}
		}
		pk := 0
		for _, s := range f.States {
			if s.Offload.Packet() && s.Offload.Ifindex == n.Index {
				pk++
			}
		}
		for _, p := range f.Policies {
			if p.Offload.Packet() && p.Offload.Ifindex == n.Index {
				pk++
			}
		}
		ev := []string{fmt.Sprintf("%d tc filter(s) that may be offloaded (not skip_hw), %d packet-offload SA(s)/policies on %s; hw-tc-offload %s", hwTC, pk, n.Name, featureState(f.feature(n.Name, "hw-tc-offload")))}
		switch {
		case hwTC > 0 && pk == 0:
			rs = append(rs, Result{Verdict: Warn, Subject: n.Name, Summary: "tc rules are installed before any IPsec packet-offload rule: mlx5 will refuse packet-offload SAs and policies on this port (EBUSY)", Evidence: ev,
				Fix: "install the IPsec packet-offload SAs/policies first and the tc rules after (they then stay in software), or make the tc rules skip_hw: tc filter del dev " + n.Name + " ingress, add them back after the SAs"})
		case hwTC > 0 && pk > 0:
			rs = append(rs, Result{Verdict: Warn, Subject: n.Name, Summary: "tc rules and IPsec packet offload on one port: stock mlx5 allows one of them in hardware, so the tc rules installed after the SAs run in software (not_in_hw)", Evidence: ev,
				Fix: "check `tc -s filter show dev " + n.Name + " ingress` for not_in_hw; move hardware tc rules to a VF representor (switchdev) or keep them skip_hw"})
		default:
			if pk > 0 {
				// The flower tier (docs/flower.md) probes with a skip_sw rule:
				// here stock mlx5 answers EBUSY and the tier leaves the port
				// to XDP.
				ev = append(ev, "sluice's flower tier (flower: outbound|inbound|both) gets EBUSY here from stock mlx5 and leaves this port's traffic to XDP; hardware forwarding beside packet offload needs the mlx5 patches of the ConnectX-7 benchmark (IPsec and tc offload on one netdev), or switchdev on firmware that offers ipsec_packet on the port function")
			}
			rs = append(rs, Result{Verdict: OK, Subject: n.Name, Summary: "no tc offload competing with IPsec packet offload", Evidence: ev})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no mlx5 port"}}
	}
	return rs
}

// checkSteering: mlx5 offers IPsec packet offload with flow_steering_mode
// dmfs, or smfs only while the eswitch is in legacy mode
// (ipsec_offload.c mlx5_ipsec_device_caps).
func checkSteering(f *Facts, o *DoctorOptions) []Result {
	var rs []Result
	for _, d := range f.Devlink {
		subj := d.Bus + "/" + d.Device
		fsm := d.Params["flow_steering_mode"]
		ev := []string{fmt.Sprintf("devlink %s: driver %s, eswitch mode %s, flow_steering_mode %s", subj, orNone(d.Driver), orNone(d.Eswitch), orNone(fsm))}
		switch {
		case o.WantEswitch != "" && d.Eswitch != "" && d.Eswitch != o.WantEswitch:
			rs = append(rs, Result{Verdict: Fail, Subject: subj, Summary: fmt.Sprintf("eswitch mode %s, the configuration needs %s", d.Eswitch, o.WantEswitch), Evidence: ev,
				Fix: fmt.Sprintf("devlink dev eswitch set %s mode %s (with no IPsec offload SAs installed: mlx5 refuses the change while they exist)", subj, o.WantEswitch)})
		case fsm == "smfs" && d.Eswitch == "switchdev":
			rs = append(rs, Result{Verdict: Fail, Subject: subj, Summary: "flow_steering_mode smfs with eswitch switchdev: mlx5 offers no IPsec packet offload in this combination", Evidence: ev,
				Fix: "devlink dev eswitch set " + subj + " mode legacy; devlink dev param set " + subj + " name flow_steering_mode value dmfs cmode runtime; then switch back to switchdev"})
		case d.Driver == "mlx5_core" || fsm != "" || o.WantEswitch != "":
			rs = append(rs, Result{Verdict: OK, Subject: subj, Summary: "steering and eswitch mode allow IPsec packet offload", Evidence: ev})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no mlx5 devlink device (and no eswitch mode asked for with --eswitch)"}}
	}
	return rs
}

// vtepESP is the ESP of the SA that costs a VTEP's packets most, as an
// internal/mtu stack layer: the mode and transform of the SA with the
// largest overhead. SAs whose algorithms the facts do not name (a facts
// file from an older sluice) count as rfc4106(gcm(aes)) with a 128-bit ICV.
func vtepESP(states []xfrm.State, outerIPv6 bool) (mtu.ESPMode, mtu.Cipher, string) {
	mode, best, why, worst := mtu.ESPNone, mtu.Cipher{}, "", 0
	for _, s := range states {
		if s.Proto != xfrm.ProtoESP || s.Dst.Is6() != outerIPv6 {
			continue
		}
		c, err := stateCipher(s.Alg)
		if err != nil {
			continue
		}
		m := mtu.ESPTransport
		if s.Mode == xfrm.ModeTunnel {
			m = mtu.ESPTunnel
		}
		_, hi := mtu.Stack{Encap: mtu.EncapVXLAN, ESP: m, Cipher: c, OuterIPv6: outerIPv6}.Overhead()
		if hi > worst {
			worst, mode, best = hi, m, c
			why = fmt.Sprintf("ESP %s mode (SPI 0x%08x, %s: IV %d, ICV %d, padding to %d)", m, s.SPI, c.Kernel, c.IV, c.ICV, c.Align)
		}
	}
	return mode, best, why
}

// stateCipher sizes an SA's transform as the mtu calculator's Cipher.
func stateCipher(a xfrm.StateAlg) (mtu.Cipher, error) {
	t := mtu.Transform{AEAD: a.AEAD, ICVBits: a.ICVBits, Crypt: a.Crypt, Auth: a.Auth, AuthTruncBits: a.AuthTruncBits}
	if t == (mtu.Transform{}) {
		t = mtu.Transform{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}
	}
	iv, block, icv, err := t.Sizes()
	if err != nil {
		return mtu.Cipher{}, err
	}
	name := t.AEAD
	if name == "" {
		name = t.Crypt + " + " + t.Auth
	}
	return mtu.Cipher{Name: name, Kernel: name, IV: iv, ICV: icv, Align: (max(block, 1) + 3) &^ 3}, nil
}

// checkMTUHeadroom lays a full-size packet of each VTEP out with the same
// calculator as `sluice mtu` (internal/mtu), so the two agree byte for
// byte: the VTEP's encapsulation over the underlay's family, under the
// costliest ESP SA of that family.
func checkMTUHeadroom(f *Facts, _ *DoctorOptions) []Result {
	var rs []Result
	for _, n := range f.Netdevs {
		if n.Kind != "vxlan" && n.Kind != "geneve" {
			continue
		}
		if n.Lower == "" {
			rs = append(rs, Result{Verdict: Info, Subject: n.Name, Summary: "underlay device unknown (no `dev` on the " + n.Kind + "): MTU headroom not checked"})
			continue
		}
		low := f.netdev(n.Lower)
		if low == nil {
			continue
		}
		s := mtu.Stack{Encap: mtu.Encap(n.Kind), ESP: mtu.ESPNone, OuterIPv6: n.OuterIPv6}
		var espWhy string
		s.ESP, s.Cipher, espWhy = vtepESP(f.States, n.OuterIPv6)
		need := s.UnderlayLen(n.MTU)
		ev := []string{fmt.Sprintf("%s MTU %d as %s: %s", n.Name, n.MTU, s.Describe(), s.Arithmetic(n.MTU))}
		if espWhy != "" {
			ev = append(ev, espWhy)
		}
		ev = append(ev, fmt.Sprintf("= %d on underlay %s with MTU %d (sluice mtu shows the same arithmetic)", need, low.Name, low.MTU))
		if need > low.MTU {
			rs = append(rs, Result{Verdict: Warn, Subject: n.Name, Summary: fmt.Sprintf("a full-size packet becomes %d bytes on %s (MTU %d): it is fragmented, and GSO falls back to software segmentation (5x slower, the VM single-flow guide)", need, low.Name, low.MTU), Evidence: ev,
				Fix: fmt.Sprintf("ip link set dev %s mtu %d (and the guests' MTU at most that), or ip link set dev %s mtu %d", n.Name, s.MaxOverlay(low.MTU, s.UnderlayLen), low.Name, need)})
		} else {
			rs = append(rs, Result{Verdict: OK, Subject: n.Name, Summary: fmt.Sprintf("%d bytes of headroom left on %s", low.MTU-need, low.Name), Evidence: ev})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no VXLAN or Geneve interface"}}
	}
	return rs
}

// checkSAPerPeer: RSS hashes ESP on addresses and SPI, so one SA per
// direction and peer puts all of that peer's traffic on one RX queue and
// one CPU. RFC 9611 per-CPU SAs spread it.
func checkSAPerPeer(f *Facts, _ *DoctorOptions) []Result {
	type pair struct{ src, dst netip.Addr }
	by := map[pair][]xfrm.State{}
	var order []pair
	for _, s := range f.States {
		if s.Proto != xfrm.ProtoESP {
			continue
		}
		p := pair{s.Src, s.Dst}
		if _, ok := by[p]; !ok {
			order = append(order, p)
		}
		by[p] = append(by[p], s)
	}
	if len(order) == 0 {
		return []Result{{Verdict: Skip, Summary: "no ESP SA installed"}}
	}
	var single []string
	for _, p := range order {
		if ss := by[p]; len(ss) == 1 {
			single = append(single, fmt.Sprintf("%s -> %s: one SA, SPI 0x%08x", p.src, p.dst, ss[0].SPI))
		}
	}
	if len(single) == 0 {
		return []Result{{Verdict: OK, Subject: fmt.Sprintf("%d peer direction(s)", len(order)), Summary: "every peer direction has several SAs (per-CPU SAs spread over RX queues)"}}
	}
	release := ""
	if f.Kernel != nil {
		release = f.Kernel.Release
	}
	fix := "use per-CPU SAs (RFC 9611): strongSwan 6.0.2+ with per_cpu_sas = yes in the CHILD_SA, on Linux 6.13+"
	if release != "" && !kernelAtLeast(release, 6, 13) {
		fix += " (this host runs " + release + ": upgrade the kernel first)"
	}
	return []Result{{Verdict: Warn, Subject: fmt.Sprintf("%d of %d peer direction(s)", len(single), len(order)),
		Summary:  "a single SA per peer: RSS hashes ESP by addresses and SPI, so all of that peer's traffic lands on one RX queue and one CPU",
		Evidence: single, Fix: fix}}
}

// kernelAtLeast compares a release string ("6.12.95+deb12-amd64").
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, _ := strconv.Atoi(parts[0])
	mi, _ := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return ma > major || ma == major && mi >= minor
}

func checkFirmware(f *Facts, _ *DoctorOptions) []Result {
	if f.FirmwareTool == "" {
		return []Result{{Verdict: Skip, Summary: "neither mstconfig (package mstflint) nor mlxconfig (NVIDIA MFT) is installed"}}
	}
	var addrs []string
	for a := range f.Firmware {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var rs []Result
	for _, a := range addrs {
		v := f.Firmware[a]
		tool := f.FirmwareTool
		var ev []string
		for _, k := range []string{"SRIOV_EN", "NUM_OF_VFS", "LAG_RESOURCE_ALLOCATION", "FLEX_PARSER_PROFILE_ENABLE", "HAIRPIN_DATA_BUFFER_LOCK"} {
			if val, ok := v[k]; ok {
				ev = append(ev, k+" = "+val)
			} else {
				ev = append(ev, k+" not reported by this firmware")
			}
		}
		var warns, fixes []string
		if fp, ok := v["FLEX_PARSER_PROFILE_ENABLE"]; ok && fwNumber(fp) != "3" {
			warns = append(warns, "FLEX_PARSER_PROFILE_ENABLE is "+fp+", not 3 (the IPsec accel path of the ConnectX-7 benchmark)")
			fixes = append(fixes, fmt.Sprintf("%s -d %s set FLEX_PARSER_PROFILE_ENABLE=3", tool, a))
		}
		if h, ok := v["HAIRPIN_DATA_BUFFER_LOCK"]; ok && fwNumber(h) != "1" {
			warns = append(warns, "HAIRPIN_DATA_BUFFER_LOCK is "+h+": hairpin buffers live in host memory, across PCIe")
			fixes = append(fixes, fmt.Sprintf("%s -d %s set HAIRPIN_DATA_BUFFER_LOCK=True", tool, a))
		}
		sriov, vfs := fwNumber(v["SRIOV_EN"]), fwNumber(v["NUM_OF_VFS"])
		if sriov == "1" && vfs == "0" {
			warns = append(warns, "SR-IOV enabled with NUM_OF_VFS 0: no VF can be created")
			fixes = append(fixes, fmt.Sprintf("%s -d %s set NUM_OF_VFS=8", tool, a))
		}
		if sriov == "0" && vfs != "" && vfs != "0" {
			warns = append(warns, "NUM_OF_VFS "+vfs+" with SRIOV_EN off: no VF can be created")
			fixes = append(fixes, fmt.Sprintf("%s -d %s set SRIOV_EN=1", tool, a))
		}
		if bond := bondAcrossCard(f, a); bond != "" {
			if l, ok := v["LAG_RESOURCE_ALLOCATION"]; ok && fwNumber(l) != "1" {
				warns = append(warns, fmt.Sprintf("%s bonds two ports of this card but LAG_RESOURCE_ALLOCATION is %s", bond, l))
				fixes = append(fixes, fmt.Sprintf("%s -d %s set LAG_RESOURCE_ALLOCATION=1", tool, a))
			}
		}
		if len(warns) > 0 {
			rs = append(rs, Result{Verdict: Warn, Subject: a, Summary: strings.Join(warns, "; "), Evidence: ev,
				Fix: strings.Join(fixes, "; ") + "; then mlxfwreset -d " + a + " -y reset (or reboot)"})
		} else {
			rs = append(rs, Result{Verdict: OK, Subject: a, Summary: "firmware settings match the ConnectX-7 benchmark's gateway", Evidence: ev})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no mlx5 device to query"}}
	}
	return rs
}

// bondAcrossCard returns a bond whose slaves include two ports of the card
// at PCI address a (same bus and device, any function).
func bondAcrossCard(f *Facts, a string) string {
	card := strings.TrimRight(a, "01234567")
	for _, b := range f.Netdevs {
		if b.Kind != "bond" {
			continue
		}
		n := 0
		for _, s := range b.Slaves {
			if sl := f.netdev(s); sl != nil && sl.PCI != "" && strings.TrimRight(sl.PCI, "01234567") == card {
				n++
			}
		}
		if n >= 2 {
			return b.Name
		}
	}
	return ""
}

func checkXDPMode(f *Facts, _ *DoctorOptions) []Result {
	var rs []Result
	for _, n := range f.Netdevs {
		ev := []string{fmt.Sprintf("%s: XDP program %d attached in %s mode (driver %s)", n.Name, n.XDPProgID, n.XDPMode, orNone(n.Driver))}
		switch n.XDPMode {
		case "":
		case "generic":
			rs = append(rs, Result{Verdict: Warn, Subject: n.Name, Summary: "XDP runs in generic (skb) mode: after the kernel built an skb, slower than native and without XDP_REDIRECT between drivers", Evidence: ev,
				Fix: "attach in native mode (ip link set dev " + n.Name + " xdpdrv ..., or sluice gateway with mode native); if the driver has no native XDP, use a port whose driver does"})
		case "multi":
			rs = append(rs, Result{Verdict: Info, Subject: n.Name, Summary: "several XDP programs attached in different modes", Evidence: ev})
		default:
			rs = append(rs, Result{Verdict: OK, Subject: n.Name, Summary: "XDP attached in " + n.XDPMode + " mode", Evidence: ev})
		}
	}
	if len(rs) == 0 {
		return []Result{{Verdict: Skip, Summary: "no XDP program attached"}}
	}
	return rs
}
