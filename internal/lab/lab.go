// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sluice/internal/fileread"
)

// StateRoot holds one directory per lab.
const StateRoot = "/run/sluice/lab"

// Spec is what a lab is made of.
type Spec struct {
	Name      string `json:"name"`
	Topology  string `json:"topology"`
	Tunnels   int    `json:"tunnels"`
	Forwarder string `json:"forwarder"`
	// Opts are the xdp-redirect forwarder's knobs (Up only).
	Opts ForwarderOptions `json:"-"`
}

// Lab is a lab that is up.
type Lab struct {
	Spec
	// Namespaces by role (gen, dut or gw0/gw1, sink).
	Namespaces map[string]string `json:"namespaces"`
	Roles      []string          `json:"roles"`
	Created    time.Time         `json:"created"`
	// Daemons are the gateway processes of the sluice forwarder, by role.
	Daemons map[string]int `json:"daemons,omitempty"`
	// ForwarderOpts are the knobs of the xdp-redirect forwarder.
	ForwarderOpts ForwarderOptions `json:"forwarder_options"`
	// SluiceBin runs the gateway daemons (default: this executable).
	SluiceBin string `json:"-"`

	plan *plan
	// modelNew: build made the model pair, so its SAs go on now.
	modelNew bool
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,11}$`)

// Validate checks a Spec and fills defaults.
func (s *Spec) Validate() error {
	if s.Name == "" {
		s.Name = "lab"
	}
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("--name %q: use 1-12 lower-case letters, digits or '-' (it becomes part of namespace names)", s.Name)
	}
	if s.Tunnels == 0 {
		s.Tunnels = 1
	}
	if s.Tunnels < 1 || s.Tunnels > MaxTunnels {
		return fmt.Errorf("--tunnels %d: use 1 to %d", s.Tunnels, MaxTunnels)
	}
	if s.Forwarder == "" {
		s.Forwarder = FwdKernel
		if s.Topology == GatewayModel {
			s.Forwarder = FwdSluice
		}
	}
	if !validForwarder(s.Forwarder) {
		return fmt.Errorf("--forwarder %q: use one of %s", s.Forwarder, strings.Join(Forwarders, ", "))
	}
	if s.Topology == OverlayPair && s.Forwarder != FwdKernel {
		return fmt.Errorf("--forwarder %s: overlay-pair has no forwarder to replace (its hosts encapsulate and encrypt in the kernel); leave --forwarder out", s.Forwarder)
	}
	if s.Topology == GatewayModel {
		if s.Tunnels != 1 {
			return fmt.Errorf("--tunnels %d: gateway-model has one tunnel (10.0.0.0/8 <-> 48.0.0.0/8); leave --tunnels out", s.Tunnels)
		}
		if s.Forwarder == FwdXDPRedirect {
			return fmt.Errorf("--forwarder %s: gateway-model forwards with sluice (the default) or the kernel; the model encrypts in both", s.Forwarder)
		}
	}
	_, err := buildPlan(*s)
	return err
}

// Dir is the lab's state directory.
func (l *Lab) Dir() string { return filepath.Join(StateRoot, l.Name) }

// BPFFS is the lab's bpffs mount: pinned links and the gateways' pins live
// here, outside /sys, which 'ip netns exec' remounts.
func (l *Lab) BPFFS() string { return filepath.Join(l.Dir(), "bpf") }

// NS is the namespace of a role.
func (l *Lab) NS(role string) string { return l.Namespaces[role] }

func nsName(lab, role string) string { return "sl-" + lab + "-" + role }

// Up builds the lab, or checks and completes one that is already up with
// the same topology and tunnel count, then installs the forwarder. progress
// (may be nil) gets one line per step.
func Up(s Spec, progress func(string)) (*Lab, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	p, err := buildPlan(s)
	if err != nil {
		return nil, err
	}
	if p.overlay {
		if err := needOverlayKernel(); err != nil {
			return nil, err
		}
	}
	if p.model {
		if err := needModel(); err != nil {
			return nil, err
		}
	}
	l := &Lab{Spec: s, Namespaces: map[string]string{}, Roles: p.roles, Created: time.Now().UTC(), plan: p}
	l.Forwarder = "" // none installed yet
	if old, err := Load(s.Name); err == nil {
		if old.Topology != s.Topology || old.Tunnels != s.Tunnels {
			return nil, fmt.Errorf("lab %q is up as %s with %d tunnels: run 'sluice lab down %s' first, or pick another --name", s.Name, old.Topology, old.Tunnels, s.Name)
		}
		l.Created, l.Daemons, l.Forwarder, l.ForwarderOpts = old.Created, old.Daemons, old.Forwarder, old.ForwarderOpts
		l.plan = p
		progress("lab " + s.Name + " exists: checking it")
	}
	for _, r := range p.roles {
		l.Namespaces[r] = nsName(s.Name, r)
	}
	if err := os.MkdirAll(l.Dir(), 0o755); err != nil {
		return nil, err
	}
	if err := l.save(); err != nil { // Down can clean up from here on
		return nil, err
	}
	if err := l.build(progress); err != nil {
		return nil, fmt.Errorf("building lab %s: %w (run 'sluice lab down %s' to remove what was made)", s.Name, err, s.Name)
	}
	if l.modelNew {
		why, err := l.installModelSAs()
		if err != nil {
			return nil, fmt.Errorf("building lab %s: %w (run 'sluice lab down %s' to remove what was made)", s.Name, err, s.Name)
		}
		progress(fmt.Sprintf("tunnel: ESP AES-GCM-128 (random per-lab keys), %s's SAs and policies packet-offloaded on %s, %s's in software", l.NS("dut"), ModelPort, l.NS("peer")))
		if why != "" {
			progress("tunnel: " + why)
		}
	}
	if p.overlay {
		if err := l.applyOverlay(progress); err != nil {
			return nil, fmt.Errorf("building lab %s: %w (run 'sluice lab down %s' to remove what was made)", s.Name, err, s.Name)
		}
	}
	if err := l.SetForwarder(s.Forwarder, s.Opts, progress); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Lab) build(progress func(string)) error {
	p := l.plan
	for _, tool := range []string{"ip", "ethtool", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed: run 'make setup' (or apt-get install iproute2 ethtool procps)", tool)
		}
	}
	existing := map[string]bool{}
	for _, n := range listNetns() {
		existing[n] = true
	}
	for _, r := range p.roles {
		ns := l.NS(r)
		if !existing[ns] {
			if err := run("ip", "netns", "add", ns); err != nil {
				return err
			}
		}
		// Before the links exist, so they inherit the defaults: no IPv6
		// (no neighbour discovery noise), no reverse-path filter.
		args := []string{"netns", "exec", ns, "sysctl", "-qw",
			"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
			"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"}
		if slices.Contains(p.forward, r) {
			args = append(args, "net.ipv4.ip_forward=1")
		}
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	progress(fmt.Sprintf("namespaces: %s", strings.Join(l.nsList(), " ")))
	for _, seg := range p.segments {
		a, b := seg.A, seg.B
		if linkExists(l.NS(a.Role), a.If) {
			continue
		}
		// One queue per CPU: a veth hands XDP frames to the peer queue of
		// the sending CPU, so each CPU forwards and counts its own share.
		q := strconv.Itoa(Queues())
		if err := run("ip", "-n", l.NS(a.Role), "link", "add", a.If, "address", a.MAC, "numtxqueues", q, "numrxqueues", q, "type", "veth",
			"peer", "name", b.If, "address", b.MAC, "numtxqueues", q, "numrxqueues", q, "netns", l.NS(b.Role)); err != nil {
			return err
		}
	}
	if p.model {
		var err error
		if l.modelNew, err = l.makeModelPair(); err != nil {
			return fmt.Errorf("the NIC model pair: %w", err)
		}
	}
	// The generator's parking port: a veth pair that stays down, on which
	// the generator attaches its program so that the program stays in the
	// kernel's XDP dispatcher. Otherwise every BPF_PROG_RUN adds and
	// removes it there, and waits an RCU grace period each time (~25 ms).
	if !linkExists(l.NS(p.genRole), ParkIf) {
		if err := run("ip", "-n", l.NS(p.genRole), "link", "add", ParkIf, "type", "veth", "peer", "name", ParkIf+"p"); err != nil {
			return err
		}
	}
	// A veth takes XDP frames from its peer only in NAPI mode: GRO on
	// (or an XDP program attached).
	features := []string{"gro", "on"}
	if len(p.hops) > 0 {
		// Where a forwarder may run, every port sends complete frames,
		// as a wire does: checksum offload off. With it on, a veth
		// passes TCP and UDP with the checksum still to fill
		// (CHECKSUM_PARTIAL; TSO too), and a frame XDP redirects loses
		// what was left to fill: the receiver dropped every TCP
		// segment (iperf3 moved 0 bytes, ping worked). Not only the
		// hosts' own: what the kernel forwards (GRO merges it, the
		// egress veth, whose peer has XDP and so no GSO, segments it
		// again) left gw0 that way for gw1's XDP. Forwarded 64-byte
		// UDP and the XDP generator's frames, complete already, are
		// unaffected.
		features = append(features, "tx", "off")
	}
	for _, seg := range p.segments {
		for _, e := range []endpoint{seg.A, seg.B} {
			if err := run("ip", append([]string{"netns", "exec", l.NS(e.Role), "ethtool", "-K", e.If}, features...)...); err != nil {
				return err
			}
		}
	}
	for _, r := range p.roles {
		if err := ipBatch(l.NS(r), p.batch[r]); err != nil {
			return fmt.Errorf("configuring %s: %w", r, err)
		}
	}
	progress(fmt.Sprintf("links, addresses, routes and neighbours configured (%d tunnels)", l.Tunnels))
	if !isBPFFS(l.BPFFS()) {
		if err := os.MkdirAll(l.BPFFS(), 0o700); err != nil {
			return err
		}
		if err := unix.Mount("bpf", l.BPFFS(), "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mounting bpffs at %s: %w", l.BPFFS(), err)
		}
	}
	return l.save()
}

func (l *Lab) nsList() []string {
	var out []string
	for _, r := range l.Roles {
		out = append(out, l.NS(r))
	}
	return out
}

func (l *Lab) save() error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(l.Dir(), "lab.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(l.Dir(), "lab.json"))
}

// ErrNoLab is returned by Load for a lab that is not up.
var ErrNoLab = errors.New("no such lab")

// Load reads a lab that is up.
func Load(name string) (*Lab, error) {
	b, err := fileread.Read(filepath.Join(StateRoot, name, "lab.json"), fileread.StateLimit)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("lab %q: %w (start it with 'sluice lab up TOPOLOGY --name %s')", name, ErrNoLab, name)
	}
	if err != nil {
		return nil, err
	}
	return parseLab(b, name, filepath.Join(StateRoot, name, "lab.json"))
}

// errBadLabFile marks a lab.json that does not describe lab name: Down
// still removes such a lab, by its name.
var errBadLabFile = errors.New("not a lab sluice wrote (remove it with 'sluice lab down')")

// parseLab reads lab.json of lab name. The spec must pass Validate (a
// tunnel count past MaxTunnels made buildPlan run for minutes), and the
// name, roles and namespaces must be the ones Up writes: Down and the
// forwarders act on those namespaces. Found by FuzzParseLab.
func parseLab(b []byte, name, path string) (*Lab, error) {
	l := &Lab{}
	if err := json.Unmarshal(b, l); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, err, errBadLabFile)
	}
	spec := l.Spec // Validate fills defaults; the file keeps what is installed
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, err, errBadLabFile)
	}
	if l.Name != name {
		return nil, fmt.Errorf("%s: names lab %q: %w", path, l.Name, errBadLabFile)
	}
	var err error
	if l.plan, err = buildPlan(l.Spec); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, err, errBadLabFile)
	}
	if !slices.Equal(l.Roles, l.plan.roles) || len(l.Namespaces) != len(l.Roles) {
		return nil, fmt.Errorf("%s: roles %q, namespaces %q for a %s lab: %w", path, l.Roles, l.Namespaces, l.Topology, errBadLabFile)
	}
	for _, r := range l.Roles {
		if l.Namespaces[r] != nsName(name, r) {
			return nil, fmt.Errorf("%s: namespace %q for %s: %w", path, l.Namespaces[r], r, errBadLabFile)
		}
	}
	return l, nil
}

// DownResult says what Down removed.
type DownResult struct {
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces_removed"`
	Daemons    []int    `json:"daemons_stopped"`
	Detached   []string `json:"links_detached"`
}

