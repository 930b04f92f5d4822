// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"sluice/internal/config"
	"sluice/internal/driverquirk"
)

// Packet offload on drivers that differ from the kernel's software XFRM
// (internal/driverquirk's table). What plan (and so apply and verify)
// does with each, decided in issue 31 and documented in docs/overlay.md
// ("What the driver does"):
//
//   - cleartext on the wire, or accepted from it, or a repeated AES-GCM
//     nonce: refused, unless the peer names the behaviour in accept-leaks;
//   - no anti-replay: a note (a warning), the traffic stays encrypted.
//
// The rows come from the devices that would hold the peer's SAs (every
// port of a bond: a failover can put them on any) and the running kernel.

// quirksOn returns the table's rows for the devices behind dev, and the
// XFRM core's rows for the running kernel.
func (p *planner) quirksOn(dev string) driverquirk.Set {
	s := driverquirk.For(driverquirk.AnyDriver, p.live.Release)
	for _, d := range append(p.portsOf(dev), dev) {
		if hw, ok := p.live.OffloadHW[d]; ok {
			s = s.Merge(hw.Quirks)
		}
	}
	return s
}

// acceptedLeaks checks the names in pr's accept-leaks and returns them;
// false when one is not a leaking behaviour of the table.
func (p *planner) acceptedLeaks(path string, pr *config.Peer) (map[driverquirk.Behaviour]bool, bool) {
	leaking := map[string]driverquirk.Behaviour{}
	for _, e := range driverquirk.Table {
		if e.Leaks {
			leaking[e.Behaviour.String()] = e.Behaviour
		}
	}
	out := map[driverquirk.Behaviour]bool{}
	for _, n := range pr.AcceptLeaks {
		b, ok := leaking[n]
		if !ok {
			names := make([]string, 0, len(leaking))
			for k := range leaking {
				names = append(names, k)
			}
			slices.Sort(names)
			p.fail("%s: accept-leaks: %q is not a leaking driver behaviour sluice knows; use one of %s (docs/overlay.md, What the driver does)", path, n, strings.Join(names, ", "))
			return nil, false
		}
		out[b] = true
	}
	return out, true
}

