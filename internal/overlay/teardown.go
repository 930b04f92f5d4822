// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// NewTeardown plans the removal of what the file created, in the reverse
// of apply's order: connectivity first (VTEP devices, routes, addresses),
// then encryption (policies, SAs), then the bond, then what apply changed
// on devices it did not create (restored from the journal). With a journal
// only objects apply created are removed; without one (lost /run, or an
// overlay set up by hand) every object the file declares is removed when
// it matches the file, and changed attributes are left as they are (the
// plan says so).
func NewTeardown(h *config.Host, live *Live, j *Journal, hasJournal bool) *Plan {
	t := &tearer{h: h, live: live, j: j, has: hasJournal, plan: &Plan{File: h.File, Name: h.Name}}
	if !hasJournal {
		t.plan.Notes = append(t.plan.Notes, "no journal of an apply here: removing every object the file declares that matches it; attributes of existing devices (MTU, VF count, eswitch mode) are left as they are")
	}
	t.guests()
	t.vteps()
	t.ike()
	t.ikeBlocks() // plan_ike_block.go
	t.ipsec()
	t.uplinks()
	t.restore()
	return t.plan
}

type tearer struct {
	h    *config.Host
	live *Live
	j    *Journal
	has  bool
	plan *Plan
}

func (t *tearer) add(s Step) { t.plan.Steps = append(t.plan.Steps, s) }

// ours says whether the journal lets teardown remove an object: it was
// created by apply, or there is no journal.
func (t *tearer) ours(kind string, match func(entry) bool, what string) bool {
	if !t.has || t.j.created(kind, match) {
		return true
	}
	t.plan.Notes = append(t.plan.Notes, fmt.Sprintf("%s existed before apply: left in place", what))
	return false
}

func (t *tearer) deleteLink(section, name, why string) {
	t.add(Step{Section: section, Action: "delete", Object: "link " + name, Why: why, Commands: []string{"ip link del " + name},
		run: func(r *runner) error {
			if err := kernel.LinkDelete(name); err != nil && !kernel.IsNotExist(err) {
				return err
			}
			r.j.dropCreated(entry{Kind: kindLink, Link: name})
			return nil
		}})
}

func (t *tearer) vteps() {
	loDone := map[netip.Prefix]bool{}
	for _, v := range t.h.VTEPs {
		k := t.live.link(v.Name)
		if k != nil && k.Kind == v.Type && vtepDiff(&v, k) == "" {
			name := v.Name
			if t.ours(kindLink, func(e entry) bool { return e.Link == name }, "VTEP "+name) {
				t.deleteLink("vteps", name, "declared by the file")
			}
		} else if k != nil {
			t.plan.Notes = append(t.plan.Notes, fmt.Sprintf("%s is not the VTEP the file declares (%s): left in place", v.Name, vtepDiff(&v, k)))
		}
		for _, r := range v.Remotes {
			if !r.Via.IsValid() {
				continue
			}
			dst := hostPrefix(r.Address)
			cur := t.live.route(dst)
			if cur == nil || cur.Via != r.Via {
				continue
			}
			t.route(dst, r.Via, v.Local)
		}
		lo := t.live.link("lo")
		a := hostPrefix(v.Local)
		if loDone[a] {
			continue // shared by VTEPs with different VNIs
		}
		loDone[a] = true
		if hasAddr(lo, a) && t.ours(kindAddr, func(e entry) bool { return e.Link == "lo" && e.Prefix == a.String() }, "address "+a.String()+" on lo") {
			t.add(Step{Section: "vteps", Action: "delete", Object: fmt.Sprintf("address %s on lo", a), Why: "declared by the file",
				Commands: []string{fmt.Sprintf("ip addr del %s dev lo", a)}, run: func(r *runner) error {
					if err := kernel.AddrAdd("lo", a, true); err != nil && !kernel.IsNotExist(err) {
						return err
					}
					r.j.dropCreated(entry{Kind: kindAddr, Link: "lo", Prefix: a.String()})
					return nil
				}})
		}
	}
}