// Down removes everything of lab name, whatever state it is in: gateway
// daemons, pinned links, namespaces (and with them their veths), the bpffs
// mount and the state directory. A lab that does not exist is not an error.
func Down(name string) (*DownResult, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("lab name %q: use 1-12 lower-case letters, digits or '-'", name)
	}
	res := &DownResult{Name: name}
	l, err := Load(name)
	if err != nil && !errors.Is(err, ErrNoLab) && !errors.Is(err, errBadLabFile) {
		return nil, err
	}
	if l == nil {
		l = &Lab{Spec: Spec{Name: name}}
	}
	var errs []error
	stopped, detached, err := l.stopForwarder()
	res.Daemons, res.Detached = stopped, detached
	errs = append(errs, err)
	prefix := nsName(name, "")
	for _, ns := range listNetns() {
		if strings.HasPrefix(ns, prefix) {
			if err := run("ip", "netns", "del", ns); err != nil {
				errs = append(errs, err)
				continue
			}
			res.Namespaces = append(res.Namespaces, ns)
		}
	}
	if isBPFFS(l.BPFFS()) && isMountPoint(l.BPFFS()) {
		if err := unix.Unmount(l.BPFFS(), 0); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", l.BPFFS(), err))
		}
	}
	if err := os.RemoveAll(l.Dir()); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// Status is one lab as 'lab status' shows it.
