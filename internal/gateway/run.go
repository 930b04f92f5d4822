// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"sluice/internal/api"
	"sluice/internal/fastpath"
)

// Iface is one configured interface, by name.
type Iface struct {
	Name           string
	L2             fastpath.L2Mode
	Mode           fastpath.XDPMode
	InboundForward bool       // the config allows it only with wan-antispoof: upstream
	HairpinNextHop netip.Addr // optional
}

// Options configure Run.
type Options struct {
	PinDir   string
	Ifaces   []Iface
	Source   fastpath.Source
	Lease    time.Duration
	Counters bool
	Log      *slog.Logger
	// SourceName is shown by `show gateway` ("kernel" or "static").
	SourceName string
	// PIDFile, when set, gets this process's pid once the pin dir is
	// locked (for `gateway stop`), and is removed at exit.
	PIDFile string
	// APISocket, when set, serves the local API there (see internal/api).
	APISocket  string
	APIOptions api.SocketOptions
	// MetricsListen, when set, serves Prometheus metrics on this TCP address.
	MetricsListen string
	TopPolicies   int
	Build         api.Build
	// Hardware, when set, is the flower tier (internal/flower): it runs
	// beside XDP, fed by the same mirror, and removes its rules on exit.
	Hardware HardwareRunner
	// Ready, if set, is called once the program is attached and the first
	// sync has been tried (tests and `lab` wait on it).
	Ready func(*fastpath.Datapath, *fastpath.Mirror)
	// DeviceQuirks overrides, by interface name, what the driver-quirks
	// table (internal/driverquirk) says of an offload device's driver on
	// the running kernel (fastpath.DeviceQuirks; see deviceQuirks).
	DeviceQuirks map[string]fastpath.DeviceQuirks
	// StrictSACheck: every outbound forward asks the kernel whether it
	// still holds the SA (fastpath.SACheckKernel), not only the mirror.
	StrictSACheck bool
}

// Run attaches the fast path to the interfaces, mirrors the source
// into it until ctx ends, then closes the fast path (the kernel forwards
// everything) while leaving the program attached and pinned, so a restarted
// daemon picks up without a gap. `sluice gateway stop` detaches.
//
// Its phases, in order: claim the pin dir (a second daemon on it fails
// without touching anything), open what can fail before anything is loaded
// (interfaces, API socket, metrics address), load and attach, then serve.
// A failure after attaching undoes what this start attached and pinned.
func Run(ctx context.Context, o Options) (err error) {
	r := &run{o: o, log: o.Log}
	if r.log == nil {
		r.log = slog.Default()
	}
	defer r.undo()
	if err := r.claimPinDir(); err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	if err := r.loadAndAttach(); err != nil {
		return err
	}
	r.started = true
	return r.serve(ctx)
}

// run is one Run's state, shared by its phases; undo releases it.
type run struct {
	o       Options
	log     *slog.Logger
	started bool // attached: from here on nothing this start did is undone

	created bool                       // the pin dir was made by this start
	lock    atomic.Pointer[PinDirLock] // the pin watcher swaps in the lock of a re-created pin dir
	pidFile bool

	ifs      []fastpath.Iface
	apiL     *api.SocketListener
	metricsL net.Listener

	dp    *fastpath.Datapath
	fresh []string // interfaces this start attached: undone if it fails
}

// undo releases what the phases took, in reverse, and before the start
// succeeded also detaches what it attached and removes a pin dir it made.
func (r *run) undo() {
	if !r.started && r.dp != nil {
		for _, name := range r.fresh {
			if uerr := r.dp.Unattach(name); uerr != nil {
				r.log.Error("undoing the attach", "iface", name, "err", uerr)
			}
		}
		if len(r.fresh) > 0 {
			r.log.Info("start failed: detached what this start attached", "ifaces", r.fresh)
		}
	}
	if r.dp != nil {
		r.dp.Close()
	}
	if r.metricsL != nil {
		r.metricsL.Close()
	}
	if r.apiL != nil {
		r.apiL.Close()
	}
	if r.pidFile {
		removePIDFile(r.o.PIDFile)
	}
	if !r.started && r.created {
		fastpath.RemovePinnedMaps(r.o.PinDir) // links were undone above
		os.Remove(r.o.PinDir)
	}
	if l := r.lock.Load(); l != nil {
		l.Release()
	}
}

