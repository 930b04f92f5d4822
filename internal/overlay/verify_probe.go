// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/driverquirk"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// The subnet probe of `verify --traffic` (issue 31): the driver table
// says mlx5 before 6.15 matches a policy's selector addresses exactly
// (driverquirk.ExactSelectorMatch), but vendor kernels backport, so the
// release cannot say. The probe asks the device: it sends datagrams to an
// address inside a subnet selector that is not its network address, from
// this host's address inside the local selector, and reads the device's
// ESP transmit counter. A device that matches subnets encrypts them (the
// counter rises by at least as many); one that matches exactly sends
// them in cleartext (it does not). The datagrams carry only the text
// "sluice verify subnet probe" to the discard port, so a leaking device
// leaks nothing but that.

// probeCount is how many datagrams one probe sends (at 100 per second).
const probeCount = 20

// subnetProbe is one probe: the OUT SA's device and selector.
type subnetProbe struct {
	peer     string
	selector int
	sel      config.Selector
	src, dst netip.Addr
	dev      string
	spi      uint32
	saDst    netip.Addr
}

// planSubnetProbes picks a probe per packet-offloaded OUT SA whose peer
// has a tunnel-mode selector wider than one host; a selector it cannot
// probe is reported as a failed check (with why and what to do), so a
// leak is never passed over in silence.
func planSubnetProbes(h *config.Host, live *Live, r *VerifyReport) []subnetProbe {
	var out []subnetProbe
	for _, st := range r.SAs {
		if st.Dir != "out" || st.Got != config.OffloadModePacket || st.Dev == "" {
			continue
		}
		pr := peerNamed(h, st.Peer)
		if pr == nil || pr.Mode != config.ModeTunnel {
			continue
		}
		for i, s := range pr.Selectors {
			if isHost(s.Remote) && isHost(s.Local) {
				continue
			}
			dst, ok := probeTarget(s.Remote)
			if !ok {
				dst = s.Remote.Addr()
			}
			src, ok := live.addrIn(s.Local)
			if !ok {
				r.add("probe", false, "peer %s selectors[%d] %s -> %s: no address of this host is inside %s, so the subnet probe cannot be sent from here. Send traffic from a host in %s to %s and watch `ethtool -S %s` (its ESP transmit counter must rise), or use /32 selectors",
					pr.Name, i, s.Local, s.Remote, s.Local, s.Local, dst, st.Dev)
				continue
			}
			out = append(out, subnetProbe{peer: pr.Name, selector: i, sel: s, src: src, dst: dst, dev: st.Dev, spi: st.SPI, saDst: pr.Remote})
		}
	}
	return out
}

// probeTarget is the first address of p after its network address (the
// one address an exact-match device would encrypt); false for a host.
func probeTarget(p netip.Prefix) (netip.Addr, bool) {
	if isHost(p) {
		return netip.Addr{}, false
	}
	a := p.Masked().Addr().Next()
	return a, a.IsValid() && p.Contains(a)
}

// addrIn returns an address of this host inside p.
func (l *Live) addrIn(p netip.Prefix) (netip.Addr, bool) {
	for _, k := range l.Links {
		for _, a := range k.Addrs {
			if p.Contains(a.Addr()) {
				return a.Addr(), true
			}
		}
	}
	return netip.Addr{}, false
}

func peerNamed(h *config.Host, name string) *config.Peer {
	if h.IPsec == nil {
		return nil
	}
	for i := range h.IPsec.Peers {
		if h.IPsec.Peers[i].Name == name {
			return &h.IPsec.Peers[i]
		}
	}
	return nil
}

// isESPTxCounter picks a device's ESP transmit packet counter out of
// `ethtool -S`: mlx5's ipsec_tx_pkts, the NIC model's tx_ipsec_packets.
func isESPTxCounter(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "ipsec") && strings.Contains(n, "tx") &&
		(strings.Contains(n, "pkts") || strings.Contains(n, "packets")) &&
		!strings.Contains(n, "drop") && !strings.Contains(n, "crypto") && !strings.Contains(n, "err")
}

// espTx sums dev's ESP transmit counters; false without any.
func espTx(stats map[string]uint64) (uint64, bool) {
	var sum uint64
	found := false
	for k, v := range stats {
		if isESPTxCounter(k) {
			sum += v
			found = true
		}
	}
	return sum, found
}