// route removes a route apply created, or puts back the one it replaced.
func (t *tearer) route(dst netip.Prefix, via, src netip.Addr) {
	var replaced *entry
	for i, e := range t.j.Changed {
		if e.Kind == kindRoute && e.Prefix == dst.String() {
			replaced = &t.j.Changed[i]
		}
	}
	if replaced != nil {
		f := strings.Fields(replaced.Old) // via src dev, "" when absent
		if len(f) >= 1 {
			oldVia, _ := netip.ParseAddr(f[0])
			var oldSrc netip.Addr
			if len(f) >= 2 {
				oldSrc, _ = netip.ParseAddr(f[1])
			}
			if oldVia.IsValid() {
				t.add(Step{Section: "vteps", Action: "change", Object: "route " + dst.String(), Why: "put back the route apply replaced",
					Commands: []string{fmt.Sprintf("ip route replace %s via %s%s", dst, oldVia, srcArg(oldSrc))}, run: func(*runner) error {
						return kernel.RouteReplace(dst, oldVia, oldSrc)
					}})
				return
			}
		}
	}
	if !t.ours(kindRoute, func(e entry) bool { return e.Prefix == dst.String() }, "route "+dst.String()) {
		return
	}
	t.add(Step{Section: "vteps", Action: "delete", Object: "route " + dst.String(), Why: "declared by the file",
		Commands: []string{"ip route del " + dst.String()}, run: func(r *runner) error {
			if err := kernel.RouteDelete(dst); err != nil && !kernel.IsNotExist(err) {
				return err
			}
			r.j.dropCreated(entry{Kind: kindRoute, Prefix: dst.String(), Via: via.String(), Src: src.String()})
			return nil
		}})
}

func srcArg(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return " src " + a.String()
}

func (t *tearer) ipsec() {
	if t.h.IPsec == nil {
		return
	}
	var sas []wantSA
	for i := range t.h.IPsec.Peers {
		pr := &t.h.IPsec.Peers[i]
		if pr.Keying == config.KeyingIKE {
			continue // charon's SAs: t.ike() (teardown_ike.go)
		}
		sas = append(sas, wantSA{peer: pr, dir: "out", src: pr.Local, dst: pr.Remote, spi: pr.SPIOut, reqid: pr.ReqidOut},
			wantSA{peer: pr, dir: "in", src: pr.Remote, dst: pr.Local, spi: pr.SPIIn, reqid: pr.ReqidIn})
	}
	// Policies first: removing an SA under a live policy drops traffic,
	// removing a policy under a live SA would not matter; but with the
	// VTEPs gone first, neither order leaks cleartext.
	for _, w := range sas {
		for _, pol := range policySpecs(w) {
			l := t.live.policy(pol.Dir, pol.Src, pol.Dst)
			if l == nil || len(l.Tmpls) != 1 || l.Tmpls[0].Reqid != pol.Reqid {
				continue
			}
			pol := pol
			if !t.ours(kindPolicy, func(e entry) bool {
				return e.Dir == pol.Dir.String() && e.Src == pol.Src.String() && e.Dst == pol.Dst.String()
			}, fmt.Sprintf("policy %s %s->%s", pol.Dir, pol.Src, pol.Dst)) {
				continue
			}
			t.add(Step{Section: "ipsec", Action: "delete", Object: fmt.Sprintf("policy %s %s->%s", pol.Dir, pol.Src, pol.Dst), Why: "declared by the file",
				Commands: []string{fmt.Sprintf("ip xfrm policy delete src %s dst %s dir %s", pol.Src, pol.Dst, pol.Dir)}, run: func(r *runner) error {
					if err := xfrm.PolicyDelete(pol.Dir, pol.Src, pol.Dst); err != nil && !kernel.IsNotExist(err) {
						return err
					}
					r.j.dropCreated(entry{Kind: kindPolicy, Dir: pol.Dir.String(), Src: pol.Src.String(), Dst: pol.Dst.String()})
					return nil
				}})
		}
	}
	for _, w := range sas {
		l := t.live.sa(w.dst, w.spi)
		if l == nil || l.Src != w.src {
			continue
		}
		w := w
		if !t.ours(kindSA, func(e entry) bool { return e.Dst == w.dst.String() && e.SPI == w.spi }, w.String()) {
			continue
		}
		t.add(Step{Section: "ipsec", Action: "delete", Object: w.String(), Why: "declared by the file",
			Commands: []string{fmt.Sprintf("ip xfrm state delete src %s dst %s proto esp spi %#x", w.src, w.dst, w.spi)}, run: func(r *runner) error {
				if err := xfrm.StateDelete(w.dst, w.spi); err != nil && !kernel.IsNotExist(err) {
					return err
				}
				r.j.dropCreated(entry{Kind: kindSA, Dst: w.dst.String(), SPI: w.spi, Src: w.src.String()})
				return nil
			}})
	}
}