// claimPinDir checks the privileges, makes and locks the pin dir and
// writes the pid file.
func (r *run) claimPinDir() error {
	// First, so that a missing capability is named as such, not as the
	// first thing it makes fail (a mount, a lock, a map).
	if err := fastpath.CheckPrivileges(); err != nil {
		return err
	}
	created, err := preparePinDir(r.o.PinDir)
	if err != nil {
		return err
	}
	r.created = created
	first, err := LockPinDir(r.o.PinDir)
	if err != nil {
		return err
	}
	r.lock.Store(first)
	if r.o.PIDFile != "" {
		if err := writePIDFile(r.o.PIDFile); err != nil {
			r.log.Warn("no pid file; 'sluice gateway stop' finds this process by the pin dir's lock instead", "err", err)
		}
		r.pidFile = true
	}
	return nil
}

// resolve names the configured interfaces by index, as they are now.
func (r *run) resolve() ([]fastpath.Iface, error) { return ResolveIfaces(r.o.Ifaces) }

// open takes everything that can fail before anything is loaded or
// attached: the interfaces, the API socket, the metrics address.
func (r *run) open() (err error) {
	if r.ifs, err = r.resolve(); err != nil {
		return err
	}
	if r.o.APISocket != "" {
		if r.apiL, err = api.Listen(r.o.APISocket, r.o.APIOptions); err != nil {
			return fmt.Errorf("api-socket %s: %w", r.o.APISocket, err)
		}
	}
	if r.o.MetricsListen != "" {
		if r.metricsL, err = net.Listen("tcp", r.o.MetricsListen); err != nil {
			return fmt.Errorf("metrics-listen %s: %w (use host:port with an address of this host, e.g. 127.0.0.1:9469)", r.o.MetricsListen, err)
		}
	}
	return nil
}

// loadAndAttach loads the program over the pinned maps, sets what the
// gateway's configuration and drivers ask of it, and attaches it to each
// port.
func (r *run) loadAndAttach() (err error) {
	o, log := r.o, r.log
	if r.dp, err = fastpath.Load(fastpath.LoadOptions{PinPath: o.PinDir}); err != nil {
		return err
	}
	dp := r.dp
	// Whatever a previous daemon left is stale until we have synced.
	if err := dp.SetReady(false); err != nil {
		return err
	}
	if err := dp.SetCounters(o.Counters); err != nil {
		return err
	}
	// Kernel policies have use times strongSwan reads: keep them true.
	_, static := o.Source.(fastpath.StaticSource)
	if err := dp.SetUseTime(!static); err != nil {
		return err
	}
	strict := o.StrictSACheck
	if iface, driver := leakOnSAMiss(o.Ifaces); iface != "" && !static {
		strict = true
		log.Info("strict SA check on: this driver sends in cleartext what no SA serves (or cannot be read, so it may), so every forward asks the kernel for its SA (docs/fastpath.md, \"The SA-deletion window\")", "iface", iface, "driver", driver)
	}
	if err := setSACheck(dp, !static, strict, log); err != nil {
		return err
	}
	followFIBL4(dp, log)
	if err := dp.SetIfaces(r.ifs); err != nil {
		return err
	}
	for _, gi := range o.Ifaces {
		if err := r.attach(gi); err != nil {
			return err
		}
	}
	return nil
}