// probeCounts are the rises a probe reads: the device's ESP transmit
// counter (hasESP false when ethtool -S has none), the OUT SA's packet
// count (packet-offload drivers report it from the device), and the
// device's transmitted packets, ESP or not.
type probeCounts struct {
	esp     uint64
	hasESP  bool
	sa, all uint64
}

// judgeProbe grades a probe: the datagrams left the device (all) and
// were encrypted (esp, else sa) or not. ok is false for a leak and for
// a probe that did not reach the device (inconclusive: said so).
func judgeProbe(p subnetProbe, c probeCounts) (bool, string) {
	devRise, hasDev, saRise := c.esp, c.hasESP, c.sa
	rise, what := devRise, fmt.Sprintf("%s's ESP transmit counter", p.dev)
	if !hasDev {
		rise, what = saRise, fmt.Sprintf("SA out spi %#x's packet count (%s has no ESP counter in ethtool -S)", p.spi, p.dev)
	}
	head := fmt.Sprintf("peer %s selectors[%d] %s -> %s: %d probe datagrams %s -> %s (inside the selector, not its network address)",
		p.peer, p.selector, p.sel.Local, p.sel.Remote, probeCount, p.src, p.dst)
	if c.all < probeCount {
		return false, fmt.Sprintf("%s: inconclusive: %s transmitted only %d packets, so the probe did not reach it (on 6.12 locally generated tunnel-mode traffic needs a neighbour entry for the inner destination %s on the link: add one, e.g. `ip neigh add %s lladdr PEER-MAC dev %s nud permanent`, or probe from a host behind the tunnel)",
			head, p.dev, c.all, p.dst, p.dst, p.dev)
	}
	if rise >= probeCount {
		return true, fmt.Sprintf("%s: %s rose by %d: the device encrypts the whole subnet (other traffic in the window can add to the count: probe a quiet tunnel)", head, what, rise)
	}
	return false, fmt.Sprintf("%s: %s rose by only %d: the device matches the selector's addresses exactly (%s) and the rest of the subnet leaves in cleartext. Fix: one policy per host (/32 selectors), or a kernel with \"net/mlx5e: Properly match IPsec subnet addresses\"",
		head, what, rise, driverquirk.ExactSelectorMatch)
}

// ProbeSubnets runs the subnet probes of `verify --traffic` and adds a
// "probe" check per selector (nothing when no peer has a subnet selector
// with packet offload).
func ProbeSubnets(h *config.Host, live *Live, r *VerifyReport) error {
	for _, p := range planSubnetProbes(h, live, r) {
		before, err := kernel.EthtoolStats(p.dev)
		if err != nil {
			before = nil
		}
		txBefore, err := kernel.LinkTxPackets(p.dev)
		if err != nil {
			return err
		}
		saBefore, err := outSAPackets(p)
		if err != nil {
			return err
		}
		if err := sendProbe(p); err != nil {
			r.add("probe", false, "peer %s selectors[%d]: the probe could not be sent: %v", p.peer, p.selector, err)
			continue
		}
		time.Sleep(200 * time.Millisecond) // the device's counters lag its queue
		after, _ := kernel.EthtoolStats(p.dev)
		txAfter, err := kernel.LinkTxPackets(p.dev)
		if err != nil {
			return err
		}
		saAfter, err := outSAPackets(p)
		if err != nil {
			return err
		}
		b, hasB := espTx(before)
		a, hasA := espTx(after)
		ok, what := judgeProbe(p, probeCounts{esp: a - b, hasESP: hasA && hasB, sa: saAfter - saBefore, all: txAfter - txBefore})
		r.add("probe", ok, "%s", what)
	}
	return nil
}

func outSAPackets(p subnetProbe) (uint64, error) {
	sas, err := xfrm.StateDetails(false)
	if err != nil {
		return 0, err
	}
	for _, s := range sas {
		if s.SPI == p.spi && s.Dst == p.saDst && s.Proto == xfrm.ProtoESP {
			return s.Packets, nil
		}
	}
	return 0, nil
}

// sendProbe sends probeCount datagrams from p.src to p.dst:9.
func sendProbe(p subnetProbe) error {
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.src, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.dst, 9)))
	if err != nil {
		return err
	}
	defer c.Close()
	payload := []byte("sluice verify subnet probe")
	for range probeCount {
		_, _ = c.Write(payload) // an ICMP error from the far side is expected
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}
