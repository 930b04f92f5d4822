// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sluice/internal/diag"
	"sluice/internal/kernel"
)

// Item is one setting: what the profile wants, what the host has, the
// command that would change it, and how to apply it.
type Item struct {
	Key     string `json:"key"`
	Want    string `json:"want"`
	Live    string `json:"live"`
	Command string `json:"command"`
	// ReportOnly items (kernel command line) are never changed by apply.
	ReportOnly bool `json:"report_only,omitempty"`
	// NotApplicable says why the setting does not apply to this device or
	// run (the driver lacks the ethtool op, the feature is [fixed] or
	// absent, --sysroot has no live device): such an item never drifts,
	// plan proposes nothing for it and check reports it as [N/A].
	NotApplicable string `json:"not_applicable,omitempty"`
	apply         func() error
}

// Drift reports whether the host differs from the profile.
func (it Item) Drift() bool { return it.NotApplicable == "" && it.Live != it.Want }

// notApplicable is an item that does not apply here, and why.
func notApplicable(key, want, why string) Item {
	return Item{Key: key, Want: want, Live: "(n/a)", NotApplicable: why}
}

// unsupported turns a read error into a not-applicable item when the
// driver lacks the ethtool operation; any other error stops Collect.
func unsupported(key, want, op string, err error) (Item, error) {
	if kernel.IsNotSupported(err) {
		return notApplicable(key, want, "the driver does not implement "+op+" (EOPNOTSUPP)"), nil
	}
	return Item{}, err
}

// Host is the machine a profile is applied to: its file system (sysctls,
// THP, IRQ affinity, command line) and, for interfaces, ethtool through
// internal/kernel. Tests point FS at a fixture tree and leave Ethtool off.
type Host struct {
	FS diag.FS
	// NoEthtool leaves out ethtool and setpci items (fixture trees).
	NoEthtool bool
	// Setpci is the setpci binary ("setpci" in PATH by default).
	Setpci string
}

func (h *Host) setpci() string {
	if h.Setpci != "" {
		return h.Setpci
	}
	return "setpci"
}

// Collect reads the live value of every item of the profile, in the order
// apply changes them: channels before the IRQs they create.
func (h *Host) Collect(p *Profile) ([]Item, error) {
	var items []Item
	for _, k := range slices.Sorted(maps.Keys(p.Sysctls)) {
		items = append(items, h.sysctl(k, p.Sysctls[k]))
	}
	if p.THP != "" {
		for _, f := range []string{"enabled", "defrag"} {
			items = append(items, h.thp(f, p.THP))
		}
	}
	cmdline, _ := h.FS.ReadString("/proc/cmdline")
	params := parseCmdline(cmdline)
	for _, k := range slices.Sorted(maps.Keys(p.Cmdline)) {
		live, ok := params[k]
		if !ok {
			live = "(absent)"
		}
		items = append(items, Item{Key: "cmdline " + k, Want: p.Cmdline[k], Live: live, ReportOnly: true,
			Command: fmt.Sprintf("# add %s=%s to GRUB_CMDLINE_LINUX in /etc/default/grub, update-grub, reboot", k, p.Cmdline[k])})
	}
	for _, name := range slices.Sorted(maps.Keys(p.Interfaces)) {
		ifc := p.Interfaces[name]
		if h.NoEthtool {
			items = append(items, sysrootSkipped(name, ifc)...)
		} else {
			its, err := h.ethtoolItems(name, ifc)
			if err != nil {
				return nil, err
			}
			items = append(items, its...)
		}
		its, err := h.irqItems(name, ifc)
		if err != nil {
			return nil, err
		}
		items = append(items, its...)
	}
	return items, nil
}

