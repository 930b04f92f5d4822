// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"sluice/internal/fastpath"
)

// Forwarders.
const (
	FwdKernel      = "kernel"       // Linux IP forwarding
	FwdXDPRedirect = "xdp-redirect" // bpf/redirect.c: the XDP ceiling
	FwdSluice      = "sluice"       // sluice gateway run with static lab policies
)

// Forwarders lists the forwarders, in the order --help shows them.
var Forwarders = []string{FwdKernel, FwdXDPRedirect, FwdSluice}

func validForwarder(f string) bool { return slices.Contains(Forwarders, f) }

// ForwarderOptions are the xdp-redirect forwarder's knobs that make it a
// known bottleneck (the benchmark's own tests use them).
type ForwarderOptions struct {
	DropEvery uint32 `json:"drop_every,omitempty"` // drop every Nth frame
	RatePPS   uint64 `json:"rate_pps,omitempty"`   // forward at most this many frames/s
}

const redirPinPrefix = "redir_"

// SetForwarder replaces the forwarder in the lab's forwarding nodes. The
// kernel forwards in every case (ip_forward=1); the XDP forwarders take
// what they can in front of it.
func (l *Lab) SetForwarder(kind string, opts ForwarderOptions, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	if !validForwarder(kind) {
		return fmt.Errorf("--forwarder %q: use one of %s", kind, strings.Join(Forwarders, ", "))
	}
	if l.plan == nil {
		p, err := buildPlan(l.Spec)
		if err != nil {
			return err
		}
		l.plan = p
	}
	if kind == l.Forwarder && opts == l.ForwarderOpts && l.forwarderHealthy() {
		progress("forwarder " + kind + " already in place")
		return l.save()
	}
	if _, _, err := l.stopForwarder(); err != nil {
		return err
	}
	l.Forwarder, l.ForwarderOpts = FwdKernel, ForwarderOptions{}
	var err error
	switch kind {
	case FwdKernel:
	case FwdXDPRedirect:
		err = l.startRedirect(opts)
	case FwdSluice:
		err = l.startSluice(progress)
	}
	if err != nil {
		l.stopForwarder()
		l.save()
		return fmt.Errorf("forwarder %s: %w", kind, err)
	}
	l.Forwarder, l.ForwarderOpts = kind, opts
	if !l.plan.overlay { // the overlay's hosts forward nothing
		progress("forwarder: " + kind)
	}
	return l.save()
}

// CheckForwarder says what is wrong when the lab's forwarder is no longer
// in place (a gateway daemon died, a pin was removed).
func (l *Lab) CheckForwarder() error {
	if l.plan == nil {
		p, err := buildPlan(l.Spec)
		if err != nil {
			return err
		}
		l.plan = p
	}
	if !l.forwarderHealthy() {
		return fmt.Errorf("lab %s: forwarder %s is no longer in place (see %s): run 'sluice lab up %s --name %s --forwarder %s' again",
			l.Name, l.Forwarder, l.Dir(), l.Topology, l.Name, l.Forwarder)
	}
	return nil
}

// forwarderHealthy reports whether the recorded forwarder is still there.
func (l *Lab) forwarderHealthy() bool {
	switch l.Forwarder {
	case FwdXDPRedirect:
		for _, h := range l.plan.hops {
			if _, err := os.Stat(l.redirPin(h)); err != nil {
				return false
			}
		}
	case FwdSluice:
		for _, h := range l.plan.hops {
			if !daemonAlive(l.Daemons[h.Role], l.gatewayConfig(h.Role)) {
				return false
			}
		}
	}
	return true
}

func (l *Lab) redirPin(h hop) string {
	return filepath.Join(l.BPFFS(), redirPinPrefix+h.Role+"_"+h.In)
}

func (l *Lab) startRedirect(opts ForwarderOptions) error {
	for _, h := range l.plan.hops {
		if err := l.Do(h.Role, func() error { return l.attachRedirect(h, opts) }); err != nil {
			return fmt.Errorf("%s %s: %w", h.Role, h.In, err)
		}
	}
	return nil
}

// attachRedirect runs inside the hop's namespace: the devmap's ifindex and
// the XDP attach resolve there.
func (l *Lab) attachRedirect(h hop, opts ForwarderOptions) error {
	in, err := net.InterfaceByName(h.In)
	if err != nil {
		return err
	}
	out, err := net.InterfaceByName(h.Out)
	if err != nil {
		return err
	}
	next, err := net.ParseMAC(h.NextMAC)
	if err != nil {
		return err
	}
	var objs redirectObjects
	if err := loadRedirectObjects(&objs, nil); err != nil {
		return fmt.Errorf("loading bpf/redirect.c: %w", err)
	}
	defer objs.Close()
	var cfg redirectRedirConfig
	copy(cfg.DstMac[:], next)
	copy(cfg.SrcMac[:], out.HardwareAddr)
	cfg.DropEvery, cfg.RatePps = opts.DropEvery, opts.RatePPS
	// The generator sends in bursts of up to 2 ms of traffic: a bucket of
	// 5 ms does not turn bursts below the rate into loss.
	cfg.Burst = max(64, opts.RatePPS/200)
	if err := objs.RedirCfg.Put(uint32(0), cfg); err != nil {
		return err
	}
	if err := objs.RedirPort.Put(uint32(0), uint32(out.Index)); err != nil {
		return err
	}
	lk, err := link.AttachXDP(link.XDPOptions{Program: objs.XdpRedirectFwd, Interface: in.Index, Flags: link.XDPDriverMode})
	if err != nil {
		return fmt.Errorf("attaching XDP to %s: %w", h.In, err)
	}
	defer lk.Close()
	return lk.Pin(l.redirPin(h))
}