func (t *tearer) uplinks() {
	u := t.h.Uplinks
	if u == nil {
		return
	}
	if b := u.Bond; b != nil {
		k := t.live.link(b.Name)
		if k != nil && k.Kind == "bond" {
			if t.ours(kindLink, func(e entry) bool { return e.Link == b.Name }, "bond "+b.Name) {
				t.deleteLink("uplinks", b.Name, "declared by the file (its ports are released and get their MTU and MAC back)")
				return
			}
			// An existing bond: release the ports apply enslaved.
			for _, e := range t.j.Changed {
				if e.Kind == kindMaster && e.New == b.Name {
					port := e.Link
					t.add(Step{Section: "uplinks", Action: "change", Object: "port " + port, Why: "enslaved by apply",
						Commands: []string{fmt.Sprintf("ip link set %s nomaster", port)}, run: func(*runner) error {
							return kernel.LinkSetMaster(port, "")
						}})
				}
			}
		}
		return
	}
	if len(u.Ports) == 1 {
		name, err := t.live.resolve(u.Ports[0])
		if err != nil {
			return
		}
		k := t.live.link(name)
		for _, a := range u.Addresses {
			a := a
			if !hasAddr(k, a) || !t.ours(kindAddr, func(e entry) bool { return e.Link == name && e.Prefix == a.String() }, "address "+a.String()) {
				continue
			}
			t.add(Step{Section: "uplinks", Action: "delete", Object: fmt.Sprintf("address %s on %s", a, name), Why: "declared by the file",
				Commands: []string{fmt.Sprintf("ip addr del %s dev %s", a, name)}, run: func(*runner) error {
					if err := kernel.AddrAdd(name, a, true); err != nil && !kernel.IsNotExist(err) {
						return err
					}
					return nil
				}})
		}
	}
}