// parseCmdline splits the kernel command line into key -> value ("" for
// flags).
func parseCmdline(s string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

func (h *Host) sysctl(key, want string) Item {
	p := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	live, err := h.FS.ReadString(p)
	if err != nil {
		live = "(unreadable: " + errors.Unwrap(err).Error() + ")"
	}
	live = strings.Join(strings.Fields(live), " ")
	return Item{Key: "sysctl " + key, Want: want, Live: live, Command: fmt.Sprintf("sysctl -qw %s=%s", key, want),
		apply: func() error { return h.FS.WriteString(p, want) }}
}

var thpSelected = regexp.MustCompile(`\[(\w+)\]`)

func (h *Host) thp(file, want string) Item {
	p := "/sys/kernel/mm/transparent_hugepage/" + file
	live := "(unreadable)"
	if s, err := h.FS.ReadString(p); err == nil {
		if m := thpSelected.FindStringSubmatch(s); m != nil {
			live = m[1]
		} else if f := strings.Fields(s); len(f) == 1 {
			live = f[0]
		}
	}
	return Item{Key: "thp " + file, Want: want, Live: live, Command: fmt.Sprintf("echo %s > %s", want, p),
		apply: func() error { return h.FS.WriteString(p, want) }}
}

// irqItems pins RX queue i's IRQ to the profile's i-th CPU.
func (h *Host) irqItems(name string, ifc *Interface) ([]Item, error) {
	if len(ifc.cpus) == 0 {
		return nil, nil
	}
	if err := h.checkIRQCPUs(name, ifc.cpus); err != nil {
		return nil, err
	}
	rt, err := diag.ReadRxTopology(h.FS, []string{name})
	if err != nil {
		return nil, fmt.Errorf("interfaces.%s: %w", name, err)
	}
	var items []Item
	for _, n := range rt.Nodes {
		for _, ri := range n.Interfaces {
			if ri.Name != name {
				continue
			}
			for _, q := range ri.Queues {
				if q.Queue >= len(ifc.cpus) || (ifc.RxQueues > 0 && q.Queue >= ifc.RxQueues) {
					continue
				}
				want := itoa(ifc.cpus[q.Queue])
				key := fmt.Sprintf("%s rx-%d irq affinity", name, q.Queue)
				if q.IRQ == 0 {
					items = append(items, Item{Key: key, Want: want, Live: "(no IRQ found)", Command: "# no IRQ matched " + ri.IRQPattern})
					continue
				}
				p := fmt.Sprintf("/proc/irq/%d/smp_affinity_list", q.IRQ)
				items = append(items, Item{Key: fmt.Sprintf("%s rx-%d irq %d affinity", name, q.Queue, q.IRQ), Want: want, Live: q.Affinity,
					Command: fmt.Sprintf("echo %s > %s", want, p), apply: func() error { return h.FS.WriteString(p, want) }})
			}
		}
	}
	return items, nil
}

func onoff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func u32(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

func (h *Host) ethtoolItems(name string, ifc *Interface) ([]Item, error) {
	var items []Item
	if ifc.RxQueues > 0 {
		n := uint32(ifc.RxQueues)
		key := name + " channels combined"
		ch, err := kernel.EthtoolChannels(name)
		switch {
		case err != nil:
			it, err := unsupported(key, u32(n), "ethtool -l", err)
			if err != nil {
				return nil, fmt.Errorf("interfaces.%s.rx-queues: %w", name, err)
			}
			items = append(items, it)
		case ch.MaxCombined == 0:
			items = append(items, notApplicable(key, u32(n), fmt.Sprintf("the device has no combined channels (rx %d, tx %d separate queues)", ch.RX, ch.TX)))
		default:
			items = append(items, Item{Key: key, Want: u32(n), Live: u32(ch.Combined),
				Command: fmt.Sprintf("ethtool -L %s combined %d", name, n), apply: func() error { return kernel.EthtoolSetCombined(name, n) }})
		}
	}
	if ifc.RSSEqual > 0 {
		live := "(unreadable)"
		n := ifc.RSSEqual
		t, err := kernel.EthtoolRSS(name)
		if err == nil {
			live = rssSpread(t)
		}
		if err != nil && kernel.IsNotSupported(err) {
			items = append(items, notApplicable(name+" rss", "equal "+itoa(n), "the driver has no RSS indirection table (ethtool -x: EOPNOTSUPP)"))
		} else {
			items = append(items, Item{Key: name + " rss", Want: "equal " + itoa(n), Live: live,
				Command: fmt.Sprintf("ethtool -X %s equal %d", name, n), apply: func() error { return kernel.EthtoolSetRSSEqual(name, n) }})
		}
	}
	if len(ifc.Features) > 0 {
		live, err := kernel.EthtoolFeatures(name)
		if err != nil {
			return nil, fmt.Errorf("interfaces.%s.features: %w", name, err)
		}
		for _, fname := range slices.Sorted(maps.Keys(ifc.Features)) {
			want := ifc.Features[fname]
			for _, kn := range featureNames(fname) {
				st, ok := live[kn]
				key := fmt.Sprintf("%s feature %s", name, kn)
				switch {
				case !ok:
					items = append(items, notApplicable(key, onoff(want), "the device has no feature "+kn))
					continue
				case !st.Available && st.Active != want:
					items = append(items, notApplicable(key, onoff(want), fmt.Sprintf("%s is [fixed] %s: the driver cannot change it", kn, onoff(st.Active))))
					continue
				}
				l := onoff(st.Active)
				kn := kn
				items = append(items, Item{Key: key, Want: onoff(want), Live: l,
					Command: fmt.Sprintf("ethtool -K %s %s %s", name, kn, onoff(want)),
					apply:   func() error { return kernel.EthtoolSetFeatures(name, map[string]bool{kn: want}) }})
			}
		}
	}
	if r := ifc.Rings; r != nil {
		live, err := kernel.EthtoolRings(name)
		if err != nil {
			it, err := unsupported(name+" rings", ringWant(r), "ethtool -g", err)
			if err != nil {
				return nil, fmt.Errorf("interfaces.%s.rings: %w", name, err)
			}
			items = append(items, it)
		} else {
			items = append(items, ringItems(name, r, live)...)
		}
	}
	if fc := ifc.FlowControl; fc != nil {
		it, err := flowControlItem(name, fc)
		if err != nil {
			return nil, fmt.Errorf("interfaces.%s.flow-control: %w", name, err)
		}
		items = append(items, it)
	}
	if c := ifc.Coalesce; c != nil {
		live, err := kernel.EthtoolCoalesce(name)
		if err != nil {
			it, err := unsupported(name+" coalesce", "(profile)", "ethtool -c", err)
			if err != nil {
				return nil, fmt.Errorf("interfaces.%s.coalesce: %w", name, err)
			}
			items = append(items, it)
		} else {
			items = append(items, coalesceItems(name, c, live)...)
		}
	}
	if len(ifc.PrivateFlags) > 0 {
		live, err := kernel.EthtoolPrivFlags(name)
		if err != nil {
			it, err := unsupported(name+" private flags", "(profile)", "ethtool --show-priv-flags", err)
			if err != nil {
				return nil, fmt.Errorf("interfaces.%s.private-flags: %w", name, err)
			}
			items = append(items, it)
		} else {
			items = append(items, privFlagItems(name, ifc.PrivateFlags, live)...)
		}
	}
	if ifc.PCIeMaxReadReq > 0 {
		items = append(items, h.mrrsItem(name, ifc.PCIeMaxReadReq))
	}
	return items, nil
}

func ringItems(name string, r *Rings, live kernel.Rings) []Item {
	var items []Item
	{
		if r.RX != 0 {
			items = append(items, Item{Key: name + " ring rx", Want: u32(r.RX), Live: u32(live.RX),
				Command: fmt.Sprintf("ethtool -G %s rx %d", name, r.RX), apply: func() error { return kernel.EthtoolSetRings(name, r.RX, 0) }})
		}
		if r.TX != 0 {
			items = append(items, Item{Key: name + " ring tx", Want: u32(r.TX), Live: u32(live.TX),
				Command: fmt.Sprintf("ethtool -G %s tx %d", name, r.TX), apply: func() error { return kernel.EthtoolSetRings(name, 0, r.TX) }})
		}
	}
	return items
}

func coalesceItems(name string, c *Coalesce, live kernel.Coalesce) []Item {
	var items []Item
	{
		addB := func(field string, want *bool, l bool, set func(*kernel.Coalesce)) {
			if want != nil {
				items = append(items, Item{Key: name + " coalesce " + field, Want: onoff(*want), Live: onoff(l),
					Command: fmt.Sprintf("ethtool -C %s %s %s", name, field, onoff(*want)), apply: func() error { return kernel.EthtoolSetCoalesce(name, set) }})
			}
		}
		addU := func(field string, want *uint32, l uint32, set func(*kernel.Coalesce)) {
			if want != nil {
				items = append(items, Item{Key: name + " coalesce " + field, Want: u32(*want), Live: u32(l),
					Command: fmt.Sprintf("ethtool -C %s %s %d", name, field, *want), apply: func() error { return kernel.EthtoolSetCoalesce(name, set) }})
			}
		}
		addB("adaptive-rx", c.AdaptiveRX, live.AdaptiveRX, func(k *kernel.Coalesce) { k.AdaptiveRX = *c.AdaptiveRX })
		addB("adaptive-tx", c.AdaptiveTX, live.AdaptiveTX, func(k *kernel.Coalesce) { k.AdaptiveTX = *c.AdaptiveTX })
		addU("rx-usecs", c.RXUsecs, live.RXUsecs, func(k *kernel.Coalesce) { k.RXUsecs = *c.RXUsecs })
		addU("rx-frames", c.RXFrames, live.RXFrames, func(k *kernel.Coalesce) { k.RXFrames = *c.RXFrames })
		addU("tx-usecs", c.TXUsecs, live.TXUsecs, func(k *kernel.Coalesce) { k.TXUsecs = *c.TXUsecs })
		addU("tx-frames", c.TXFrames, live.TXFrames, func(k *kernel.Coalesce) { k.TXFrames = *c.TXFrames })
	}
	return items
}

func privFlagItems(name string, flags map[string]bool, live map[string]bool) []Item {
	var items []Item
	{
		for _, fl := range slices.Sorted(maps.Keys(flags)) {
			want := flags[fl]
			l, ok := live[fl]
			if !ok {
				items = append(items, notApplicable(fmt.Sprintf("%s private flag %s", name, fl), onoff(want), "the driver has no private flag "+fl))
				continue
			}
			ls := onoff(l)
			fl := fl
			items = append(items, Item{Key: fmt.Sprintf("%s private flag %s", name, fl), Want: onoff(want), Live: ls,
				Command: fmt.Sprintf("ethtool --set-priv-flags %s %s %s", name, fl, onoff(want)),
				apply:   func() error { return kernel.EthtoolSetPrivFlags(name, map[string]bool{fl: want}) }})
		}
	}
	return items
}

// rssSpread describes an indirection table as "equal N" when it cycles
// over queues 0..N-1, else lists the queues it uses.
func rssSpread(t []uint32) string {
	if len(t) == 0 {
		return "(no table)"
	}
	max := uint32(0)
	for _, q := range t {
		if q > max {
			max = q
		}
	}
	n := int(max) + 1
	for i, q := range t {
		if int(q) != i%n {
			return fmt.Sprintf("custom (queues 0-%d)", max)
		}
	}
	return "equal " + itoa(n)
}

// mrrsItem reads and sets PCIe Device Control bits 14:12 (Max Read
// Request Size) with setpci, as the ConnectX-7 benchmark's set_pcie_mrrs.
func (h *Host) mrrsItem(name string, want int) Item {
	pci := h.FS.PCIAddress(name)
	key := name + " pcie max-read-req"
	if pci == "" {
		return Item{Key: key, Want: itoa(want), Live: "(no PCI device)", Command: "# " + name + " is not a PCI device"}
	}
	out, err := exec.Command(h.setpci(), "-s", pci, "CAP_EXP+8.w").Output()
	if err != nil {
		return Item{Key: key, Want: itoa(want), Live: "(setpci: " + err.Error() + ")", Command: "apt-get install pciutils",
			apply: func() error { return fmt.Errorf("setpci -s %s CAP_EXP+8.w: %w (install pciutils)", pci, err) }}
	}
	cur, err := strconv.ParseUint(strings.TrimSpace(string(out)), 16, 16)
	if err != nil {
		return Item{Key: key, Want: itoa(want), Live: "(setpci said " + strings.TrimSpace(string(out)) + ")"}
	}
	live := 128 << ((cur >> 12) & 7)
	nv := (cur &^ 0x7000) | uint64(mrrsValues[want])<<12
	cmd := fmt.Sprintf("setpci -s %s CAP_EXP+8.w=%04x", pci, nv)
	return Item{Key: key, Want: itoa(want), Live: itoa(int(live)), Command: cmd,
		apply: func() error {
			if out, err := exec.Command(h.setpci(), "-s", pci, fmt.Sprintf("CAP_EXP+8.w=%04x", nv)).CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %w: %s", cmd, err, out)
			}
			return nil
		}}
}

// ringWant is the profile's rings as ethtool -G arguments.
func ringWant(r *Rings) string {
	var parts []string
	if r.RX != 0 {
		parts = append(parts, "rx "+u32(r.RX))
	}
	if r.TX != 0 {
		parts = append(parts, "tx "+u32(r.TX))
	}
	return strings.Join(parts, " ")
}
