// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net/netip"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// Block policies of IKE peers. Charon installs a pair's policies and
// removes them when it stops (a restart, an upgrade, a crash it survives
// long enough to clean up): until it is back and has renegotiated, the
// pair's traffic would match no policy and leave in clear. So sluice
// installs, for each IKE peer's selectors, its own OUT policy with action
// block and a priority number above charon's (lower numbers win): while
// charon's policy exists it wins, and when it is gone the block drops the
// traffic. Sluice keeps it for as long as the peer is in the file;
// teardown and prune remove it. docs/overlay.md "Charon restarts".

// kindBlockPolicy journals a block policy apply installed (Name: the mark).
const kindBlockPolicy = "blockpolicy"

// ikeBlockPriority is above every priority strongSwan computes itself
// (its fallback policies stay below 2^27); a peer's own priority, if
// higher, is passed by one.
const ikeBlockPriority = 0xF0000000

// ikeBlocks are the block policies of one IKE peer: per selector pair
// (charon's local_ts/remote_ts), one for even and one for odd marks.
func ikeBlocks(pr *config.Peer) []xfrm.BlockPolicy {
	sels := [][2]netip.Prefix{{hostPrefix(pr.Local), hostPrefix(pr.Remote)}}
	if pr.Mode == config.ModeTunnel && len(pr.Selectors) > 0 {
		sels = nil
		for _, s := range pr.Selectors {
			sels = append(sels, [2]netip.Prefix{s.Local, s.Remote})
		}
	}
	prio := uint32(ikeBlockPriority)
	if pr.Priority >= prio && pr.Priority < ^uint32(0) {
		prio = pr.Priority + 1
	}
	var out []xfrm.BlockPolicy
	for _, s := range sels {
		for _, mark := range []uint32{0, 1} {
			out = append(out, xfrm.BlockPolicy{Dir: xfrm.DirOut, Src: s[0], Dst: s[1], Priority: prio, Mark: mark, MarkMask: 1})
		}
	}
	return out
}

// liveBlock returns the live policy with b's selector and mark, or nil.
func (l *Live) liveBlock(b xfrm.BlockPolicy) *xfrm.Policy {
	for i := range l.Policies {
		if b.Matches(&l.Policies[i]) {
			return &l.Policies[i]
		}
	}
	return nil
}

func blockEntry(b xfrm.BlockPolicy) entry {
	return entry{Kind: kindBlockPolicy, Dir: b.Dir.String(), Src: b.Src.String(), Dst: b.Dst.String(), Name: markName(b)}
}

func markName(b xfrm.BlockPolicy) string {
	return fmt.Sprintf("mark %d/%d", b.Mark, b.MarkMask)
}

// ikeBlock plans the block policies of one IKE peer, before its
// connection is loaded.
func (p *planner) ikeBlock(pr *config.Peer) {
	for _, b := range ikeBlocks(pr) {
		b := b
		l := p.live.liveBlock(b)
		if l != nil && l.Action == xfrm.ActionBlock && l.Priority == b.Priority && len(l.Tmpls) == 0 {
			continue
		}
		action, why, verb := "create", "missing: it holds the pair's traffic while charon is down (never in clear)", "add"
		if l != nil {
			action, why, verb = "replace", fmt.Sprintf("action %s priority %d, want block priority %d", l.Action, l.Priority, b.Priority), "update"
		}
		update := l != nil
		p.add(Step{Section: "ipsec", Action: action, Object: b.String(), Why: why, Commands: []string{b.Command(verb)}, run: func(r *runner) error {
			if err := xfrm.BlockPolicyAdd(b, update); err != nil {
				return err
			}
			if !update {
				r.created(blockEntry(b))
			}
			return nil
		}})
	}
}

// ikeBlocks removes the block policies of the file's IKE peers, after
// their connections (teardown_ike.go): charon may be down, so this does
// not need it.
func (t *tearer) ikeBlocks() {
	if t.h.IPsec == nil {
		return
	}
	for i := range t.h.IPsec.Peers {
		pr := &t.h.IPsec.Peers[i]
		if pr.Keying != config.KeyingIKE {
			continue
		}
		for _, b := range ikeBlocks(pr) {
			b := b
			if t.live.liveBlock(b) == nil {
				continue
			}
			e := blockEntry(b)
			if !t.ours(kindBlockPolicy, func(x entry) bool { return x.id() == e.id() }, b.String()) {
				continue
			}
			t.add(Step{Section: "ipsec", Action: "delete", Object: b.String(), Why: "declared by the file", Commands: []string{b.Command("delete")}, run: func(r *runner) error {
				if err := xfrm.BlockPolicyDelete(b); err != nil && !kernel.IsNotExist(err) {
					return err
				}
				r.j.dropCreated(e)
				return nil
			}})
		}
	}
}
