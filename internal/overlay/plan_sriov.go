// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/kernel"
)

// SR-IOV, in the order the sources (docs/sources.md) learned the hard way: the eswitch mode
// and mlx5's flow_steering_mode change only with no VFs (so the count goes
// to 0 first), flow steering is set in legacy mode before switching to
// switchdev, the VF count changes only through 0, and per-VF settings come
// last.
func (p *planner) sriov() {
	for i := range p.h.SRIOV {
		p.pf(i, &p.h.SRIOV[i])
	}
}

func (p *planner) pf(i int, s *config.SRIOV) {
	path := fmt.Sprintf("sriov[%d]", i)
	name, err := p.live.resolve(s.PF)
	if err != nil {
		p.fail("%s.pf: %v", path, err)
		return
	}
	k := p.live.link(name)
	if k == nil {
		p.fail("%s.pf: %s: no such interface here (ip link show)", path, name)
		return
	}
	cur, hasSRIOV := p.live.NumVFs[name]
	if !hasSRIOV {
		p.fail("%s.pf: %s has no SR-IOV (no /sys/class/net/%s/device/sriov_numvfs): enable SR-IOV in the NIC firmware (mlx5: mstconfig set SRIOV_EN=1 NUM_OF_VFS=N, then reboot) and BIOS", path, name, name)
		return
	}
	handle := devlinkHandle(k)
	needHandle := s.Eswitch != "" || s.FlowSteering != "" || hasCaps(*s)
	if needHandle && handle == "" {
		p.fail("%s.pf: %s has no devlink device (not a PCI or netdevsim device?); eswitch, flow-steering-mode and VF ipsec need one", path, name)
		return
	}
	eswitchNow := p.live.Eswitch[handle]
	changeEswitch := s.Eswitch != "" && eswitchNow != s.Eswitch
	changeFS := false
	fsNow := ""
	if s.FlowSteering != "" {
		v, found := p.live.Params[handle]["flow_steering_mode"]
		if !found {
			p.fail("%s.flow-steering-mode: %s has no devlink parameter flow_steering_mode (it is mlx5's; check `devlink dev param show %s`): remove flow-steering-mode for this NIC", path, handle, handle)
			return
		}
		fsNow = v
		changeFS = v != s.FlowSteering
	}
	want := cur
	if s.VFs != nil {
		want = *s.VFs
	}
	// The eswitch mode the PF must end in: the file's, or the one it has.
	target := s.Eswitch
	if target == "" {
		target = eswitchNow
	}
	vfs := cur // the count as the steps go
	zeroed := false
	if (changeEswitch || changeFS) && vfs > 0 {
		p.numVFs(name, vfs, 0, "the eswitch mode and flow steering change only with no VFs")
		vfs, zeroed = 0, true
	}
	if changeFS {
		if eswitchNow == "switchdev" {
			p.eswitch(handle, k, eswitchNow, "legacy", "flow steering changes in legacy mode", false)
			eswitchNow = "legacy"
		}
		p.param(handle, k, "flow_steering_mode", fsNow, s.FlowSteering)
	}
	if vfs != want && vfs != 0 && want != 0 {
		p.numVFs(name, vfs, 0, fmt.Sprintf("the VF count changes only through 0 (%d -> %d)", vfs, want))
		vfs, zeroed = 0, true
	}
	switch {
	case changeEswitch || (changeFS && target != eswitchNow):
		p.eswitch(handle, k, eswitchNow, target, fmt.Sprintf("eswitch %s, want %s", eswitchNow, target), false)
	case zeroed && target == "switchdev":
		// netdevsim and mlx5 go back to legacy when the VF count drops to
		// 0: make sure of the mode before the VFs come back.
		p.eswitch(handle, k, eswitchNow, target, "dropping to 0 VFs may have reset it to legacy", true)
	}
	if vfs != want {
		p.numVFs(name, vfs, want, fmt.Sprintf("%d VFs, want %d", vfs, want))
		vfs = want
	}
	fresh := vfs != cur || want != cur // VFs were (re)created: their settings are new
	for _, vf := range s.VF {
		p.vfSettings(name, k, vf, fresh)
	}
	for _, vf := range s.VF {
		if len(vf.IPsec) > 0 {
			p.vfCaps(path, handle, k, vf, fresh || changeEswitch)
		}
	}
	if s.VFIPsec != nil {
		flags, ok := p.live.PrivFlags[name]
		v, has := flags[vfIPsecFlag]
		switch {
		case !ok || !has:
			p.fail("%s.vf-ipsec: %s has no private flag %s (it is ixgbe's, Linux 4.20+; `ethtool --show-priv-flags %s`): remove vf-ipsec for this NIC", path, name, vfIPsecFlag, name)
		case v != *s.VFIPsec:
			want := *s.VFIPsec
			p.add(Step{Section: "sriov", Action: "change", Object: "PF " + name, Why: fmt.Sprintf("%s %s, want %s", vfIPsecFlag, onOff(v), onOff(want)),
				Commands: []string{fmt.Sprintf("ethtool --set-priv-flags %s %s %s", name, vfIPsecFlag, onOff(want))}, run: func(r *runner) error {
					if err := kernel.EthtoolSetPrivFlags(name, map[string]bool{vfIPsecFlag: want}); err != nil {
						return err
					}
					r.changed(entry{Kind: kindPrivFlag, Link: name, Name: vfIPsecFlag, Old: onOff(v), New: onOff(want)})
					return nil
				}})
		}
	}
}

