// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"net/netip"
	"strings"

	"sluice/internal/config"
)

// IKESAInfo is what verify adds to an SA keyed by IKE.
type IKESAInfo struct {
	Conn           string `json:"conn"`
	AgeSeconds     int    `json:"age_seconds"`
	RekeyInSeconds int    `json:"rekey_in_seconds"`
}

// verifyIKEPeer checks one IKE peer: its connection is loaded, a CHILD_SA
// is installed, and the kernel holds its two SAs with the offload asked.
// A rekey in progress shows two CHILD_SAs: the newest installed one is
// checked.
func verifyIKEPeer(r *VerifyReport, h *config.Host, pr *config.Peer, live *Live) {
	il := live.IKE
	if il == nil || il.Err != nil {
		why := "not asked"
		if il != nil {
			why = il.Err.Error()
		}
		r.add("ike", false, "peer %s: cannot ask charon: %s", pr.Name, why)
		return
	}
	var conn string
	for _, c := range il.Conns {
		if strings.HasPrefix(c, connPrefix(h, pr.Name)) {
			conn = c
		}
	}
	if conn == "" {
		r.add("ike", false, "peer %s: no connection loaded in charon: run sluice apply", pr.Name)
		return
	}
	best := -1
	for i, c := range il.Children[conn] {
		if c.State == "INSTALLED" && (best < 0 || c.InstalledSecs < il.Children[conn][best].InstalledSecs) {
			best = i
		}
	}
	if best < 0 {
		r.add("ike", false, "peer %s: connection %s has no installed CHILD_SA (is the peer's overlay applied? its charon log says why IKE failed)", pr.Name, conn)
		return
	}
	c := il.Children[conn][best]
	r.add("ike", true, "peer %s: %s: CHILD_SA installed %ds ago, rekeys in %ds (IKE_SA %s)", pr.Name, conn, c.InstalledSecs, c.RekeyInSecs, c.IKEState)
	for _, s := range []struct {
		dir      string
		src, dst netip.Addr
		spi      uint32
	}{{"out", pr.Local, pr.Remote, c.SPIOut}, {"in", pr.Remote, pr.Local, c.SPIIn}} {
		w := wantSA{peer: pr, dir: s.dir, src: s.src, dst: s.dst, spi: s.spi}
		l := live.sa(w.dst, w.spi)
		if l == nil {
			r.add("offload", false, "%s of peer %s (IKE) is not in the kernel", w, pr.Name)
			continue
		}
		got := offloadOf(l.Offload)
		st := SAStatus{Peer: pr.Name, Dir: s.dir, SPI: s.spi, Asked: pr.OffloadOut, Got: got, Packets: l.Packets, Bytes: l.Bytes,
			IKE: &IKESAInfo{Conn: conn, AgeSeconds: c.InstalledSecs, RekeyInSeconds: c.RekeyInSecs}}
		if l.Offload != nil {
			st.Dev = live.nameOf(l.Offload.Ifindex)
		}
		r.SAs = append(r.SAs, st)
		switch {
		case pr.OffloadOut == config.OffloadModeAuto:
			r.add("offload", true, "%s: offload auto obtained %s%s", w, got, onDev(st.Dev))
		case got == pr.OffloadOut && (got == config.OffloadModeNone || st.Dev == pr.OffloadDev):
			r.add("offload", true, "%s: offload %s%s as asked", w, got, onDev(st.Dev))
		default:
			r.add("offload", false, "%s: offload %s%s, but the file asks for %s%s", w, got, onDev(st.Dev), pr.OffloadOut, onDev(pr.OffloadDev))
		}
	}
}
