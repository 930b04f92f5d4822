// SPDX-License-Identifier: Apache-2.0

package driverquirk

import "fmt"

// Behaviour is one way a driver (or the kernel around it) differs from
// the kernel's software XFRM, named by what it does on the wire.
type Behaviour int

const (
	// ExactSelectorMatch: the device matches a policy selector's address
	// exactly and ignores its prefix length, so a 10.1.0.0/16 policy
	// offloaded to it selects only 10.1.0.0; the rest of the subnet misses
	// the policy table (and, with NoTXMissRule, leaves in cleartext).
	ExactSelectorMatch Behaviour = iota + 1
	// NoTXMissRule: a packet an offloaded OUT policy selects but no SA
	// serves (the SA deleted under its policy, a rekey gap) continues
	// past the TX SA table and leaves in cleartext instead of being dropped.
	NoTXMissRule
	// FragmentsCleartext: TX policy and SA rules match non-fragments only,
	// so IPv4 fragments leave in cleartext.
	FragmentsCleartext
	// IPOptionsRefused: packets with IPv4 options or IPv6 extension
	// headers are refused for offload (the kernel drops them).
	IPOptionsRefused
	// SecondSAPending: the TX SA rule matches on reqid only; a second SA
	// of a reqid waits until the first is deleted, a third fails.
	SecondSAPending
	// Reqid0Cleartext: a template with reqid 0 selects no SA in the
	// device, so its traffic misses the SA table (cleartext with
	// NoTXMissRule).
	Reqid0Cleartext
	// NoReplayWithoutESN: packet offload keeps an anti-replay window only
	// for ESN SAs; without ESN (and the kernel skips its own check for
	// packet offload) there is no replay protection at all.
	NoReplayWithoutESN
	// SeqRestartsAtOne: a non-ESN packet-offloaded SA sends from sequence
	// number 1 whatever its oseq says, so an SA re-created with its
	// sequence carried (a move, a failover) repeats numbers the peer has
	// seen: the peer drops them, and the key's GCM nonces repeat.
	SeqRestartsAtOne
	// CleartextAcceptedOnOffloadedIN: the kernel accepts cleartext that
	// matches a packet-offloaded IN policy for local delivery (it trusts
	// the NIC), so cleartext from a peer whose offload broke is silently
	// accepted instead of dropped.
	CleartextAcceptedOnOffloadedIN
	// NoBondPacketOffloadPolicy: the bonding driver cannot hold
	// packet-offloaded policies (no xdo_dev_policy_add); they must sit on
	// a port and stay there at a failover.
	NoBondPacketOffloadPolicy
)

var behaviourNames = map[Behaviour]string{
	ExactSelectorMatch:             "exact-selector-match",
	NoTXMissRule:                   "no-tx-miss-rule",
	FragmentsCleartext:             "fragments-cleartext",
	IPOptionsRefused:               "ip-options-refused",
	SecondSAPending:                "second-sa-pending",
	Reqid0Cleartext:                "reqid0-cleartext",
	NoReplayWithoutESN:             "no-replay-without-esn",
	SeqRestartsAtOne:               "seq-restarts-at-one",
	CleartextAcceptedOnOffloadedIN: "cleartext-accepted-on-offloaded-in",
	NoBondPacketOffloadPolicy:      "no-bond-packet-offload-policy",
}

// String is the behaviour's stable name, as --json and the docs print it.
func (b Behaviour) String() string {
	if n, ok := behaviourNames[b]; ok {
		return n
	}
	return fmt.Sprintf("behaviour(%d)", int(b))
}

// Behaviours lists every behaviour in declaration order.
func Behaviours() []Behaviour {
	out := make([]Behaviour, 0, len(behaviourNames))
	for b := ExactSelectorMatch; b <= NoBondPacketOffloadPolicy; b++ {
		out = append(out, b)
	}
	return out
}
