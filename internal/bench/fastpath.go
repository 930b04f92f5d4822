// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"

	"golang.org/x/sys/unix"

	"sluice/internal/fastpath"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// FastpathResult is one measurement of `sluice bench fastpath`.
type FastpathResult struct {
	// Program is "sluice", or "peer" for the program --peer names
	// (fastSwan's; its Reason is empty: it has no reasons); with Stages,
	// a stage probe's program (stage_entry ... stage_cached, see
	// StageStep) or "xdp_fastpath", the live program measured beside them.
	Program  string `json:"program"`
	Tunnels  int    `json:"tunnels"`  // each: one OUT, one IN and one FWD policy, like strongSwan
	Policies int    `json:"policies"` // total XFRM policies mirrored
	Case     string `json:"case"`     // see fastpathCases

	NsPerPacket float64 `json:"ns_per_packet"`
	Runs        int     `json:"runs"` // BPF_PROG_RUN runs measured: --repeat, at most 25,000 for a forward
	Action      string  `json:"action"`
	Reason      string  `json:"reason"` // counted by the live program
	// Explained is the full decision's reason (sluice gateway explain);
	// the live program passes what cannot be forwarded before it, with
	// reason not-forwardable.
	Explained string `json:"explained"`
}

// tunnelSnapshot builds n strongSwan-style tunnels: 16.0.0.0/8 <-> 48.x.y.0/24,
// each SA packet-offloaded on wan.
// gcm128 is the SAs' transform, as strongSwan's esp=aes128gcm16 makes it.
var gcm128 = xfrm.StateAlg{AEAD: "rfc4106(gcm(aes))", ICVBits: 128}

func tunnelSnapshot(n, wan int) fastpath.Snapshot {
	s := fastpath.Snapshot{RouteMTU: map[fastpath.Endpoints]int{}}
	local := netip.MustParseAddr("123.0.0.1")
	lan := netip.MustParsePrefix("16.0.0.0/8")
	for i := 0; i < n; i++ {
		remote := netip.PrefixFrom(netip.AddrFrom4([4]byte{48, byte(i >> 8), byte(i), 0}), 24)
		peer := netip.AddrFrom4([4]byte{123, 2, byte(i >> 8), byte(i)})
		reqid := uint32(i + 1)
		out := &xfrm.Offload{Ifindex: wan, Flags: xfrm.OffloadPacket}
		in := &xfrm.Offload{Ifindex: wan, Flags: xfrm.OffloadPacket | xfrm.OffloadInbound}
		base := uint32(i+1) << 3
		s.Policies = append(s.Policies,
			xfrm.Policy{Index: base | 1, Dir: xfrm.DirOut, Priority: 1000, Sel: xfrm.Selector{Src: lan, Dst: remote},
				Tmpls: []xfrm.Tmpl{{Src: local, Dst: peer, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid}}, Offload: out},
			xfrm.Policy{Index: base, Dir: xfrm.DirIn, Priority: 1000, Sel: xfrm.Selector{Src: remote, Dst: lan},
				Tmpls: []xfrm.Tmpl{{Src: peer, Dst: local, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid}}, Offload: in},
			xfrm.Policy{Index: base | 2, Dir: xfrm.DirFwd, Priority: 1000, Sel: xfrm.Selector{Src: remote, Dst: lan},
				Tmpls: []xfrm.Tmpl{{Src: peer, Dst: local, Proto: xfrm.ProtoESP, Mode: xfrm.ModeTunnel, Reqid: reqid}}})
		s.States = append(s.States,
			xfrm.State{Src: local, Dst: peer, Proto: xfrm.ProtoESP, SPI: 0x10000 + reqid, Reqid: reqid, Mode: xfrm.ModeTunnel, Offload: out, Alg: gcm128},
			xfrm.State{Src: peer, Dst: local, Proto: xfrm.ProtoESP, SPI: 0x20000 + reqid, Reqid: reqid, Mode: xfrm.ModeTunnel, Offload: in, Alg: gcm128})
		// a 1500-byte route under each SA: its MTU is 1446, above every packet here
		s.RouteMTU[fastpath.Endpoints{Src: local, Dst: peer}] = 1500
	}
	return s
}