// RedirectCounts sums the xdp-redirect forwarder's counters over its hops:
// forwarded, passed, dropped-nth, dropped-rate, redirect-failed.
func (l *Lab) RedirectCounts() ([5]uint64, error) {
	var sum [5]uint64
	if l.Forwarder != FwdXDPRedirect {
		return sum, nil
	}
	for _, h := range l.plan.hops {
		lk, err := link.LoadPinnedLink(l.redirPin(h), nil)
		if err != nil {
			return sum, err
		}
		info, err := lk.Info()
		lk.Close()
		if err != nil {
			return sum, err
		}
		prog, err := ebpf.NewProgramFromID(info.Program)
		if err != nil {
			return sum, err
		}
		pinfo, err := prog.Info()
		prog.Close()
		if err != nil {
			return sum, err
		}
		ids, _ := pinfo.MapIDs()
		for _, id := range ids {
			m, err := ebpf.NewMapFromID(id)
			if err != nil {
				continue
			}
			mi, err := m.Info()
			if err == nil && mi.Name == "redir_counts" {
				for k := uint32(0); k < 5; k++ {
					var per []uint64
					if err := m.Lookup(k, &per); err == nil {
						for _, v := range per {
							sum[k] += v
						}
					}
				}
			}
			m.Close()
		}
	}
	return sum, nil
}

// stopForwarder removes whatever XDP forwarder is installed: the sluice
// daemons (by their recorded pid), their pins, the redirect links.
func (l *Lab) stopForwarder() (stopped []int, detached []string, err error) {
	var errs []error
	for role, pid := range l.Daemons {
		if daemonAlive(pid, l.gatewayConfig(role)) {
			p, _ := os.FindProcess(pid)
			p.Signal(syscall.SIGTERM)
			for i := 0; i < 50 && daemonAlive(pid, l.gatewayConfig(role)); i++ {
				time.Sleep(100 * time.Millisecond)
			}
			if daemonAlive(pid, l.gatewayConfig(role)) {
				p.Kill()
			}
			stopped = append(stopped, pid)
		}
		delete(l.Daemons, role)
	}
	entries, _ := os.ReadDir(l.BPFFS())
	for _, e := range entries {
		path := filepath.Join(l.BPFFS(), e.Name())
		switch {
		case strings.HasPrefix(e.Name(), redirPinPrefix):
			if err := os.Remove(path); err != nil {
				errs = append(errs, err)
			} else {
				detached = append(detached, strings.TrimPrefix(e.Name(), redirPinPrefix))
			}
		case strings.HasPrefix(e.Name(), "gw-"):
			// Our own daemons' pins (the daemons were stopped by pid
			// above): detach in-process, all 'sluice gateway stop'
			// would add.
			d, err := fastpath.Detach(path)
			for _, x := range d {
				detached = append(detached, e.Name()+"/"+x)
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return stopped, detached, errors.Join(errs...)
}

func (l *Lab) gatewayConfig(role string) string {
	return filepath.Join(l.Dir(), "gateway-"+role+".yaml")
}

func (l *Lab) gatewayPinDir(role string) string {
	return filepath.Join(l.BPFFS(), "gw-"+role)
}

// daemonAlive reports whether pid is a gateway daemon started with cfg.
func daemonAlive(pid int, cfg string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// a zombie ("Z") is gone for our purposes
		if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
			return false
		}
	}
	return bytes.Contains(b, []byte(cfg))
}

func (l *Lab) startSluice(progress func(string)) error {
	bin, err := l.sluiceBin()
	if err != nil {
		return err
	}
	if l.Daemons == nil {
		l.Daemons = map[string]int{}
	}
	exited := map[string]chan struct{}{}
	for _, h := range l.plan.hops {
		cfg := l.gatewayConfig(h.Role)
		if err := os.WriteFile(cfg, []byte(l.gatewayYAML(h)), 0o644); err != nil {
			return err
		}
		logf, err := os.Create(filepath.Join(l.Dir(), "gateway-"+h.Role+".log"))
		if err != nil {
			return err
		}
		cmd := exec.Command("ip", "netns", "exec", l.NS(h.Role), bin, "gateway", "run", "-f", cfg)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives 'lab up'
		err = cmd.Start()
		logf.Close()
		if err != nil {
			return err
		}
		l.Daemons[h.Role] = cmd.Process.Pid
		// Wait both reaps it and says, exactly, that it exited: its
		// /proc entry can read empty while 'ip netns exec' execs it.
		done := make(chan struct{})
		exited[h.Role] = done
		go func() { cmd.Wait(); close(done) }()
		if err := l.save(); err != nil {
			return err
		}
	}
	for _, h := range l.plan.hops {
		if err := l.waitGateway(bin, h, exited[h.Role]); err != nil {
			return err
		}
		progress(fmt.Sprintf("sluice gateway running in %s (pid %d, %d tunnels)", l.NS(h.Role), l.Daemons[h.Role], l.Tunnels))
	}
	return nil
}

// waitGateway waits until the hop's fast path forwards the lab's traffic.
func (l *Lab) waitGateway(bin string, h hop, exited <-chan struct{}) error {
	want := "forward-out"
	if h.Role == "gw1" {
		want = "forward-in"
	}
	probe := []string{"src", "16.0.0.1", "dst", TunnelSubnet(l.Tunnels).Addr().Next().String(), "proto", "udp", "sport", "1024", "dport", "4791"}
	if l.plan.model {
		probe = []string{"src", GenAddr.String(), "dst", ModelTarget.String(), "proto", "icmp", "type", "8"}
	}
	deadline := time.Now().Add(30 * time.Second)
	var last []byte
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(l.Dir(), "gateway-"+h.Role+".log"))
			return fmt.Errorf("the gateway in %s exited:\n%s", l.NS(h.Role), log)
		default:
		}
		last, _ = exec.Command("ip", append([]string{"netns", "exec", l.NS(h.Role), bin, "gateway", "explain", "--pin-dir", l.gatewayPinDir(h.Role),
			"--iface", h.In}, probe...)...).CombinedOutput()
		if bytes.Contains(last, []byte(want)) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the gateway in %s did not forward the lab's traffic within 30s; explain says:\n%s", l.NS(h.Role), last)
}