type Status struct {
	Spec
	Created    time.Time         `json:"created"`
	Namespaces map[string]string `json:"namespaces"`
	Missing    []string          `json:"missing_namespaces,omitempty"`
	Daemons    map[string]int    `json:"daemons,omitempty"`
	DeadDaemon []string          `json:"dead_daemons,omitempty"`
	Healthy    bool              `json:"healthy"`
	// Model are the NIC model ports' counters (gateway-model).
	Model []PortCounters `json:"model_ports,omitempty"`
}

// List returns the status of every lab, sorted by name. Namespaces named
// like a lab's without its state are reported as a lab with no topology.
func List() ([]Status, error) {
	entries, err := os.ReadDir(StateRoot)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	have := map[string]bool{}
	for _, n := range listNetns() {
		have[n] = true
	}
	var out []Status
	seen := map[string]bool{}
	for _, e := range entries {
		l, err := Load(e.Name())
		if err != nil {
			continue
		}
		seen[l.Name] = true
		st := Status{Spec: l.Spec, Created: l.Created, Namespaces: l.Namespaces, Daemons: l.Daemons, Healthy: true}
		for _, r := range l.Roles {
			if !have[l.NS(r)] {
				st.Missing = append(st.Missing, l.NS(r))
				st.Healthy = false
			}
		}
		for role, pid := range l.Daemons {
			if !daemonAlive(pid, l.gatewayConfig(role)) {
				st.DeadDaemon = append(st.DeadDaemon, role)
				st.Healthy = false
			}
		}
		sort.Strings(st.DeadDaemon)
		if st.Healthy {
			st.Model = l.ModelCounters()
		}
		out = append(out, st)
	}
	orphans := map[string]map[string]string{}
	for n := range have {
		if !strings.HasPrefix(n, "sl-") {
			continue
		}
		rest := strings.TrimPrefix(n, "sl-")
		i := strings.LastIndex(rest, "-")
		if i < 0 || seen[rest[:i]] {
			continue
		}
		if orphans[rest[:i]] == nil {
			orphans[rest[:i]] = map[string]string{}
		}
		orphans[rest[:i]][rest[i+1:]] = n
	}
	for name, nss := range orphans {
		out = append(out, Status{Spec: Spec{Name: name}, Namespaces: nss})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Do runs fn on a locked OS thread inside the namespace of role: ifindexes
// fn uses (XDP attach, devmap values, BPF_PROG_RUN's ingress_ifindex) are
// resolved there.
func (l *Lab) Do(role string, fn func() error) error {
	return DoIn(l.NS(role), fn)
}

// DoIn runs fn on a locked OS thread inside the named namespace.
func DoIn(ns string, fn func() error) error {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	defer h.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering %s: %w", ns, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: the runtime discards it when this
		// goroutine ends, so no other goroutine runs in ns by mistake.
		return errors.Join(ferr, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

func listNetns() []string {
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func linkExists(ns, dev string) bool {
	return exec.Command("ip", "-n", ns, "link", "show", "dev", dev).Run() == nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if errors.Is(err, exec.ErrNotFound) {
		return fmt.Errorf("%s is not installed: run 'make setup' (or apt-get install iproute2 ethtool procps)", name)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func ipBatch(ns string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip -n %s -batch: %v: %s", ns, err, strings.TrimSpace(out.String()))
	}
	return nil
}

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

func isMountPoint(path string) bool {
	var a, b unix.Stat_t
	if unix.Stat(path, &a) != nil || unix.Stat(filepath.Dir(path), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// Queues is the number of queues of the lab's veths: one per CPU, at most 8.
func Queues() int { return max(1, min(runtime.NumCPU(), 8)) }

// ParkIf is the generator namespace's parking port (a veth left down).
const ParkIf = "park0"

// Ends is what traffic needs from a lab: where the generator sends from and
// to which first-hop MAC, and where the sink counts.
type Ends struct {
	GenNS, GenIf   string
	GenMAC         string
	FirstHopMAC    string
	SinkNS, SinkIf string
	// Forwarding are the namespaces whose forwarder is measured.
	Forwarding []string
	// Tunnels is the number of remote subnets (TunnelSubnet(1..Tunnels)).
	Tunnels int
	// Target is the sink side's address for iperf3 and ping (11.0.0.1;
	// on overlay-pair h1's overlay address of tunnel 1).
	Target netip.Addr
}

// Ends returns the lab's traffic ends.
func (l *Lab) Ends() Ends {
	p := l.plan
	e := Ends{GenNS: l.NS(p.genRole), GenIf: p.genIf, SinkNS: l.NS(p.sinkRole), SinkIf: p.sinkIf, Tunnels: l.Tunnels, Target: p.target}
	for _, seg := range p.segments {
		if seg.A.Role == p.genRole && seg.A.If == p.genIf {
			e.GenMAC, e.FirstHopMAC = seg.A.MAC, seg.B.MAC
		}
	}
	for _, r := range p.forward {
		e.Forwarding = append(e.Forwarding, l.NS(r))
	}
	return e
}