// Fastpath measures the program's cost per packet for each tunnel count.
// It needs root: it loads the program and builds a scratch namespace whose
// routes make the FIB lookups succeed, as on a gateway.
func Fastpath(tunnels []int, repeat int, o FastpathOptions) ([]FastpathResult, error) {
	sg, err := kernel.NewScratchGateway()
	if err != nil {
		return nil, err
	}
	defer sg.Close()
	var results []FastpathResult
	err = sg.Do(func() error {
		dp, err := fastpath.Load(fastpath.LoadOptions{})
		if err != nil {
			return err
		}
		defer dp.Close()
		if err := dp.SetCounters(o.Counters); err != nil {
			return err
		}
		// BPF_PROG_RUN delivers on loopback: treat it as the LAN port.
		if err := dp.SetIfaces([]fastpath.Iface{{Ifindex: 1, L2: fastpath.L2NIC}, {Ifindex: sg.WANIndex, L2: fastpath.L2NIC}}); err != nil {
			return err
		}
		// The scratch namespace has the default rules and single-path
		// routes: FIB answers may be reused per destination, as the
		// daemon allows them on such a gateway.
		fibDst, _ := kernel.FIBByDestination()
		for _, n := range tunnels {
			snap := tunnelSnapshot(n, sg.WANIndex)
			tables, err := fastpath.Compile(snap)
			if err != nil {
				return err
			}
			if err := dp.Apply(tables); err != nil {
				return err
			}
			last := n - 1
			remote := fmt.Sprintf("48.%d.%d.9", last>>8&0xff, last&0xff)
			if err := holdLastSA(snap, o.Cases); err != nil {
				return err
			}
			for _, c := range fastpathCases(remote) {
				if len(o.Cases) > 0 && !slices.Contains(o.Cases, c.name) {
					continue
				}
				frame, err := c.pkt.Marshal()
				if err != nil {
					return err
				}
				if err := dp.SetFlowCacheOff(!c.cached); err != nil {
					return err
				}
				if _, err := dp.SetFIBDstOnly(fibDst && !c.newDst); err != nil {
					return err
				}
				if err := dp.SetSACheck(c.saCheck); err != nil {
					return err
				}
				d, err := dp.Explain(frame, 0)
				if err != nil {
					return err
				}
				if d.ReasonName != c.explained {
					return fmt.Errorf("%d tunnels, %s: the full decision is %s, not %s", n, c.name, d.ReasonName, c.explained)
				}
				live := d.Reason
				if c.quickPass && (!o.Counters || !c.policyCovers) {
					live = fastpath.ReasonNotForwardable
				}
				per, runs, err := benchmarkCase(dp, frame, repeat, live, c.cached)
				if err != nil {
					return fmt.Errorf("%d tunnels, %s: %w", n, c.name, err)
				}
				results = append(results, FastpathResult{Program: "sluice", Tunnels: n, Policies: len(snap.Policies), Case: c.name,
					NsPerPacket: per, Runs: runs, Action: d.ActionName, Reason: live.String(), Explained: d.ReasonName})
				if stagesWanted(o, c.name) {
					st, err := measureStages(dp, frame, repeat)
					if err != nil {
						return fmt.Errorf("%d tunnels: %w", n, err)
					}
					for i := range st {
						st[i].Tunnels, st[i].Policies = n, len(snap.Policies)
					}
					results = append(results, st...)
				}
			}
			if err := dp.SetFlowCacheOff(false); err != nil {
				return err
			}
			if o.Peer != "" {
				res, err := measurePeer(o, snap, n, remote, repeat, sg.WANIndex)
				if err != nil {
					return err
				}
				results = append(results, res...)
			}
		}
		return nil
	})
	return results, err
}

// fastpathCase is one packet `bench fastpath` measures. cached: the flow
// cache is on (a forward is then replayed from it after the first run);
// otherwise it is off on every CPU, so every run pays the full decision,
// as the first packet of a flow does.
type fastpathCase struct {
	name      string
	pkt       fastpath.Packet
	cached    bool
	explained string // the full decision's reason
	quickPass bool   // the live program passes it before the full decision (not-forwardable)
	// policyCovers: a policy's destination covers it, so with counters
	// on it takes the full decision (to be counted) even if quickPass
	policyCovers bool
	// newDst: every run is a first packet to a destination the FIB result
	// cache has not seen (it is off), so every run asks the FIB
	newDst bool
	// saCheck: how each forward checks that its SA still exists (the
	// SA-deletion window; the daemon's default is SACheckMirror)
	saCheck fastpath.SACheck
}

// FastpathOptions are `bench fastpath`'s choices besides the tunnel counts.
type FastpathOptions struct {
	Cases    []string // the cases to measure (FastpathCases); none: all
	Counters bool     // per-policy counters on, as a gateway has them by default
	// Peer: an XDP object built from fastSwan's xfrm_offload.c, measured
	// after sluice at each tunnel count on the same policies and frames.
	Peer string
	// Stages: after outbound-match, the cached forward in prefixes (the
	// stage probe, bpf/stage_probe.c) beside the live program, interleaved:
	// what each step of a cache hit costs.
	Stages bool
}