// attach attaches the program to gi (to its parent for a VLAN child: tagged
// frames arrive there) and notes it in fresh when this start attached it.
func (r *run) attach(gi Iface) error {
	li, err := link(gi.Name)
	if err != nil {
		return err
	}
	if li.ParentIfindex != 0 {
		return nil // tagged frames arrive on the parent, which carries the program
	}
	if gi.Mode == fastpath.XDPGeneric {
		r.log.Warn("XDP in GENERIC mode: it runs after the kernel built an skb, so it is barely faster than kernel forwarding; use a driver with native XDP for the fast path", "iface", gi.Name)
	}
	isNew, err := r.dp.Attach(r.o.PinDir, gi.Name, li.Ifindex, gi.Mode)
	if err != nil {
		return err
	}
	if isNew {
		r.fresh = append(r.fresh, gi.Name)
	}
	r.log.Info("attached", "iface", gi.Name, "ifindex", li.Ifindex, "xdp", gi.Mode.String(), "l2", gi.L2.String())
	if gi.InboundForward {
		r.log.Warn("inbound forwarding ON: packets arriving here that match an IN/FWD policy whose SA is packet-offloaded on this port are forwarded in XDP without the kernel's FWD policy check. XDP cannot tell NIC-decrypted packets from spoofed cleartext; this trusts that the upstream segment drops cleartext sourced from protected prefixes (wan-antispoof: upstream)", "iface", gi.Name)
	}
	return nil
}

// serve runs the mirror, the hardware tier, the API, the metrics and the
// watchers until ctx ends or one of them fails, then closes the fast path.
func (r *run) serve(ctx context.Context) (err error) {
	o, log, dp := r.o, r.log, r.dp
	quirks, err := deviceQuirks(o.Ifaces, o.DeviceQuirks, log)
	if err != nil {
		return err
	}
	m := &fastpath.Mirror{DP: dp, Src: o.Source, Lease: o.Lease, Log: log, Quirks: quirks}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	hwDone := r.runHardware(mctx, m, errc)
	rt := &gatewayRuntime{opts: o, dp: dp, mirror: m, started: time.Now()}
	rt.pins.OK = true
	if r.apiL != nil {
		go func() { errc <- api.Serve(mctx, r.apiL, api.Handler(rt)) }()
		go watchSocket(mctx, r.apiL, log)
		log.Info("API listening", "socket", o.APISocket)
	}
	if r.metricsL != nil {
		h := api.MetricsHandler(rt, o.TopPolicies, o.Build)
		go func() { errc <- api.ServeMetrics(mctx, r.metricsL, h) }()
		log.Info("metrics listening", "addr", r.metricsL.Addr().String())
		if api.AllInterfaces(o.MetricsListen) {
			log.Warn("metrics-listen binds every interface: anyone who reaches this host reads its policy and traffic counters; bind 127.0.0.1 or a management address (docs/api.md)", "addr", o.MetricsListen)
		}
	}
	go func() { errc <- m.Run(mctx) }()
	go refreshNextHops(mctx, dp, r.resolve, log)
	go func() { errc <- rt.watchPins(mctx, &r.lock, log) }()
	go rt.watchAttachments(mctx, r.resolve, log)
	if o.Ready != nil {
		o.Ready(dp, m)
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	dp.SetReady(false)
	<-hwDone // the flower tier removes its rules before the daemon exits
	log.Info("fast path closed: the kernel forwards everything until the next `sluice gateway run`; `sluice gateway stop` detaches")
	return err
}

// runHardware starts the flower tier, if any, fed by mirror m and the XDP
// per-policy counters; the channel closes when it has removed its rules.
func (r *run) runHardware(ctx context.Context, m *fastpath.Mirror, errc chan<- error) <-chan struct{} {
	done := make(chan struct{})
	hw := r.o.Hardware
	if hw == nil {
		close(done)
		return done
	}
	m.Tier = hw
	hw.UseCounters(func() (map[uint32]uint64, error) {
		cs, err := r.dp.PolicyCounts()
		out := make(map[uint32]uint64, len(cs))
		for _, c := range cs {
			out[c.Index] = c.Packets
		}
		return out, err
	})
	go func() {
		defer close(done)
		if err := hw.Run(ctx); err != nil {
			errc <- fmt.Errorf("flower tier: %w", err)
		}
	}()
	return done
}

// HardwareRunner is a hardware tier the daemon runs (internal/flower.Tier).
type HardwareRunner interface {
	fastpath.HardwareTier
	// Run works until ctx ends, then removes its rules and returns.
	Run(ctx context.Context) error
	FlowerStatus() api.FlowerStatus
	// UseCounters gives the tier the XDP per-policy packet counters, which
	// its placement reads (call before Run).
	UseCounters(func() (map[uint32]uint64, error))
}