// driverQuirks refuses or warns about pr's layout on the driver that
// would carry its packet-offloaded SAs. manual is true for keys from
// the file, which sluice itself moves with their sequence numbers.
func (p *planner) driverQuirks(path string, pr *config.Peer, modes map[string]string, manual bool) bool {
	accepted, ok := p.acceptedLeaks(path, pr)
	if !ok {
		return false
	}
	out, in := modes["out"] == config.OffloadModePacket, modes["in"] == config.OffloadModePacket
	if !out && !in {
		return true
	}
	if pr.ESNByOffload {
		p.note("%s: esn: true, the default with offload packet (mlx5 keeps anti-replay, and starts a moved SA where its sequence number left off, only for ESN SAs: docs/overlay.md, What the driver does); ESN is part of the wire format, so the peer's end needs it too: esn: true in its file (offload: packet there sets it), or no packet gets through. To run without, set esn: false", path)
	}
	q := p.quirksOn(pr.OffloadDev)
	on := fmt.Sprintf("%s (%s, Linux %s)", pr.OffloadDev, quirkDrivers(p, pr.OffloadDev), p.live.Release)
	ok = true
	refuse := func(b driverquirk.Behaviour, what string) {
		e, _ := q.Get(b)
		if accepted[b] {
			p.note("%s: %s. Accepted by accept-leaks: %s (source: %s)", path, what, b, e.Source)
			return
		}
		p.fail("%s: %s (source: %s). Fix: %s; or, to accept the leak, add %s to the peer's accept-leaks", path, what, e.Source, e.Fix, b)
		ok = false
	}
	if out && q.Has(driverquirk.ExactSelectorMatch) {
		for i, s := range pr.Selectors {
			if pr.Mode != config.ModeTunnel || (isHost(s.Local) && isHost(s.Remote)) {
				continue
			}
			refuse(driverquirk.ExactSelectorMatch, fmt.Sprintf("selectors[%d] %s -> %s with offload packet on %s: the driver matches a policy's addresses exactly and ignores the prefix length, so in hardware the policy selects only %s -> %s and the rest of the subnets leaves in cleartext",
				i, s.Local, s.Remote, on, s.Local.Addr(), s.Remote.Addr()))
			break
		}
	}
	bond := p.isBond(pr.OffloadDev) || p.bondOf(pr.OffloadDev) != ""
	if bond && q.Has(driverquirk.CleartextAcceptedOnOffloadedIN) {
		refuse(driverquirk.CleartextAcceptedOnOffloadedIN, fmt.Sprintf("packet offload on active-backup bond ports (%s): after a failover the SAs stay on the old port and the traffic leaves in cleartext until apply moves them; Linux %s accepts cleartext that matches a packet-offloaded IN policy, so a peer laid out the same way takes that cleartext without a drop or a counter: a silent leak at both ends",
			on, p.live.Release))
	}
	if !pr.ESN && out && manual && bond && q.Has(driverquirk.SeqRestartsAtOne) {
		refuse(driverquirk.SeqRestartsAtOne, fmt.Sprintf("esn off with offload packet on bond ports %s: at every failover apply moves the OUT SA with its sequence number, but the driver starts a non-ESN SA at 1 whatever oseq says, so the same key repeats AES-GCM nonces and the peer drops the packets as replays", on))
	}
	if !pr.ESN && in && q.Has(driverquirk.NoReplayWithoutESN) {
		e, _ := q.Get(driverquirk.NoReplayWithoutESN)
		p.note("%s: esn off with offload packet on %s: no anti-replay at all (the driver keeps a replay window only for ESN SAs, and the kernel does not check packet-offloaded SAs; source: %s). Fix: %s", path, on, e.Source, e.Fix)
	}
	return ok
}

// seqRestartCheck refuses replacing the live OUT SA l by w (a move or an
// offload change, keeping the key) when the driver starts a non-ESN SA at
// sequence number 1: the carried sequence would be ignored.
func (p *planner) seqRestartCheck(w wantSA, sameKey bool) bool {
	pr := w.peer
	if w.dir != "out" || pr.ESN || !sameKey || w.offload != config.OffloadModePacket {
		return true
	}
	q := p.quirksOn(w.dev)
	if !q.Has(driverquirk.SeqRestartsAtOne) {
		return true
	}
	accepted := slices.Contains(pr.AcceptLeaks, driverquirk.SeqRestartsAtOne.String())
	e, _ := q.Get(driverquirk.SeqRestartsAtOne)
	what := fmt.Sprintf("peer %s: replacing %s on %s keeps its key and carries its sequence number, but %s starts a non-ESN SA at 1 whatever oseq says: the key repeats AES-GCM nonces and the peer drops the packets as replays (source: %s)",
		pr.Name, w, w.dev, quirkDrivers(p, w.dev), e.Source)
	if accepted {
		p.note("%s. Accepted by accept-leaks: %s", what, driverquirk.SeqRestartsAtOne)
		return true
	}
	p.fail("%s. Fix: %s; or, to accept it, add %s to the peer's accept-leaks", what, e.Fix, driverquirk.SeqRestartsAtOne)
	return false
}

// quirkDrivers names what the table read for dev's devices.
func quirkDrivers(p *planner, dev string) string {
	var as []string
	for _, d := range append(p.portsOf(dev), dev) {
		if hw, ok := p.live.OffloadHW[d]; ok && !slices.Contains(as, hw.Quirks.As) {
			as = append(as, hw.Quirks.As)
		}
	}
	if len(as) == 0 {
		return "driver unknown"
	}
	return strings.Join(as, ", ")
}

func isHost(p netip.Prefix) bool { return p.Bits() == p.Addr().BitLen() }
