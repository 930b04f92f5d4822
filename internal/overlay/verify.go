// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// VerifyCheck is one verification and its verdict.
type VerifyCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// SAStatus is one SA as verify found it.
type SAStatus struct {
	Peer    string `json:"peer"`
	Dir     string `json:"dir"`
	SPI     uint32 `json:"spi"`
	Asked   string `json:"offload_asked"`
	Got     string `json:"offload"`
	Dev     string `json:"offload_dev,omitempty"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Delta is the packets counted during the traffic window.
	Delta *uint64 `json:"packets_during_window,omitempty"`
	// For SAs keyed by IKE: their connection, age and next rekey.
	IKE *IKESAInfo `json:"ike,omitempty"`
}

// VerifyReport is the result of verify.
type VerifyReport struct {
	OK     bool          `json:"ok"`
	Checks []VerifyCheck `json:"checks"`
	SAs    []SAStatus    `json:"sas,omitempty"`
	// Counters are the driver's IPsec counters (ethtool -S, names with
	// "ipsec") that rose during the traffic window, per device.
	Counters map[string]map[string]uint64 `json:"ethtool_ipsec_deltas,omitempty"`
}

func (r *VerifyReport) add(name string, ok bool, format string, args ...any) {
	r.Checks = append(r.Checks, VerifyCheck{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	if !ok {
		r.OK = false
	}
}

// Verify checks that the live host matches the file: no step left to
// apply, every SA installed with the offload asked for (auto: reports
// which), and every VTEP's traffic covered by an SA pair.
func Verify(h *config.Host, keys *config.Keys, live *Live) *VerifyReport {
	r := &VerifyReport{OK: true}
	plan, err := NewPlan(h, keys, live)
	switch {
	case err != nil:
		r.add("plan", false, "%v", err)
	case plan.Empty():
		r.add("state", true, "the host matches %s: nothing to apply", h.File)
	default:
		for _, s := range plan.Steps {
			r.add("state", false, "%s %s: %s (apply would run: %s)", s.Action, s.Object, s.Why, strings.Join(s.Commands, " && "))
		}
	}
	// Encryption coverage of every VTEP.
	for _, v := range h.VTEPs {
		for _, rm := range v.Remotes {
			if covers0(h, v.Local, rm.Address) {
				r.add("encrypted", true, "VTEP %s %s -> %s is covered by an ipsec peer", v.Name, v.Local, rm.Address)
			} else {
				r.add("encrypted", false, "VTEP %s %s -> %s: no ipsec peer covers it: its traffic is in clear", v.Name, v.Local, rm.Address)
			}
		}
	}
	if h.IPsec == nil {
		return r
	}
	for i := range h.IPsec.Peers {
		pr := &h.IPsec.Peers[i]
		if pr.Keying == config.KeyingIKE {
			verifyIKEPeer(r, h, pr, live) // verify_ike.go
			continue
		}
		for _, w := range []wantSA{
			{peer: pr, dir: "out", src: pr.Local, dst: pr.Remote, spi: pr.SPIOut},
			{peer: pr, dir: "in", src: pr.Remote, dst: pr.Local, spi: pr.SPIIn},
		} {
			l := live.sa(w.dst, w.spi)
			if l == nil {
				r.add("offload", false, "%s of peer %s is missing", w, pr.Name)
				continue
			}
			got := offloadOf(l.Offload)
			asked := pr.OffloadFor(w.dir)
			st := SAStatus{Peer: pr.Name, Dir: w.dir, SPI: w.spi, Asked: asked, Got: got, Packets: l.Packets, Bytes: l.Bytes}
			if l.Offload != nil {
				st.Dev = live.nameOf(l.Offload.Ifindex)
			}
			r.SAs = append(r.SAs, st)
			switch {
			case !verifyBondPort(r, live, pr, w, st): // plan_bond_packet.go
			case asked == config.OffloadModeAuto:
				r.add("offload", true, "%s: offload auto obtained %s%s", w, got, onDev(st.Dev))
			case got == asked:
				r.add("offload", true, "%s: offload %s%s as asked", w, got, onDev(st.Dev))
			default:
				r.add("offload", false, "%s: offload %s%s, but the file asks for %s", w, got, onDev(st.Dev), asked)
			}
		}
	}
	return r
}

func onDev(d string) string {
	if d == "" {
		return ""
	}
	return " on " + d
}

// VerifyTraffic samples the SA counters and the offload devices' ethtool
// IPsec counters, waits window while traffic flows (the caller's, or UDP
// datagrams sent to sendTo:9 during the window), samples again and checks
// that every SA of the file counted packets: traffic that reached the
// peer without its SAs counting was not encrypted by them.
func VerifyTraffic(h *config.Host, r *VerifyReport, window time.Duration, sendTo string) error {
	if h.IPsec == nil || len(h.IPsec.Peers) == 0 {
		r.add("traffic", false, "the file has no ipsec peers: nothing to count")
		return nil
	}
	devs := map[string]bool{}
	for _, st := range r.SAs {
		if st.Dev != "" { // the SA's device: a bond's port for packet offload
			devs[st.Dev] = true
		}
	}
	before, err := xfrm.StateDetails(false)
	if err != nil {
		return err
	}
	eb := ethtoolIPsec(devs)
	done := make(chan error, 1)
	if sendTo != "" {
		go func() { done <- sendUDP(sendTo, window) }()
	}
	time.Sleep(window)
	var genErr error
	if sendTo != "" {
		genErr = <-done
	}
	after, err := xfrm.StateDetails(false)
	if err != nil {
		return err
	}
	ea := ethtoolIPsec(devs)
	count := func(sas []xfrm.StateDetail, st SAStatus, dst string) (uint64, bool) {
		for _, s := range sas {
			if s.SPI == st.SPI && s.Dst.String() == dst && s.Proto == protoESP {
				return s.Packets, true
			}
		}
		return 0, false
	}
	for i := range r.SAs {
		st := &r.SAs[i]
		var pr *config.Peer
		for j := range h.IPsec.Peers {
			if h.IPsec.Peers[j].Name == st.Peer {
				pr = &h.IPsec.Peers[j]
			}
		}
		dst := pr.Remote.String()
		if st.Dir == "in" {
			dst = pr.Local.String()
		}
		b, ok1 := count(before, *st, dst)
		a, ok2 := count(after, *st, dst)
		if !ok1 || !ok2 {
			r.add("traffic", false, "SA %s spi %#x of %s disappeared during the window", st.Dir, st.SPI, st.Peer)
			continue
		}
		d := a - b
		st.Delta = &d
		r.add("traffic", d > 0, "SA %s spi %#x of %s: %d packets in %s", st.Dir, st.SPI, st.Peer, d, window)
	}
	r.Counters = map[string]map[string]uint64{}
	for dev, a := range ea {
		for name, v := range a {
			if d := v - eb[dev][name]; d > 0 {
				if r.Counters[dev] == nil {
					r.Counters[dev] = map[string]uint64{}
				}
				r.Counters[dev][name] = d
			}
		}
	}
	if genErr != nil {
		r.add("traffic", false, "the traffic generator failed: %v", genErr)
	}
	return nil
}

// ethtoolIPsec reads the "ipsec" counters of devs (none when a device has
// no such counters: netdevsim and software devices).
func ethtoolIPsec(devs map[string]bool) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	names := make([]string, 0, len(devs))
	for d := range devs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		m, err := kernel.EthtoolIPsecStats(d)
		if err != nil {
			continue
		}
		out[d] = m
	}
	return out
}

// sendUDP sends small datagrams to addr:9 (discard) for d, 50 per second;
// the peer's ICMP port-unreachable replies cross the other SA.
func sendUDP(addr string, d time.Duration) error {
	c, err := net.Dial("udp", net.JoinHostPort(addr, "9"))
	if err != nil {
		return fmt.Errorf("--send-to %s: %w", addr, err)
	}
	defer c.Close()
	end := time.Now().Add(d - 200*time.Millisecond)
	payload := []byte("sluice verify --traffic")
	for time.Now().Before(end) {
		_, _ = c.Write(payload) // ICMP errors from the peer are expected
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