// gatewayYAML is the gateway.yaml of one hop: static lab policies, the
// BlueField-3 benchmark's tunnels, packet offload on the wire-side port, L2 from the FIB.
func (l *Lab) gatewayYAML(h hop) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by 'sluice lab up %s --forwarder sluice' for %s\n", l.Topology, l.NS(h.Role))
	if !l.plan.model {
		fmt.Fprintf(&b, "lab: true\npolicy-source: static\ncounters: false\n")
	}
	fmt.Fprintf(&b, "pin-dir: %s\n", l.gatewayPinDir(h.Role))
	// Its own API socket: two gateways (gw0, gw1) and other labs run at once.
	fmt.Fprintf(&b, "api-socket: %s\n", filepath.Join(l.Dir(), "api-"+h.Role+".sock"))
	if l.plan.model {
		// The kernel's own SAs and policies (lab up installed them,
		// packet-offloaded on the model port): the daemon mirrors them.
		fmt.Fprintf(&b, "interfaces:\n  - {name: %s, l2: fib}\n  - {name: %s, l2: fib, inbound: forward, wan-antispoof: upstream}\n", h.In, h.Out)
		return b.String()
	}
	b.WriteString("interfaces:\n")
	// The wire side is where the SAs are packet-offloaded: the egress of
	// gw0 and of the forwarder's dut, the ingress of gw1.
	wire := h.Out
	if h.Role == "gw1" {
		wire = h.In
	}
	for _, ifn := range []string{h.In, h.Out} {
		fmt.Fprintf(&b, "  - name: %s\n    l2: fib\n", ifn)
		if h.Role == "gw1" && ifn == wire {
			// The lab's wire carries nothing but gw0's traffic: assert
			// it, so inbound traffic is forwarded in XDP as on a
			// gateway whose upstream drops spoofed cleartext.
			b.WriteString("    inbound: forward\n    wan-antispoof: upstream\n")
		}
	}
	b.WriteString("policies:\n")
	local, lan := LocalTunnel.String(), ClientPrefix.String()
	for i := 1; i <= l.Tunnels; i++ {
		peer, remote := TunnelPeer(i).String(), TunnelSubnet(i).String()
		if h.Role == "gw1" {
			// gw1 is the BlueField-3 benchmark's IPSEC-GW-1: local_ts 48.x.y.0/24,
			// remote_ts 16.0.0.0/8, endpoints reversed.
			fmt.Fprintf(&b, "  - {dir: out, src: %s, dst: %s, priority: 100, peer: %s, local: %s, reqid: %d, offload: packet, offload-dev: %s}\n", remote, lan, local, peer, i, wire)
			fmt.Fprintf(&b, "  - {dir: in, src: %s, dst: %s, priority: 100, peer: %s, local: %s, reqid: %d, offload: packet, offload-dev: %s}\n", lan, remote, local, peer, i, wire)
			continue
		}
		fmt.Fprintf(&b, "  - {dir: out, src: %s, dst: %s, priority: 100, peer: %s, local: %s, reqid: %d, offload: packet, offload-dev: %s}\n", lan, remote, peer, local, i, wire)
		fmt.Fprintf(&b, "  - {dir: in, src: %s, dst: %s, priority: 100, peer: %s, local: %s, reqid: %d, offload: packet, offload-dev: %s}\n", remote, lan, peer, local, i, wire)
	}
	return b.String()
}
