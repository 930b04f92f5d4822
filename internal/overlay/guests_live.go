// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/fileread"
)

// GuestLive is the part of the host the guest steps compare with: Open
// vSwitch (read through ovs-vsctl, as an operator would), the VFs' PCI
// driver bindings and IOMMU groups (sysfs), their representors, and the
// libvirt domains already defined.
type GuestLive struct {
	// OVSErr is why Open vSwitch could not be read ("" : it was, or no
	// network uses it).
	OVSErr string
	// HWOffload is other_config:hw-offload ("" : unset).
	HWOffload string
	// Bridges maps an OVS bridge to its ports.
	Bridges map[string][]string
	// Ifaces maps an OVS interface to its type and options.
	Ifaces map[string]OVSIface
	// VFs maps "pf/index" to what sysfs says of the VF.
	VFs map[string]VFLive
	// Domains holds the names of defined libvirt domains (read only when
	// a guest asks for define).
	Domains map[string]bool
}

// OVSIface is one OVS interface's type and options.
type OVSIface struct {
	Type    string
	Options map[string]string
}

// VFLive is one VF as sysfs shows it.
type VFLive struct {
	PCI      string // 0000:03:00.2; "" : the VF does not exist
	Driver   string // "" : unbound
	Override string // driver_override ("" : none)
	// IOMMUGroup is the VF's group number ("" : no IOMMU, vfio-pci will
	// refuse it); GroupPeers are the other devices in that group.
	IOMMUGroup string
	GroupPeers []string
	// Representor is the VF's representor netdev in switchdev mode.
	Representor string
}

// sysfsRoot is where ReadGuestLive reads PCI and net devices (tests point
// it at a fixture).
var sysfsRoot = "/sys"

func vfKey(pf string, index int) string { return pf + "/" + strconv.Itoa(index) }

// ReadGuestLive reads what the guest steps need. Missing tools are not
// errors here: the plan explains them where they matter.
func ReadGuestLive(h *config.Host, l *Live) *GuestLive {
	g := &GuestLive{Bridges: map[string][]string{}, Ifaces: map[string]OVSIface{}, VFs: map[string]VFLive{}, Domains: map[string]bool{}}
	for _, n := range h.GuestNetworks {
		if n.Bridge == config.BridgeOVS {
			g.readOVS()
			break
		}
	}
	for _, gu := range h.Guests {
		if gu.VF == nil {
			continue
		}
		pf, err := l.resolve(gu.VF.PF)
		if err != nil {
			continue
		}
		g.VFs[vfKey(gu.VF.PF, gu.VF.Index)] = readVF(pf, gu.VF.Index)
	}
	for _, gu := range h.Guests {
		if gu.Define {
			if out, err := exec.Command("virsh", "list", "--all", "--name").Output(); err == nil {
				for _, n := range strings.Fields(string(out)) {
					g.Domains[n] = true
				}
			}
			break
		}
	}
	return g
}

func ovsVsctl(args ...string) (string, error) {
	cmd := exec.Command("ovs-vsctl", append([]string{"--timeout=60"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("ovs-vsctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func (g *GuestLive) readOVS() {
	brs, err := ovsVsctl("list-br")
	if err != nil {
		g.OVSErr = err.Error() + " (is ovsdb-server running? start openvswitch-switch)"
		return
	}
	g.HWOffload, _ = ovsVsctl("--if-exists", "get", "Open_vSwitch", ".", "other_config:hw-offload")
	g.HWOffload = strings.Trim(g.HWOffload, `"`)
	for _, br := range strings.Fields(brs) {
		ports, _ := ovsVsctl("list-ports", br)
		g.Bridges[br] = strings.Fields(ports)
		for _, p := range g.Bridges[br] {
			typ, _ := ovsVsctl("get", "Interface", p, "type")
			opts, _ := ovsVsctl("get", "Interface", p, "options")
			g.Ifaces[p] = OVSIface{Type: strings.Trim(typ, `"`), Options: parseOVSMap(opts)}
		}
	}
}

// parseOVSMap reads an OVSDB map as ovs-vsctl prints it:
// {dst_port="4789", key="1024", remote_ip="192.168.80.3"}.
func parseOVSMap(s string) map[string]string {
	m := map[string]string{}
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "{"), "}")
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok {
			m[k] = strings.Trim(v, `"`)
		}
	}
	return m
}

func readLinkBase(path string) string {
	t, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

// readVF reads VF index of the PF netdev pf from sysfs.
func readVF(pf string, index int) VFLive {
	var v VFLive
	// netdevsim's VFs have representors but no PCI functions.
	v.Representor = findRepresentor(pf, index)
	v.PCI = readLinkBase(filepath.Join(sysfsRoot, "class/net", pf, "device", fmt.Sprintf("virtfn%d", index)))
	if v.PCI == "" {
		return v
	}
	dev := filepath.Join(sysfsRoot, "bus/pci/devices", v.PCI)
	v.Driver = readLinkBase(filepath.Join(dev, "driver"))
	if b, err := fileread.ReadKernel(filepath.Join(dev, "driver_override"), fileread.ProcLimit); err == nil {
		v.Override = strings.TrimSpace(string(b))
		if v.Override == "(null)" {
			v.Override = ""
		}
	}
	v.IOMMUGroup = readLinkBase(filepath.Join(dev, "iommu_group"))
	if v.IOMMUGroup != "" {
		ents, _ := os.ReadDir(filepath.Join(dev, "iommu_group", "devices"))
		for _, e := range ents {
			if e.Name() != v.PCI {
				v.GroupPeers = append(v.GroupPeers, e.Name())
			}
		}
	}
	return v
}

// findRepresentor finds VF index's representor: the netdev on the PF's
// switch (same phys_switch_id) whose phys_port_name ends in "vf<index>"
// (mlx5 and netdevsim name them pf0vf0).
func findRepresentor(pf string, index int) string {
	read := func(dev, attr string) string {
		b, err := fileread.ReadKernel(filepath.Join(sysfsRoot, "class/net", dev, attr), fileread.ProcLimit)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	sw := read(pf, "phys_switch_id")
	if sw == "" {
		return ""
	}
	ents, _ := os.ReadDir(filepath.Join(sysfsRoot, "class/net"))
	for _, e := range ents {
		if e.Name() == pf || read(e.Name(), "phys_switch_id") != sw {
			continue
		}
		if m := vfPortNameRE.FindStringSubmatch(read(e.Name(), "phys_port_name")); m != nil && m[1] == strconv.Itoa(index) {
			return e.Name()
		}
	}
	return ""
}

var vfPortNameRE = regexp.MustCompile(`^(?:c\d+)?pf\d+vf(\d+)$`)