// restore puts back what apply changed on devices it did not create,
// newest change first, but only where the value is still the one apply
// set (an operator's later change wins).
func (t *tearer) restore() {
	if !t.has {
		return
	}
	ch := t.j.Changed
	// SR-IOV: VFs to 0 before eswitch/param, count last, then the
	// settings of the VFs that existed before apply.
	var numvfs, vfs []entry
	for i := len(ch) - 1; i >= 0; i-- {
		e := ch[i]
		switch e.Kind {
		case kindMTU:
			k := t.live.link(e.Link)
			if k == nil || strconv.Itoa(k.MTU) != e.New {
				continue
			}
			old, _ := strconv.Atoi(e.Old)
			dev := e.Link
			t.add(Step{Section: "restore", Action: "change", Object: "link " + dev, Why: fmt.Sprintf("mtu %s was %s before apply", e.New, e.Old),
				Commands: []string{fmt.Sprintf("ip link set %s mtu %d", dev, old)}, run: func(*runner) error { return kernel.LinkSetMTU(dev, old) }})
		case kindUp:
			k := t.live.link(e.Link)
			if k == nil || !k.Up {
				continue
			}
			dev := e.Link
			t.add(Step{Section: "restore", Action: "change", Object: "link " + dev, Why: "was down before apply",
				Commands: []string{fmt.Sprintf("ip link set %s down", dev)}, run: func(*runner) error { return kernel.LinkSetUp(dev, false) }})
		case kindMaster:
			// Released with the bond; bring the port back up if it was.
			if !e.OldUp {
				continue
			}
			dev := e.Link
			t.add(Step{Section: "restore", Action: "change", Object: "link " + dev, Why: "was up before apply enslaved it",
				Commands: []string{fmt.Sprintf("ip link set %s up", dev)}, run: func(*runner) error { return kernel.LinkSetUp(dev, true) }})
		case kindFeature:
			if t.live.link(e.Link) == nil || e.Old != "off" {
				continue
			}
			dev, name := e.Link, e.Name
			t.add(Step{Section: "restore", Action: "change", Object: "features of " + dev, Why: name + " was off before apply",
				Commands: []string{fmt.Sprintf("ethtool -K %s %s off", dev, name)}, run: func(*runner) error {
					return kernel.EthtoolSetFeatures(dev, map[string]bool{name: false})
				}})
		case kindPrivFlag:
			dev, name, v := e.Link, e.Name, e.Old == "on"
			t.add(Step{Section: "restore", Action: "change", Object: "PF " + dev, Why: fmt.Sprintf("%s was %s before apply", name, e.Old),
				Commands: []string{fmt.Sprintf("ethtool --set-priv-flags %s %s %s", dev, name, e.Old)}, run: func(*runner) error {
					return kernel.EthtoolSetPrivFlags(dev, map[string]bool{name: v})
				}})
		case kindNumVFs, kindEswitch, kindParam:
			numvfs = append(numvfs, e)
		case kindVF:
			vfs = append(vfs, e)
		}
	}
	t.restoreSRIOV(numvfs)
	t.restoreVFs(vfs)
	t.add(Step{Section: "restore", Action: "delete", Object: "journal", Why: "everything it recorded is undone",
		Commands: []string{"rm " + t.j.path}, run: func(r *runner) error { return r.j.remove() }})
}

// restoreSRIOV undoes VF count, eswitch and parameter changes: VFs to 0,
// parameters and eswitch back, then the VF count before the first apply.
func (t *tearer) restoreSRIOV(es []entry) {
	firstCount := map[string]string{} // pf -> count before the first change
	var pfs []string
	for _, e := range es { // newest first
		if e.Kind == kindNumVFs {
			if _, ok := firstCount[e.Link]; !ok {
				pfs = append(pfs, e.Link)
			}
			firstCount[e.Link] = e.Old // ends with the oldest
		}
	}
	for _, pf := range pfs {
		pf := pf
		t.add(Step{Section: "restore", Action: "change", Object: "PF " + pf, Why: "VFs to 0 before modes change back",
			Commands: []string{fmt.Sprintf("echo 0 > /sys/class/net/%s/device/sriov_numvfs", pf)}, run: func(*runner) error {
				return kernel.SRIOVSetNumVFs(pf, 0)
			}})
	}
	firstMode := map[string]entry{}
	for _, e := range es {
		if e.Kind == kindEswitch || e.Kind == kindParam {
			firstMode[e.Kind+e.Handle+e.Name] = e
		}
	}
	for _, kind := range []string{kindEswitch, kindParam} {
		for _, e := range firstMode {
			if e.Kind != kind {
				continue
			}
			bus, dev, _ := strings.Cut(e.Handle, "/")
			e := e
			if e.Kind == kindEswitch {
				t.add(Step{Section: "restore", Action: "change", Object: "eswitch " + e.Handle, Why: "was " + e.Old + " before apply",
					Commands: []string{fmt.Sprintf("devlink dev eswitch set %s mode %s", e.Handle, e.Old)}, run: func(*runner) error {
						return kernel.DevlinkSetEswitch(bus, dev, e.Old)
					}})
				continue
			}
			t.add(Step{Section: "restore", Action: "change", Object: "devlink " + e.Handle, Why: e.Name + " was " + e.Old + " before apply",
				Commands: []string{fmt.Sprintf("devlink dev param set %s name %s value %s cmode runtime", e.Handle, e.Name, e.Old)}, run: func(*runner) error {
					return kernel.DevlinkSetParam(bus, dev, e.Name, e.Old)
				}})
		}
	}
	for _, pf := range pfs {
		n, _ := strconv.Atoi(firstCount[pf])
		if n == 0 {
			continue
		}
		pf := pf
		t.add(Step{Section: "restore", Action: "change", Object: "PF " + pf, Why: fmt.Sprintf("had %d VFs before apply", n),
			Commands: []string{fmt.Sprintf("echo %d > /sys/class/net/%s/device/sriov_numvfs", n, pf)}, run: func(*runner) error {
				return kernel.SRIOVSetNumVFs(pf, n)
			}})
	}
}

