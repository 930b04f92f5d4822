// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"slices"

	"sluice/internal/config"
	"sluice/internal/kernel"
)

// guests undoes the guest steps first, before the VTEPs and SAs go: the
// domains are undefined, the VFs go back to the driver they had, the ports
// leave the bridges, the bridges apply created are deleted, and OVS's
// hw-offload gets its old value. MTU and up state of ports are restored
// with the rest (restore()).
func (t *tearer) guests() {
	if len(t.h.GuestNetworks) == 0 {
		return
	}
	gl := t.live.Guests
	if gl == nil {
		gl = &GuestLive{Bridges: map[string][]string{}, Domains: map[string]bool{}}
	}
	for _, g := range t.h.Guests {
		if !g.Define {
			continue
		}
		name := g.Name
		if gl.Domains[name] && t.ours(kindDomain, func(e entry) bool { return e.Name == name }, "domain "+name) {
			t.add(Step{Section: "guests", Action: "delete", Object: "domain " + name, Why: "declared by the file",
				Commands: []string{"virsh undefine " + name}, run: func(r *runner) error {
					if out, err := runVirsh("undefine", name); err != nil {
						return fmt.Errorf("virsh undefine %s: %v: %s", name, err, out)
					}
					r.j.dropCreated(entry{Kind: kindDomain, Name: name})
					return nil
				}})
		}
	}
	if t.has {
		for i := len(t.j.Changed) - 1; i >= 0; i-- {
			e := t.j.Changed[i]
			if e.Kind != kindDriver {
				continue
			}
			pci, old := e.Name, e.Old
			cmds := []string{fmt.Sprintf("echo > /sys/bus/pci/devices/%s/driver_override", pci),
				fmt.Sprintf("echo %s > /sys/bus/pci/drivers/%s/unbind", pci, e.New), fmt.Sprintf("echo %s > /sys/bus/pci/drivers_probe", pci)}
			t.add(Step{Section: "restore", Action: "change", Object: "driver of VF " + pci, Why: fmt.Sprintf("was %s before apply", orUnset(old)),
				Commands: cmds, run: func(*runner) error { return BindDriver(pci, "") }})
		}
	}
	// Ports, then bridges, newest first.
	if t.has {
		for i := len(t.j.Created) - 1; i >= 0; i-- {
			e := t.j.Created[i]
			switch e.Kind {
			case kindOVSPort:
				if !slices.Contains(gl.Bridges[e.Link], e.Name) {
					continue
				}
				br, port := e.Link, e.Name
				t.add(Step{Section: "guests", Action: "delete", Object: fmt.Sprintf("ovs port %s on %s", port, br), Why: "created by apply",
					Commands: []string{fmt.Sprintf("ovs-vsctl del-port %s %s", br, port)}, run: func(r *runner) error {
						if _, err := ovsVsctl("--if-exists", "del-port", br, port); err != nil {
							return err
						}
						r.j.dropCreated(entry{Kind: kindOVSPort, Name: port, Link: br})
						return nil
					}})
			case kindBridgePort:
				if t.live.link(e.Link) == nil {
					continue
				}
				dev, br := e.Link, e.Name
				t.add(Step{Section: "guests", Action: "change", Object: "port " + dev, Why: "put into " + br + " by apply",
					Commands: []string{fmt.Sprintf("ip link set %s nomaster", dev)}, run: func(r *runner) error {
						if err := kernel.LinkSetMaster(dev, ""); err != nil {
							return err
						}
						r.j.dropCreated(entry{Kind: kindBridgePort, Link: dev, Name: br})
						return nil
					}})
			}
		}
	}
	for _, n := range t.h.GuestNetworks {
		br := n.BridgeName
		switch n.Bridge {
		case config.BridgeOVS:
			if _, ok := gl.Bridges[br]; ok && t.ours(kindOVSBridge, func(e entry) bool { return e.Name == br }, "ovs bridge "+br) {
				t.add(Step{Section: "guests", Action: "delete", Object: "ovs bridge " + br, Why: "declared by the file",
					Commands: []string{"ovs-vsctl del-br " + br}, run: func(r *runner) error {
						if _, err := ovsVsctl("--if-exists", "del-br", br); err != nil {
							return err
						}
						r.j.dropCreated(entry{Kind: kindOVSBridge, Name: br})
						return nil
					}})
			}
		default:
			if k := t.live.link(br); k != nil && k.Kind == "bridge" && t.ours(kindLink, func(e entry) bool { return e.Link == br }, "bridge "+br) {
				t.deleteLink("guests", br, "declared by the file")
			}
		}
	}
	if t.has {
		for _, e := range t.j.Changed {
			if e.Kind != kindOVSConfig || gl.HWOffload != e.New {
				continue
			}
			old := e.Old
			cmd := []string{"set", "Open_vSwitch", ".", "other_config:hw-offload=" + old}
			if old == "" {
				cmd = []string{"remove", "Open_vSwitch", ".", "other_config", "hw-offload"}
			}
			t.add(Step{Section: "restore", Action: "change", Object: "Open vSwitch other_config:hw-offload", Why: "was " + orUnset(old) + " before apply",
				Commands: []string{"ovs-vsctl " + joinArgs(cmd)}, run: func(*runner) error {
					_, err := ovsVsctl(cmd...)
					return err
				}})
		}
	}
}

func joinArgs(a []string) string {
	s := ""
	for i, x := range a {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s
}