// measurePeer loads the peer with the tunnels' policies and measures it on
// every case's frame (it has no flow cache: its first packet is every
// packet).
func measurePeer(o FastpathOptions, snap fastpath.Snapshot, n int, remote string, repeat, wan int) ([]FastpathResult, error) {
	pr, err := loadPeer(o.Peer, snap, []int{1, wan})
	if errors.Is(err, unix.ENOSPC) {
		// fastSwan's dst_lpm holds XFRM_DST_MAX (65,536) destinations:
		// 65,536 tunnels' remote subnets plus the local one do not fit.
		fmt.Fprintf(os.Stderr, "sluice bench fastpath: the peer cannot hold %d tunnels (%v); not measured at this count\n", n, err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	var out []FastpathResult
	for _, c := range fastpathCases(remote) {
		if len(o.Cases) > 0 && !slices.Contains(o.Cases, c.name) {
			continue
		}
		frame, err := c.pkt.Marshal()
		if err != nil {
			return nil, err
		}
		act, per, runs, err := pr.measure(frame, repeat)
		if err != nil {
			return nil, fmt.Errorf("%d tunnels, %s: %w", n, c.name, err)
		}
		out = append(out, FastpathResult{Program: "peer", Tunnels: n, Policies: len(snap.Policies), Case: c.name,
			NsPerPacket: per, Runs: runs, Action: fastpath.ActionName(act)})
	}
	return out, nil
}

// fastpathCases are the measured packets; remote is an address inside the
// last tunnel's remote subnet.
func fastpathCases(remote string) []fastpathCase {
	esp := udp("123.2.0.1", "123.0.0.1") // from a tunnel peer to the gateway
	esp.Proto, esp.Payload = 50, 64
	return []fastpathCase{
		// the cached forward: 25,000 runs, all hits after the first
		{"outbound-match", udp("16.0.0.1", remote), true, "forward-out", false, true, false, fastpath.SACheckOff},
		// the same with the SA check the daemon runs: the mirror's name
		// of the tunnel's SA must still be there (the SA-deletion window)
		{"outbound-match-sa-mirror", udp("16.0.0.1", remote), true, "forward-out", false, true, false, fastpath.SACheckMirror},
		// ... and the kernel must hold the SA: a kfunc call each forward
		{"outbound-match-sa-kernel", udp("16.0.0.1", remote), true, "forward-out", false, true, false, fastpath.SACheckKernel},
		// the same packet with the cache off: the full decision every run
		// (the FIB's answer from fib_cache: a destination seen before)
		{"first-packet", udp("16.0.0.1", remote), false, "forward-out", false, true, false, fastpath.SACheckOff},
		// ... to a destination not seen before: the FIB asked every run
		{"first-packet-new-dst", udp("16.0.0.1", remote), false, "forward-out", false, true, true, fastpath.SACheckOff},
		// decrypted traffic from the tunnel (IN match): passed by default
		{"inbound-match", udp(remote, "16.0.0.1"), true, "inbound", true, true, false, fastpath.SACheckOff},
		// ESP itself on the ESP side, to the gateway: passed
		{"esp", esp, true, "esp-ah", false, false, false, fastpath.SACheckOff},
		// cleartext no policy covers: passed
		{"no-match", udp("16.0.0.1", "49.0.0.1"), true, "no-policy", true, false, false, fastpath.SACheckOff},
	}
}

// holdLastSA makes the scratch namespace's kernel hold the last tunnel's
// outbound SA (the measured packets use that tunnel) when a case checks
// it. The host kernel may have no ESP type, so the SPI is reserved with
// XFRM_MSG_ALLOCSPI: a larval state in the same SPI table, which
// bpf_xdp_get_xfrm_state finds at the same cost (a hash walk and a
// reference) as a full SA. Larval states expire (net.core.xfrm_acq_expires,
// 30 s by default): raised for the run. Runs in the namespace (sg.Do).
func holdLastSA(snap fastpath.Snapshot, cases []string) error {
	if len(cases) > 0 && !slices.Contains(cases, "outbound-match-sa-kernel") {
		return nil
	}
	var st *xfrm.State
	for i := range snap.States {
		if s := &snap.States[i]; s.Offload != nil && !s.Offload.Inbound() {
			st = s // the last outbound SA
		}
	}
	if st == nil {
		return errors.New("bench: no outbound SA to hold")
	}
	if err := os.WriteFile("/proc/sys/net/core/xfrm_acq_expires", []byte("86400"), 0); err != nil {
		return fmt.Errorf("bench: raising net.core.xfrm_acq_expires for the held SA: %w", err)
	}
	spi := fmt.Sprintf("0x%x", st.SPI)
	out, err := exec.Command("ip", "xfrm", "state", "allocspi", "src", st.Src.String(), "dst", st.Dst.String(),
		"proto", "esp", "mode", "tunnel", "min", spi, "max", spi).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: reserving SPI %s for the SA check: %v: %s", spi, err, out)
	}
	return nil
}

// FastpathCases names the cases `bench fastpath` measures, in order.
func FastpathCases() []string {
	var out []string
	for _, c := range fastpathCases("48.0.0.9") {
		out = append(out, c.name)
	}
	return out
}

// benchmarkCase is benchmarkVerdict, and for a case without the cache
// also checks through the cache's counters that no run was a hit or a
// fill: every run took the full decision.
func benchmarkCase(dp *fastpath.Datapath, frame []byte, repeat int, want fastpath.Reason, cached bool) (float64, int, error) {
	before, err := dp.CacheStats()
	if err != nil {
		return 0, 0, err
	}
	per, runs, err := benchmarkVerdict(dp, frame, repeat, want)
	if err != nil || cached {
		return per, runs, err
	}
	after, err := dp.CacheStats()
	if err != nil {
		return 0, 0, err
	}
	if hits, fills := after.Hits-before.Hits, after.Fills-before.Fills; hits+fills > 0 {
		return 0, 0, fmt.Errorf("%d runs were flow-cache hits and %d filled it: the cache was not off", hits, fills)
	}
	if want.Forwarded() && after.Bypassed-before.Bypassed < uint64(runs) {
		return 0, 0, fmt.Errorf("%d of %d runs went around the cache", after.Bypassed-before.Bypassed, runs)
	}
	return per, runs, nil
}

// ttlBatch runs of a TTL-255 frame stay forwards: BPF_PROG_RUN runs the
// program repeat times on the same buffer, and a forward decrements the
// TTL in place, so one long run would measure TTL-expired packets after
// the first few hundred.
var ttlBatch = 250 // a variable only so a test can show what a longer batch measures

// maxForwardBatches bounds the batches of a forwarding case: every
// BPF_PROG_RUN call with more than one repetition swaps the program into
// the XDP dispatcher and back, two RCU grace periods (~10-20 ms here), so a
// forward is measured over at most 100 x 250 runs.
const maxForwardBatches = 100

// benchmarkVerdict measures the live program on frame, repeat runs in
// batches of ttlBatch, and checks through the reason counters (loopback is
// the only ingress) that every run ended with reason want: a benchmark of
// some other path than the one named is an error, not a number. (Runs, not
// repeat: a run the kernel cut short with EINTR is retried, and counted.)
func benchmarkVerdict(dp *fastpath.Datapath, frame []byte, repeat int, want fastpath.Reason) (nsPerRun float64, runs int, err error) {
	counts := func() (map[fastpath.Reason]uint64, error) {
		rc, err := dp.ReasonCounts()
		return rc[1], err
	}
	before, err := counts()
	if err != nil {
		return 0, 0, err
	}
	repeat = max(repeat, 1)
	batch := repeat // a passed packet is left as it was: one call
	if want.Forwarded() {
		repeat = min(repeat, maxForwardBatches*ttlBatch)
		batch = ttlBatch
	}
	var total float64
	for done := 0; done < repeat; {
		n := min(batch, repeat-done)
		_, per, err := dp.Benchmark(frame, n)
		if err != nil {
			return 0, 0, err
		}
		total += float64(per.Nanoseconds()) * float64(n)
		done += n
	}
	after, err := counts()
	if err != nil {
		return 0, 0, err
	}
	for r, n := range after {
		if d := n - before[r]; r != want && d > 0 {
			return 0, 0, fmt.Errorf("%d of the runs ended as %s, not %s: the benchmark measured another path", d, r, want)
		}
	}
	if after[want]-before[want] < uint64(repeat) {
		return 0, 0, fmt.Errorf("%d of %d runs counted as %s", after[want]-before[want], repeat, want)
	}
	return total / float64(repeat), repeat, nil
}

func udp(src, dst string) fastpath.Packet {
	return fastpath.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: 17,
		SPort: 1234, DPort: 5678, TTL: 255, Payload: 18}
}
