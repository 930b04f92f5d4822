// SPDX-License-Identifier: Apache-2.0

package api

import "time"

// Version is the API version in every path (/v1/...).
const Version = "v1"

// GatewayStatus is GET /v1/gateway.
type GatewayStatus struct {
	Version      string    `json:"version"`
	Commit       string    `json:"commit"`
	Started      time.Time `json:"started"`
	PolicySource string    `json:"policy_source"`
	PinDir       string    `json:"pin_dir"`
	// FastPathOpen: the program forwards (ready and the lease current);
	// false, everything goes to the kernel.
	FastPathOpen bool `json:"fast_path_open"`
	// ClosedReason says why the fast path is closed when an interface
	// lacks the program (checked against the kernel's attachments).
	ClosedReason string            `json:"closed_reason,omitempty"`
	Pins         PinStatus         `json:"pins"`
	Interfaces   []InterfaceStatus `json:"interfaces"`
	Mirror       MirrorStatus      `json:"mirror"`
	FlowCache    FlowCacheStatus   `json:"flow_cache"`
	// Flower is the hardware tier (nil: no interface has flower on).
	Flower *FlowerStatus `json:"flower,omitempty"`
	// Unknown counts packets from interfaces the gateway does not know.
	Unknown map[string]uint64 `json:"unknown_interface_reasons,omitempty"`
}

// InterfaceStatus is one attached or configured interface.
type InterfaceStatus struct {
	Name           string            `json:"name"`
	Ifindex        int               `json:"ifindex"`
	XDPMode        string            `json:"xdp_mode"`
	L2             string            `json:"l2"`
	InboundForward bool              `json:"inbound_forward"`
	VLAN           uint16            `json:"vlan,omitempty"`
	Parent         string            `json:"parent,omitempty"`
	NextHop        *NextHop          `json:"hairpin_next_hop,omitempty"`
	Reasons        map[string]uint64 `json:"reasons"` // packets per verdict reason
	// Attached: the kernel has this daemon's program on this interface
	// (by name, ifindex and namespace); Problem says why not.
	Attached bool   `json:"attached"`
	Problem  string `json:"problem,omitempty"`
}

// NextHop is a resolved (or not) hairpin next hop.
type NextHop struct {
	Addr     string `json:"addr"`
	Resolved bool   `json:"resolved"`
	MAC      string `json:"mac,omitempty"`
	Via      string `json:"via,omitempty"`
	Error    string `json:"error,omitempty"`
}

// FlowCacheStatus is the fast path's flow cache (docs/fastpath.md).
type FlowCacheStatus struct {
	// KeysL4: entries are per connection (a policy or the FIB looks at
	// protocol or ports), not per host pair.
	KeysL4 bool   `json:"keys_l4"`
	Hits   uint64 `json:"hits"`
	Fills  uint64 `json:"fills"`
	// Bypassed counts packets decided without the cache while it was off
	// for thrashing (more live flows than it holds).
	Bypassed uint64 `json:"bypassed"`
	// PassHits: `inbound` passes (an IN/FWD policy decides, the interface
	// does not forward inbound) replayed from the cache and counted
	// against their policy; PassFills: such entries written.
	PassHits  uint64 `json:"pass_hits"`
	PassFills uint64 `json:"pass_fills"`
}

// PinStatus says whether the pins under the pin dir are all there.
type PinStatus struct {
	OK      bool     `json:"ok"`
	Missing []string `json:"missing,omitempty"` // at the last check that found some gone
	Repairs uint64   `json:"repairs"`           // times they were pinned again
	// LastError is why pinning again failed (it is retried every second).
	LastError string `json:"last_error,omitempty"`
}

// MirrorStatus is the kernel mirror's state.
type MirrorStatus struct {
	// InSync: the tables equal the kernel's state and the program uses
	// them. Never true while the fast path is closed.
	InSync bool `json:"in_sync"`
	// State: in-sync, catching-up (after a resync or a lapsed lease),
	// verifying (comparing with a second dump), closed (retrying), or
	// closed-under-us (the program is closed though the mirror is not).
	State            string    `json:"state"`
	KernelPolicies   int       `json:"kernel_policies"`
	KernelStates     int       `json:"kernel_states"`
	MirroredPolicies int       `json:"mirrored_policies"`
	TuplesIPv4       int       `json:"tuples_ipv4"`
	TuplesIPv6       int       `json:"tuples_ipv6"`
	Syncs            uint64    `json:"syncs"`
	Resyncs          uint64    `json:"resyncs"`
	Verified         uint64    `json:"verified"`     // verifying dumps that agreed
	Divergences      uint64    `json:"divergences"`  // verifying dumps that did not
	LeaseLapses      uint64    `json:"lease_lapses"` // leases that ran out under the daemon
	LastSync         time.Time `json:"last_sync"`
	LastSyncDuration string    `json:"last_sync_duration"`
	LastError        string    `json:"last_error,omitempty"`
}

// PolicyStat is one policy's fast-path counters (GET /v1/gateway/policies).
type PolicyStat struct {
	Index    uint32 `json:"index"`
	Dir      string `json:"dir"`
	Priority uint32 `json:"priority"`
	Selector string `json:"selector"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
}

// Provider is what the daemon implements for the API and the metrics.
type Provider interface {
	Status() (*GatewayStatus, error)
	Policies() ([]PolicyStat, error)
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}
