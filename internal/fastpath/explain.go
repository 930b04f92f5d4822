// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"sluice/internal/kernel/xfrm"
)

// Reason says why the program chose its action.
type Reason uint32

var reasonNames = map[fastpathFpReason]string{
	fastpathFpReasonFP_R_NOT_READY: "not-ready", fastpathFpReasonFP_R_NOT_CONFIGURED: "not-configured",
	fastpathFpReasonFP_R_NOT_IP: "not-ip", fastpathFpReasonFP_R_MALFORMED: "malformed",
	fastpathFpReasonFP_R_VLAN_UNKNOWN: "vlan-unknown", fastpathFpReasonFP_R_IP_OPTIONS: "ip-options",
	fastpathFpReasonFP_R_FRAGMENT: "fragment", fastpathFpReasonFP_R_IPV6EXT: "ipv6-ext",
	fastpathFpReasonFP_R_IPSEC: "esp-ah", fastpathFpReasonFP_R_IKE: "ike",
	fastpathFpReasonFP_R_TTL: "ttl", fastpathFpReasonFP_R_NO_POLICY: "no-policy",
	fastpathFpReasonFP_R_BLOCK: "block", fastpathFpReasonFP_R_UNCERTAIN: "uncertain",
	fastpathFpReasonFP_R_NOT_OFFLOADED: "not-offloaded", fastpathFpReasonFP_R_FWD_CHECK: "fwd-check",
	fastpathFpReasonFP_R_INBOUND: "inbound", fastpathFpReasonFP_R_LOCAL: "local",
	fastpathFpReasonFP_R_NO_ROUTE: "no-route", fastpathFpReasonFP_R_ROUTE_MISMATCH: "route-mismatch",
	fastpathFpReasonFP_R_NO_NEXTHOP: "no-nexthop", fastpathFpReasonFP_R_MTU: "mtu",
	fastpathFpReasonFP_R_NO_TX_PORT: "no-tx-port", fastpathFpReasonFP_R_FWD_OUT: "forward-out",
	fastpathFpReasonFP_R_FWD_IN:     "forward-in",
	fastpathFpReasonFP_R_L2NOT_OURS: "l2-not-ours", fastpathFpReasonFP_R_BAD_IP_HEADER: "bad-ip-header",
	fastpathFpReasonFP_R_MARTIAN: "martian", fastpathFpReasonFP_R_ICMP_ERROR: "icmp-error",
	fastpathFpReasonFP_R_RP_FILTER: "rp-filter", fastpathFpReasonFP_R_NOT_FORWARDABLE: "not-forwardable",
	fastpathFpReasonFP_R_SA_MTU: "sa-mtu", fastpathFpReasonFP_R_USE_TIME: "use-time",
	fastpathFpReasonFP_R_DEVICE_MISS: "device-miss", fastpathFpReasonFP_R_SA_GONE: "sa-gone",
}

// Reasons in counter order.
const (
	ReasonNotReady     = Reason(fastpathFpReasonFP_R_NOT_READY)
	ReasonNoPolicy     = Reason(fastpathFpReasonFP_R_NO_POLICY)
	ReasonBlock        = Reason(fastpathFpReasonFP_R_BLOCK)
	ReasonUncertain    = Reason(fastpathFpReasonFP_R_UNCERTAIN)
	ReasonNotOffloaded = Reason(fastpathFpReasonFP_R_NOT_OFFLOADED)
	ReasonFwdCheck     = Reason(fastpathFpReasonFP_R_FWD_CHECK)
	ReasonInbound      = Reason(fastpathFpReasonFP_R_INBOUND)
	ReasonTTL          = Reason(fastpathFpReasonFP_R_TTL)
	ReasonLocal        = Reason(fastpathFpReasonFP_R_LOCAL)
	ReasonForwardOut   = Reason(fastpathFpReasonFP_R_FWD_OUT)
	ReasonForwardIn    = Reason(fastpathFpReasonFP_R_FWD_IN)
	ReasonL2NotOurs    = Reason(fastpathFpReasonFP_R_L2NOT_OURS)
	ReasonBadIPHeader  = Reason(fastpathFpReasonFP_R_BAD_IP_HEADER)
	ReasonMartian      = Reason(fastpathFpReasonFP_R_MARTIAN)
	ReasonICMPError    = Reason(fastpathFpReasonFP_R_ICMP_ERROR)
	ReasonRPFilter     = Reason(fastpathFpReasonFP_R_RP_FILTER)
	ReasonSAMTU        = Reason(fastpathFpReasonFP_R_SA_MTU)
	ReasonUseTime      = Reason(fastpathFpReasonFP_R_USE_TIME)
	// ReasonDeviceMiss: the offload device would send the policy's
	// packets in cleartext (a template of reqid 0, a subnet selector on a
	// driver that matches exact addresses; see DeviceQuirks).
	ReasonDeviceMiss = Reason(fastpathFpReasonFP_R_DEVICE_MISS)
	// ReasonSAGone: the kernel no longer holds the policy's SA (the
	// SA-deletion window; SetSACheck).
	ReasonSAGone = Reason(fastpathFpReasonFP_R_SA_GONE)
	// ReasonNotForwardable is the live program's quick pass: no
	// forwardable policy covers the destination. Explain never reports
	// it; it names the exact reason instead.
	ReasonNotForwardable = Reason(fastpathFpReasonFP_R_NOT_FORWARDABLE)
	reasonMax            = Reason(fastpathFpReasonFP_R_MAX)
)

