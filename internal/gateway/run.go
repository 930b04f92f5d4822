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
// It first locks the pin dir (a second daemon on it fails without touching
// anything), then checks everything that can fail (interfaces, API socket,
// metrics address) before it loads or attaches; a failure after attaching
// undoes what this start attached and pinned.
func Run(ctx context.Context, o Options) (err error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	// First, so that a missing capability is named as such, not as the
	// first thing it makes fail (a mount, a lock, a map).
	if err := fastpath.CheckPrivileges(); err != nil {
		return err
	}
	created, err := preparePinDir(o.PinDir)
	if err != nil {
		return err
	}
	first, err := LockPinDir(o.PinDir)
	if err != nil {
		return err
	}
	// The pin watcher swaps in the lock of a re-created pin dir.
	var lock atomic.Pointer[PinDirLock]
	lock.Store(first)
	defer func() { lock.Load().Release() }()
	started := false
	defer func() {
		if !started && created {
			fastpath.RemovePinnedMaps(o.PinDir) // links were undone below
			os.Remove(o.PinDir)
		}
	}()
	if o.PIDFile != "" {
		if err := writePIDFile(o.PIDFile); err != nil {
			log.Warn("no pid file; 'sluice gateway stop' finds this process by the pin dir's lock instead", "err", err)
		}
		defer removePIDFile(o.PIDFile)
	}

	// Everything that can fail, before anything is loaded or attached.
	resolve := func() ([]fastpath.Iface, error) { return ResolveIfaces(o.Ifaces) }
	ifs, err := resolve()
	if err != nil {
		return err
	}
	var apiL *api.SocketListener
	var metricsL net.Listener
	if o.APISocket != "" {
		if apiL, err = api.Listen(o.APISocket, o.APIOptions); err != nil {
			return fmt.Errorf("api-socket %s: %w", o.APISocket, err)
		}
		defer apiL.Close()
	}
	if o.MetricsListen != "" {
		if metricsL, err = net.Listen("tcp", o.MetricsListen); err != nil {
			return fmt.Errorf("metrics-listen %s: %w (use host:port with an address of this host, e.g. 127.0.0.1:9469)", o.MetricsListen, err)
		}
		defer metricsL.Close()
	}

	dp, err := fastpath.Load(fastpath.LoadOptions{PinPath: o.PinDir})
	if err != nil {
		return err
	}
	defer dp.Close()
	var fresh []string // interfaces this start attached: undone if it fails
	defer func() {
		if started {
			return
		}
		for _, name := range fresh {
			if uerr := dp.Unattach(name); uerr != nil {
				log.Error("undoing the attach", "iface", name, "err", uerr)
			}
		}
		if len(fresh) > 0 {
			log.Info("start failed: detached what this start attached", "ifaces", fresh)
		}
	}()
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
	if err := dp.SetIfaces(ifs); err != nil {
		return err
	}
	for _, gi := range o.Ifaces {
		li, err := link(gi.Name)
		if err != nil {
			return err
		}
		if li.ParentIfindex != 0 {
			continue // tagged frames arrive on the parent, which carries the program
		}
		if gi.Mode == fastpath.XDPGeneric {
			log.Warn("XDP in GENERIC mode: it runs after the kernel built an skb, so it is barely faster than kernel forwarding; use a driver with native XDP for the fast path", "iface", gi.Name)
		}
		isNew, err := dp.Attach(o.PinDir, gi.Name, li.Ifindex, gi.Mode)
		if err != nil {
			return err
		}
		if isNew {
			fresh = append(fresh, gi.Name)
		}
		log.Info("attached", "iface", gi.Name, "ifindex", li.Ifindex, "xdp", gi.Mode.String(), "l2", [...]string{"nic", "fib"}[gi.L2])
		if gi.InboundForward {
			log.Warn("inbound forwarding ON: packets arriving here that match an IN/FWD policy whose SA is packet-offloaded on this port are forwarded in XDP without the kernel's FWD policy check. XDP cannot tell NIC-decrypted packets from spoofed cleartext; this trusts that the upstream segment drops cleartext sourced from protected prefixes (wan-antispoof: upstream)", "iface", gi.Name)
		}
	}
	started = true

	quirks, err := deviceQuirks(o.Ifaces, o.DeviceQuirks, log)
	if err != nil {
		return err
	}
	m := &fastpath.Mirror{DP: dp, Src: o.Source, Lease: o.Lease, Log: log, Quirks: quirks}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	hwDone := make(chan struct{})
	if o.Hardware != nil {
		m.Tier = o.Hardware
		o.Hardware.UseCounters(func() (map[uint32]uint64, error) {
			cs, err := dp.PolicyCounts()
			out := make(map[uint32]uint64, len(cs))
			for _, c := range cs {
				out[c.Index] = c.Packets
			}
			return out, err
		})
		go func() {
			defer close(hwDone)
			if err := o.Hardware.Run(mctx); err != nil {
				errc <- fmt.Errorf("flower tier: %w", err)
			}
		}()
	} else {
		close(hwDone)
	}
	rt := &gatewayRuntime{opts: o, dp: dp, mirror: m, started: time.Now()}
	rt.pins.OK = true
	if apiL != nil {
		go func() { errc <- api.Serve(mctx, apiL, api.Handler(rt)) }()
		go watchSocket(mctx, apiL, log)
		log.Info("API listening", "socket", o.APISocket)
	}
	if metricsL != nil {
		h := api.MetricsHandler(rt, o.TopPolicies, o.Build)
		go func() { errc <- api.ServeMetrics(mctx, metricsL, h) }()
		log.Info("metrics listening", "addr", metricsL.Addr().String())
		if api.AllInterfaces(o.MetricsListen) {
			log.Warn("metrics-listen binds every interface: anyone who reaches this host reads its policy and traffic counters; bind 127.0.0.1 or a management address (docs/api.md)", "addr", o.MetricsListen)
		}
	}
	go func() { errc <- m.Run(mctx) }()
	go refreshNextHops(mctx, dp, resolve, log)
	go func() { errc <- rt.watchPins(mctx, &lock, log) }()
	go rt.watchAttachments(mctx, resolve, log)
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
