// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// Packet offload and an active-backup bond (seed 000's layout), as Linux
// 6.12 does it (tested on the NIC model: test/vm/overlay_packet_test.go):
//
//   - A bond cannot hold packet-offloaded policies: the bonding driver has
//     xdo_dev_state_add but no xdo_dev_policy_add. So `offload: packet`
//     with `offload-dev: BOND` means the bond's active port: plan and
//     apply put the SAs and their policies there, and after a failover the
//     plan moves them to the new active port (replace SA, update policy).
//     This never goes through the bond's xfrmdev_ops, so the 6.11-6.15
//     bond offload bug (bond_offload.go) does not apply.
//   - Until apply runs again, the old port keeps them: the kernel hands the
//     packets to the bond unencrypted (packet offload skips the device
//     check in xfrm_dev_offload_ok), the new active port holds no policy
//     and sends them in cleartext. verify and doctor fail in that state.
//   - Moving them leaks nothing: between the SA's delete and the policy's
//     update, the OUT policy finds no SA on its device and the kernel
//     drops (acquire), never sends in clear.

// throughBond reports whether SAs of mode m offloaded to a bond go
// through the bond's own xfrmdev_ops (crypto, and auto's attempts),
// which need the bond's ESP features; packet offload goes to a port.
func throughBond(m string) bool {
	return m == config.OffloadModeCrypto || m == config.OffloadModeAuto
}

// offloadDevFor is the device an SA of mode m is offloaded to: for
// packet offload to a bond, the bond's active port; else offload-dev.
func (p *planner) offloadDevFor(pr *config.Peer, m string) string {
	if m != config.OffloadModePacket || !p.isBond(pr.OffloadDev) {
		return pr.OffloadDev
	}
	return p.activePort(pr.OffloadDev)
}

// activePort is bond's active port now, or the port it will pick when
// the plan creates it (the primary, else the first port).
func (p *planner) activePort(bond string) string {
	if k := p.live.link(bond); k != nil && k.Bond != nil && k.Bond.Active != 0 {
		return p.live.nameOf(k.Bond.Active)
	}
	if bond == p.bondName && p.h.Uplinks != nil && p.h.Uplinks.Bond != nil {
		if pr := p.h.Uplinks.Bond.Primary; pr != "" {
			return pr
		}
		if len(p.ports) > 0 {
			return p.ports[0]
		}
	}
	if ps := p.live.bondPorts(bond); len(ps) > 0 {
		return ps[0]
	}
	return bond
}

// activeOf explains a wanted device that is a bond's active port.
func (p *planner) activeOf(pr *config.Peer, w wantSA) string {
	if w.dev != pr.OffloadDev {
		return fmt.Sprintf(" (%s's active port)", pr.OffloadDev)
	}
	return ""
}

// bondPacketNote tells what packet offload to a bond does.
func (p *planner) bondPacketNote(path string, pr *config.Peer, modes map[string]string) {
	if !p.isBond(pr.OffloadDev) || (modes["out"] != config.OffloadModePacket && modes["in"] != config.OffloadModePacket) {
		return
	}
	bond, port := pr.OffloadDev, p.activePort(pr.OffloadDev)
	p.note("%s: offload packet to bond %s: a bond cannot hold packet-offloaded policies (no xdo_dev_policy_add in bonding), so the SAs and policies go to its active port %s. "+
		"After a failover they stay on %s and the traffic leaves the new active port in cleartext until `sluice apply` runs again and moves them (verify and doctor fail until then): "+
		"run apply from whatever watches the bond (e.g. on `ip monitor link` events for %s), or use offload: none", path, bond, port, port, bond)
}

// applyDev is the device apply offloads an SA of mode m to, read when
// the step runs (the bond may have been created, or failed over, since
// the plan): packet offload to a bond goes to its active port.
func applyDev(pr *config.Peer, m string) (string, error) {
	if m != config.OffloadModePacket {
		return pr.OffloadDev, nil
	}
	active, isBond, err := kernel.BondActiveSlave(pr.OffloadDev)
	if err != nil || !isBond {
		return pr.OffloadDev, err
	}
	if active == "" {
		return "", fmt.Errorf("bond %s has no active port to offload to", pr.OffloadDev)
	}
	return active, nil
}

// verifyBondPort fails a packet-offloaded SA that sits on a port of an
// active-backup bond other than its active port: after a failover its
// traffic leaves the active port in cleartext.
func verifyBondPort(r *VerifyReport, live *Live, pr *config.Peer, w wantSA, st SAStatus) bool {
	if st.Got != config.OffloadModePacket || st.Dev == "" {
		return true
	}
	k := live.link(st.Dev)
	if k == nil || k.Master == 0 {
		return true
	}
	b := live.linkByIndex(k.Master)
	if b == nil || b.Kind != "bond" || b.Bond == nil || b.Bond.Mode != "active-backup" || b.Bond.Active == k.Index {
		return true
	}
	active := orNoPort(live.nameOf(b.Bond.Active))
	fix := fmt.Sprintf("set offload-dev: %s (packet offload then follows the active port) and run sluice apply, which moves them to %s; or, with no cleartext window at a failover, offload: crypto on the port or offload: none", b.Name, active)
	if pr.OffloadDev == b.Name {
		fix = fmt.Sprintf("run sluice apply: it moves them to %s (after every failover; offload: crypto on a port, or none, has no such window)", active)
	}
	what := fmt.Sprintf("its traffic leaves %s in cleartext (the kernel hands packet-offloaded traffic to the bond unencrypted and %s holds no policy)", active, active)
	if w.dir == "in" {
		what = fmt.Sprintf("ESP arriving on %s is not decrypted by the NIC", active)
	}
	r.add("offload", false, "%s: packet-offloaded to %s, but %s's active port is %s (a failover: the bond moves no packet-offloaded SA): %s. Fix: %s",
		w, st.Dev, b.Name, active, what, fix)
	return false
}

func orNoPort(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// seqMargin is how many sequence numbers a carried-over outbound SA
// skips: the packets the old SA may still send between the dump that
// reads its count and its delete (1 Mi packets is ~130 ms at 8 Mpps).
// Skipped numbers cost nothing; the receiver's window moves on.
const seqMargin = 1 << 20

// carrySeq reads the SA w replaces, right before it is deleted, and when
// it has w's key starts w's sequence numbers where it left them: moving
// an SA to another port (a failover) or changing its offload re-creates
// it, and a manual key installed again from sequence number 1 repeats
// AES-GCM nonces (docs/overlay.md, Keying). For a packet-offloaded SA the
// kernel's own sequence numbers may stay 0 (the NIC counts), so its
// packet count, which the driver reports (update_stats), is the floor.
// Inbound, the highest number seen so far (or the packet count, a lower
// bound when packets were lost) starts the replay window, so old packets
// are not accepted again; no margin, or the peer's next packets would be
// dropped.
func carrySeq(w *wantSA) error {
	sas, err := xfrm.StateDetails(false)
	if err != nil {
		return err
	}
	for _, s := range sas {
		if s.Dst != w.dst || s.SPI != w.spi || s.Proto != xfrm.ProtoESP {
			continue
		}
		if s.KeyDigest != xfrm.KeyDigest(w.key.Bytes()) {
			return nil // a new key starts from 1
		}
		if w.dir == "out" {
			w.oseq = max(s.OSeq, s.Packets) + seqMargin
		} else {
			w.seq = max(s.Seq, s.Packets)
		}
		w.carried = true
	}
	return nil
}
