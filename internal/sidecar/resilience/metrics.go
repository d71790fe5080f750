package resilience

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/sidecar/perprovider"
)

// Metrics are the resilience layer's Prometheus metrics, labelled by
// provider. Create them once per registry and share them between the
// breakers and retriers of all providers, across reloads.
type Metrics struct {
	state              *prometheus.GaugeVec
	transitions        *prometheus.CounterVec
	droppedEvents      *prometheus.CounterVec
	retries            *prometheus.CounterVec
	budgetRefusals     *prometheus.CounterVec
	bulkheadRejections *prometheus.CounterVec
	bulkheadWaits      *prometheus.CounterVec
	bulkheadLimit      *prometheus.GaugeVec

	perprovider.Vecs // every vector above: registered, and forgotten (Forget)
}

// NewMetrics creates the metrics and registers them on reg unless reg is
// nil. It panics if they are already registered on reg (a wiring bug).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "repool_sidecar_breaker_state",
			Help: "Circuit breaker state per provider: 0 closed, 1 half-open, 2 open. Updated on transitions; an open breaker becomes half-open on the next call after its timeout.",
		}, []string{"provider"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_breaker_transitions_total",
			Help: "Circuit breaker state transitions.",
		}, []string{"provider", "from", "to"}),
		droppedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_breaker_events_dropped_total",
			Help: "Breaker transitions not logged because the log queue was full.",
		}, []string{"provider"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_retries_total",
			Help: "Retries of transient failures (attempts after the first).",
		}, []string{"provider"}),
		budgetRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_retry_budget_refusals_total",
			Help: "Retries refused because the provider's retry budget was spent.",
		}, []string{"provider"}),
		bulkheadRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_bulkhead_rejections_total",
			Help: "Attempts the bulkhead refused: the provider was slow or not answering and its attempts in flight were at the bulkhead's limit.",
		}, []string{"provider"}),
		bulkheadWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_bulkhead_waits_total",
			Help: "Attempts that found the bulkhead at its limit and waited for a slot (the provider was answering fast).",
		}, []string{"provider"}),
		bulkheadLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "repool_sidecar_bulkhead_limit",
			Help: "The bulkhead's current limit on attempts in flight to the provider (it follows the provider's latency, between min_in_flight and max_in_flight).",
		}, []string{"provider"}),
	}
	m.Vecs = perprovider.Vecs{m.state, m.transitions, m.droppedEvents, m.retries, m.budgetRefusals, m.bulkheadRejections, m.bulkheadWaits, m.bulkheadLimit}
	m.Register(reg)
	return m
}