// restoreVFs puts back the MAC, VLAN, trust and spoof check that VFs had
// before apply changed them (es newest first: the oldest value wins). A VF
// that no longer exists when the step runs (the count went back below it)
// took its settings with it: nothing to restore.
func (t *tearer) restoreVFs(es []entry) {
	type key struct {
		pf string
		vf int
	}
	first := map[key]string{}
	var order []key
	for _, e := range es {
		k := key{e.Link, e.VF}
		if _, ok := first[k]; !ok {
			order = append(order, k)
		}
		first[k] = e.Old
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].pf != order[j].pf {
			return order[i].pf < order[j].pf
		}
		return order[i].vf < order[j].vf
	})
	for _, k := range order {
		set, args := parseVFOld(first[k])
		if len(args) == 0 {
			continue
		}
		pf, vf := k.pf, k.vf
		t.add(Step{Section: "restore", Action: "change", Object: fmt.Sprintf("VF %d of %s", vf, pf), Why: first[k] + " before apply",
			Commands: []string{fmt.Sprintf("ip link set %s vf %d %s", pf, vf, strings.Join(args, " "))}, run: func(*runner) error {
				if n, ok, err := kernel.SRIOVNumVFs(pf); err == nil && ok && vf >= n {
					return nil
				}
				return kernel.SRIOVSetVF(pf, vf, set)
			}})
	}
}

// parseVFOld reads a kindVF entry's Old ("mac=M vlan=V trust=on
// spoofchk=off", any subset) back into settings and ip arguments.
func parseVFOld(old string) (kernel.VFSettings, []string) {
	var set kernel.VFSettings
	var args []string
	for _, f := range strings.Fields(old) {
		name, v, _ := strings.Cut(f, "=")
		switch name {
		case "mac":
			m := v
			set.MAC = &m
			args = append(args, "mac "+v)
		case "vlan":
			n, err := strconv.Atoi(v)
			if err != nil {
				continue
			}
			set.VLAN = &n
			args = append(args, "vlan "+v)
		case "trust":
			b := v == "on"
			set.Trust = &b
			args = append(args, "trust "+v)
		case "spoofchk":
			b := v == "on"
			set.SpoofChk = &b
			args = append(args, "spoofchk "+v)
		}
	}
	return set, args
}

// Teardown runs a teardown plan; like Apply it stops at the first failure
// and keeps the journal of what is left.
func Teardown(plan *Plan, j *Journal, progress func(i int, s Step)) (int, error) {
	r := &runner{j: j, obtained: map[string]string{}}
	for i, s := range plan.Steps {
		if progress != nil {
			progress(i, s)
		}
		if err := s.run(r); err != nil {
			if j.path != "" && (len(j.Created)+len(j.Changed) > 0) {
				_ = j.save()
			}
			return i, &StepError{Index: i, Step: s, Err: err, Done: i}
		}
	}
	return len(plan.Steps), nil
}