// vfIPsecFlag is ixgbe's private flag letting VFs use the PF's IPsec
// offload (the ixgbevf VF-offload patches).
const vfIPsecFlag = "vf-ipsec"

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func (p *planner) numVFs(pf string, from, to int, why string) {
	p.add(Step{Section: "sriov", Action: "change", Object: "PF " + pf, Why: why,
		Commands: []string{fmt.Sprintf("echo %d > /sys/class/net/%s/device/sriov_numvfs", to, pf)}, run: func(r *runner) error {
			if err := kernel.SRIOVSetNumVFs(pf, to); err != nil {
				return err
			}
			r.changed(entry{Kind: kindNumVFs, Link: pf, Old: strconv.Itoa(from), New: strconv.Itoa(to)})
			return nil
		}})
}

// eswitch sets the eswitch mode; ensure makes the step check the mode
// when it runs and do nothing if it is already right.
func (p *planner) eswitch(handle string, k *kernel.LinkConfig, from, to, why string, ensure bool) {
	bus, dev := k.Bus, k.Device
	action := "change"
	if ensure {
		action = "ensure"
	}
	p.add(Step{Section: "sriov", Action: action, Object: "eswitch " + handle, Why: why,
		Commands: []string{fmt.Sprintf("devlink dev eswitch set %s mode %s", handle, to)}, run: func(r *runner) error {
			if ensure {
				if cur, err := kernel.DevlinkEswitchMode(bus, dev); err == nil && cur == to {
					return nil
				}
			}
			if err := kernel.DevlinkSetEswitch(bus, dev, to); err != nil {
				return err
			}
			r.changed(entry{Kind: kindEswitch, Handle: handle, Old: from, New: to})
			return nil
		}})
}

func (p *planner) param(handle string, k *kernel.LinkConfig, name, from, to string) {
	bus, dev := k.Bus, k.Device
	p.add(Step{Section: "sriov", Action: "change", Object: "devlink " + handle, Why: fmt.Sprintf("%s %s, want %s", name, from, to),
		Commands: []string{fmt.Sprintf("devlink dev param set %s name %s value %s cmode runtime", handle, name, to)}, run: func(r *runner) error {
			if err := kernel.DevlinkSetParam(bus, dev, name, to); err != nil {
				return err
			}
			r.changed(entry{Kind: kindParam, Handle: handle, Name: name, Old: from, New: to})
			return nil
		}})
}

