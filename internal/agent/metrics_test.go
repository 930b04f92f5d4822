// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The SA metrics carry no SPI (an SPI changes at every rekey: a label of
// it would start new series, and reset every alert's "for", each time):
// a rekey, old and new SA side by side, then the old one gone, keeps the
// same series. A desired peer without SAs shows as 0 (the "SA missing"
// alert), and one SA that fell back raises its peer's alarm.
func TestMetricsNoSPIAndPerPeer(t *testing.T) {
	m := NewMetrics()
	yes, no := true, false
	before := []SATruth{
		{Peer: "hv-b", Dir: "out", SPI: 0xc1, Asked: "packet", Got: "packet", Dev: "eth0", Packets: 10, Counting: &yes},
		{Peer: "hv-b", Dir: "in", SPI: 0xc2, Asked: "packet", Got: "packet", Dev: "eth0", Packets: 7},
	}
	m.truth(before, []string{"hv-b", "hv-c"})
	series := func() string {
		var b strings.Builder
		mfs, _ := m.Registry.Gather()
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				b.WriteString(mf.GetName())
				for _, l := range mt.GetLabel() {
					if l.GetName() == "spi" {
						t.Errorf("%s has an spi label", mf.GetName())
					}
					b.WriteString(" " + l.GetName() + "=" + l.GetValue())
				}
				b.WriteString("\n")
			}
		}
		return b.String()
	}
	first := series()
	// Rekey: a second SA of each direction, then the old ones deleted.
	rekey := append(append([]SATruth{}, before...),
		SATruth{Peer: "hv-b", Dir: "out", SPI: 0xd1, Asked: "packet", Got: "packet", Dev: "eth0", Packets: 1, Counting: &no},
		SATruth{Peer: "hv-b", Dir: "in", SPI: 0xd2, Asked: "packet", Got: "crypto", Dev: "eth0", Packets: 1, Fallback: true})
	m.truth(rekey, []string{"hv-b", "hv-c"})
	if got := value(t, m.peerSAs.WithLabelValues("hv-b", "out")); got != 2 {
		t.Errorf("hv-b out during the rekey: %v SAs, want 2", got)
	}
	if got := value(t, m.saCounting.WithLabelValues("hv-b", "out")); got != 1 {
		t.Errorf("hv-b out: %v SAs counting with one of two moving, want 1", got)
	}
	if got := value(t, m.saFallback.WithLabelValues("hv-b", "in")); got != 1 {
		t.Errorf("hv-b in fallback %v with one SA on crypto, want 1", got)
	}
	after := []SATruth{
		{Peer: "hv-b", Dir: "out", SPI: 0xd1, Asked: "packet", Got: "packet", Dev: "eth0", Packets: 30, Counting: &yes},
		{Peer: "hv-b", Dir: "in", SPI: 0xd2, Asked: "packet", Got: "packet", Dev: "eth0", Packets: 20},
	}
	m.truth(after, []string{"hv-b", "hv-c"})
	if s := series(); s != first {
		t.Errorf("the series changed across a rekey:\nbefore:\n%s\nafter:\n%s", first, s)
	}
	if got := value(t, m.peerSAs.WithLabelValues("hv-c", "in")); got != 0 {
		t.Errorf("hv-c (no SA) in: %v, want 0", got)
	}
	if !strings.Contains(first, "sluice_peer_sas dir=in peer=hv-c") {
		t.Errorf("no series for a desired peer without SAs:\n%s", first)
	}
}

// value reads one gauge.
func value(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var out dto.Metric
	if err := g.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetGauge().GetValue()
}
