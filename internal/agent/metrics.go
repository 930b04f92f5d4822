// SPDX-License-Identifier: Apache-2.0

package agent

import (
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
	sas        *prometheus.GaugeVec
	peerSAs    *prometheus.GaugeVec
	saPackets  *prometheus.GaugeVec
	saCounting *prometheus.GaugeVec
	saFallback *prometheus.GaugeVec
	// rolloutState and rolloutFailures follow this host's part in a
	// staged rollout (rollout.go).
	rolloutState    *prometheus.GaugeVec
	rolloutFailures prometheus.Counter
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
	// No SPI in any label: an SPI changes at every rekey, and a series
	// per SPI would churn (and break alert durations) each time. The
	// SAs of one peer and direction (two during a rekey) are summed up.
	sa := []string{"peer", "dir"}
	m.sas = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sas",
		Help: "SAs of a peer and direction by the offload asked and the mode the kernel holds (packet, crypto, none)."}, append(sa, "asked", "mode", "device"))
	m.peerSAs = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_peer_sas",
		Help: "SAs the kernel holds for each desired peer and direction (in, out); 0: missing."}, sa)
	m.saPackets = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sa_packets",
		Help: "Packets counted by the current SAs of a peer and direction (drops when a rekeyed SA is deleted)."}, sa)
	m.saCounting = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sa_counting",
		Help: "SAs of a peer and direction whose own packet counter moved since the agent's previous look (for packet offload the driver reports it: the NIC's work)."}, sa)
	m.saFallback = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sa_offload_fallback",
		Help: "1 when an SA of a peer and direction holds less offload than asked, or the hardware does not count its traffic: the alarm."}, sa)
	m.rolloutState = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_agent_rollout_state",
		Help: "1 for this host's state in its overlay's staged rollout: Done, Waiting, Held (waiting behind a host that failed), Progressing, Failed."}, []string{"state"})
	m.rolloutFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_agent_rollout_failures_total",
		Help: "Times this host failed a staged rollout (its apply failed, or its tunnels did not come back in time): the hosts after it wait."})
	for _, c := range []prometheus.Collector{m.reconciles, m.duration, m.drift, m.peers, m.apiUp, m.lastApply, m.sas, m.peerSAs, m.saPackets, m.saCounting, m.saFallback, m.rolloutState, m.rolloutFailures} {
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

// truth sets the SA metrics from one look, per peer and direction:
// counts, packets and SAs counting are summed,
// the fallback alarm is raised by any SA. peers are the desired peers,
// each given its SA count even when it is 0 (the "SA missing" alert).
func (m *Metrics) truth(ts []SATruth, peers []string) {
	for _, v := range []*prometheus.GaugeVec{m.sas, m.peerSAs, m.saPackets, m.saCounting, m.saFallback} {
		v.Reset()
	}
	for _, p := range peers {
		for _, dir := range []string{"in", "out"} {
			m.peerSAs.WithLabelValues(p, dir).Set(0)
		}
	}
	for _, t := range ts {
		m.sas.WithLabelValues(t.Peer, t.Dir, t.Asked, t.Got, t.Dev).Inc()
		m.peerSAs.WithLabelValues(t.Peer, t.Dir).Inc()
		m.saPackets.WithLabelValues(t.Peer, t.Dir).Add(float64(t.Packets))
		c := m.saCounting.WithLabelValues(t.Peer, t.Dir)
		if t.Counting != nil && *t.Counting {
			c.Inc()
		} else {
			c.Add(0)
		}
		f := m.saFallback.WithLabelValues(t.Peer, t.Dir)
		if t.Fallback {
			f.Set(1)
		} else {
			f.Add(0) // present, 0, unless another SA raised it
		}
	}
}

// rolloutStates are the values of sluice_agent_rollout_state's label.
var rolloutStates = []string{"Done", "Waiting", "Held", "Progressing", "Failed"}

// rollout sets the rollout state: 1 for the current one, 0 for the
// others, so an alert's series stays the same across transitions ("" :
// in no rollout, no series).
func (m *Metrics) rollout(state, _ string) {
	if state == "" {
		m.rolloutState.Reset()
		return
	}
	for _, s := range rolloutStates {
		m.rolloutState.WithLabelValues(s).Set(b2f(s == state))
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