func (p *planner) vfSettings(pf string, k *kernel.LinkConfig, vf config.VFConfig, fresh bool) {
	var live *kernel.VFConfig
	if !fresh {
		for i := range k.VFs {
			if k.VFs[i].Index == vf.Index {
				live = &k.VFs[i]
			}
		}
	}
	var set kernel.VFSettings
	var args, why []string
	old := entry{Kind: kindVF, Link: pf, VF: vf.Index}
	var olds []string
	if vf.MAC != "" && (live == nil || live.MAC != vf.MAC) {
		m := vf.MAC
		set.MAC = &m
		args = append(args, "mac "+m)
		if live != nil {
			why = append(why, fmt.Sprintf("mac %s, want %s", live.MAC, m))
			olds = append(olds, "mac="+live.MAC)
		}
	}
	if vf.VLAN != nil && (live == nil || live.VLAN != *vf.VLAN) {
		v := *vf.VLAN
		set.VLAN = &v
		args = append(args, fmt.Sprintf("vlan %d", v))
		if live != nil {
			why = append(why, fmt.Sprintf("vlan %d, want %d", live.VLAN, v))
			olds = append(olds, fmt.Sprintf("vlan=%d", live.VLAN))
		}
	}
	if vf.Trust != nil && (live == nil || live.Trust != *vf.Trust) {
		t := *vf.Trust
		set.Trust = &t
		args = append(args, "trust "+onOff(t))
		if live != nil {
			why = append(why, fmt.Sprintf("trust %s, want %s", onOff(live.Trust), onOff(t)))
			olds = append(olds, "trust="+onOff(live.Trust))
		}
	}
	if vf.SpoofChk != nil && (live == nil || live.SpoofChk != *vf.SpoofChk) {
		c := *vf.SpoofChk
		set.SpoofChk = &c
		args = append(args, "spoofchk "+onOff(c))
		if live != nil {
			why = append(why, fmt.Sprintf("spoofchk %s, want %s", onOff(live.SpoofChk), onOff(c)))
			olds = append(olds, "spoofchk="+onOff(live.SpoofChk))
		}
	}
	if len(args) == 0 {
		return
	}
	w := strings.Join(why, ", ")
	if live == nil {
		w = "new VF"
		if !fresh {
			w = "VF not reported by the PF yet"
		}
	}
	idx := vf.Index
	old.Old = strings.Join(olds, " ")
	p.add(Step{Section: "sriov", Action: "change", Object: fmt.Sprintf("VF %d of %s", idx, pf), Why: w,
		Commands: []string{fmt.Sprintf("ip link set %s vf %d %s", pf, idx, strings.Join(args, " "))}, run: func(r *runner) error {
			if err := kernel.SRIOVSetVF(pf, idx, set); err != nil {
				return err
			}
			if old.Old != "" {
				r.changed(old)
			}
			return nil
		}})
}

// capNames are the VF port function capabilities sluice sets (mlx5).
var capNames = map[string]uint32{"crypto": kernel.PortFnCapIPsecCrypto, "packet": kernel.PortFnCapIPsecPacket}

func capArgs(caps []string) []string {
	var out []string
	for _, c := range caps {
		out = append(out, "ipsec_"+c+" enable")
	}
	return out
}

func (p *planner) vfCaps(path, handle string, k *kernel.LinkConfig, vf config.VFConfig, fresh bool) {
	var want uint32
	for _, c := range vf.IPsec {
		want |= capNames[c]
	}
	live, ok := p.live.VFCaps[fmt.Sprintf("%s/%d", handle, vf.Index)]
	if ok && !fresh && live.CapsKnown && live.Caps&want == want {
		return
	}
	if ok && !fresh && !live.CapsKnown {
		p.fail("%s.vf[%d].ipsec: %s's VF %d port reports no function capabilities: the driver cannot enable IPsec per VF (mlx5 with Linux 6.6+ and switchdev can); remove ipsec for this VF", path, vf.Index, handle, vf.Index)
		return
	}
	bus, dev, idx := k.Bus, k.Device, vf.Index
	p.add(Step{Section: "sriov", Action: "change", Object: fmt.Sprintf("VF %d port function of %s", idx, handle), Why: "IPsec capability " + strings.Join(vf.IPsec, ", "),
		Commands: []string{fmt.Sprintf("devlink port function set %s/<VF %d port> %s   # VF unbound from its driver", handle, idx, strings.Join(capArgs(vf.IPsec), " "))},
		run: func(r *runner) error {
			port, err := kernel.DevlinkVFPort(bus, dev, idx)
			var noPort *kernel.NoVFPortError
			if errors.As(err, &noPort) {
				return fmt.Errorf("%w (is the eswitch in switchdev mode, and does the VF exist?)", err)
			}
			if err != nil {
				return err
			}
			if !port.CapsKnown {
				return fmt.Errorf("%s VF %d: the driver reports no port function capabilities (IPsec per VF needs mlx5, Linux 6.6+, switchdev)", handle, idx)
			}
			if err := kernel.DevlinkSetVFPortCaps(bus, dev, port.Index, want, want); err != nil {
				return err
			}
			r.changed(entry{Kind: kindCaps, Handle: handle, VF: idx, Old: strconv.FormatUint(uint64(port.Caps&want), 10), New: strconv.FormatUint(uint64(want), 10)})
			return nil
		}})
}
