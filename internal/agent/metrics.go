// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the agent's Prometheus metrics (docs/fleet.md lists them).
type Metrics struct {
	Registry   *prometheus.Registry
	reconciles *prometheus.CounterVec
	duration   prometheus.Histogram
	drift      prometheus.Counter
	peers      prometheus.Gauge
	apiUp      prometheus.Gauge
	lastApply  prometheus.Gauge
	saMode     *prometheus.GaugeVec
	saPackets  *prometheus.GaugeVec
	saInStep   *prometheus.GaugeVec
	saFallback *prometheus.GaugeVec
}

// NewMetrics registers the metrics in a registry of their own (several
// agents may run in one test process).
func NewMetrics() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.Registry.MustRegister(c) }
	m.reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_agent_reconciles_total",
		Help: "Reconciles by result: Applied, NothingToDo, Refused, Failed, Orphaned, TornDown."}, []string{"result"})
	m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_agent_reconcile_seconds",
		Help: "Time of one reconcile (render, plan, apply, verify).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)})
	m.drift = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_agent_drift_repairs_total",
		Help: "Reconciles that found the host moved away from the applied state, and put it back."})
	m.peers = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_agent_peers", Help: "Peers in the desired state."})
	m.apiUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_agent_api_up",
		Help: "1 when the last request to the Kubernetes API succeeded (an outage changes nothing on the data path)."})
	m.lastApply = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_agent_last_apply_timestamp_seconds",
		Help: "When the host last reached its desired state."})
	sa := []string{"peer", "dir", "spi"}
	m.saMode = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sa_offload_info",
		Help: "1 per SA with the offload asked and the mode the kernel holds (packet, crypto, none)."}, append(sa, "asked", "mode", "device"))
	m.saPackets = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sa_packets",
		Help: "Packets the SA counted (its lifetime counter)."}, sa)
	m.saInStep = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sa_hardware_in_step",
		Help: "1 when the device's IPsec counters moved with the SA's traffic, 0 when they did not (absent: cannot tell)."}, sa)
	m.saFallback = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sa_offload_fallback",
		Help: "1 when the SA holds less offload than asked, or the hardware does not count its traffic: the alarm."}, sa)
	for _, c := range []prometheus.Collector{m.reconciles, m.duration, m.drift, m.peers, m.apiUp, m.lastApply, m.saMode, m.saPackets, m.saInStep, m.saFallback} {
		f(c)
	}
	return m
}

func (m *Metrics) observe(o Outcome, d time.Duration, peers int) {
	m.reconciles.WithLabelValues(o.Result).Inc()
	m.duration.Observe(d.Seconds())
	m.peers.Set(float64(peers))
	if o.Drift && o.Steps > 0 {
		m.drift.Inc()
	}
	if o.Result == ResultApplied || o.Result == ResultNothingToDo {
		m.lastApply.SetToCurrentTime()
	}
}

func (m *Metrics) truth(ts []SATruth) {
	m.saMode.Reset()
	m.saPackets.Reset()
	m.saInStep.Reset()
	m.saFallback.Reset()
	for _, t := range ts {
		spi := fmt.Sprintf("0x%08x", t.SPI)
		m.saMode.WithLabelValues(t.Peer, t.Dir, spi, t.Asked, t.Got, t.Dev).Set(1)
		m.saPackets.WithLabelValues(t.Peer, t.Dir, spi).Set(float64(t.Packets))
		if t.InStep != nil {
			m.saInStep.WithLabelValues(t.Peer, t.Dir, spi).Set(b2f(*t.InStep))
		}
		m.saFallback.WithLabelValues(t.Peer, t.Dir, spi).Set(b2f(t.Fallback))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