func (r Reason) String() string {
	if n, ok := reasonNames[fastpathFpReason(r)]; ok {
		return n
	}
	return fmt.Sprintf("reason-%d", uint32(r))
}

// Forwarded reports whether the reason is a forward by the fast path.
func (r Reason) Forwarded() bool { return r == ReasonForwardOut || r == ReasonForwardIn }

// XDP actions.
const (
	XDPAborted  = 0
	XDPDrop     = 1
	XDPPass     = 2
	XDPTx       = 3
	XDPRedirect = 4
)

// ActionName names an XDP action.
func ActionName(a uint32) string {
	return [...]string{"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT", "?"}[min(a, 5)]
}

// Decision is what the program did with one packet and why.
type Decision struct {
	Action         uint32   `json:"-"`
	ActionName     string   `json:"action"`
	Reason         Reason   `json:"-"`
	ReasonName     string   `json:"reason"`
	Dir            string   `json:"dir,omitempty"`
	PolicyIndex    uint32   `json:"policy_index,omitempty"`
	PolicyPriority uint32   `json:"policy_priority,omitempty"`
	EgressIfindex  uint32   `json:"egress_ifindex,omitempty"`
	MatchedDirs    []string `json:"matched_dirs,omitempty"`
	Output         []byte   `json:"output,omitempty"` // the frame as the program left it
}

// ErrShortFrame means an explain frame is shorter than an Ethernet header,
// which BPF_PROG_RUN refuses outright.
var ErrShortFrame = errors.New("shorter than an Ethernet header")

// Explain runs the explain twin of the program over frame, as if it had
// arrived on ingressIfindex (which must exist in the calling thread's
// network namespace when non-zero), against the live maps. Safe for
// concurrent use: each Datapath's twin reports into a map of its own, and
// runs of one Datapath take turns.
func (dp *Datapath) Explain(frame []byte, ingressIfindex int) (*Decision, error) {
	if len(frame) < 14 {
		return nil, fmt.Errorf("fastpath: frame of %d bytes is %w (14 bytes: destination MAC, source MAC, EtherType)", len(frame), ErrShortFrame)
	}
	dp.explainMu.Lock()
	defer dp.explainMu.Unlock()
	out := make([]byte, len(frame)+64)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	if ingressIfindex != 0 {
		opts.Context = xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ingressIfindex)}
	}
	ret, err := dp.explain.Run(opts)
	if err != nil {
		return nil, fmt.Errorf("fastpath: BPF_PROG_RUN: %w", err)
	}
	var d fastpathFpDecision
	if err := dp.explainOut.Lookup(uint32(0), &d); err != nil {
		return nil, err
	}
	dec := &Decision{
		Action: ret, ActionName: ActionName(ret), Reason: Reason(d.Reason), ReasonName: Reason(d.Reason).String(),
		PolicyIndex: d.PolicyIndex, PolicyPriority: d.PolicyPriority, EgressIfindex: d.EgressIfindex,
		Output: opts.DataOut,
	}
	if d.PolicyIndex != 0 {
		dec.Dir = xfrm.Dir(d.Dir % 3).String()
	}
	for dir, name := range []string{"in", "out", "fwd"} {
		if d.Matched&(1<<dir) != 0 {
			dec.MatchedDirs = append(dec.MatchedDirs, name)
		}
	}
	return dec, nil
}

// xdpMD is struct xdp_md as BPF_PROG_RUN takes it for the context.
type xdpMD struct {
	Data           uint32
	DataEnd        uint32
	DataMeta       uint32
	IngressIfindex uint32
	RxQueueIndex   uint32
	EgressIfindex  uint32
}

// Benchmark runs the live program over frame repeat times with
// BPF_PROG_RUN (ingress: loopback of the calling thread's namespace) and
// returns the verdict and the kernel's measured time per run.
func (dp *Datapath) Benchmark(frame []byte, repeat int) (uint32, time.Duration, error) {
	return dp.objs.XdpFastpath.Benchmark(frame, repeat, nil)
}
