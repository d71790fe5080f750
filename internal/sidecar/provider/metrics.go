package provider

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/repool/repool/internal/sidecar/perprovider"
)

// numCodes is the number of gRPC codes (OK to UNAUTHENTICATED).
const numCodes = 17

// Metrics are the per-call metrics of all providers. Create them once per
// registry and share them between providers, across reloads.
type Metrics struct {
	calls     *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	fastFails *prometheus.CounterVec

	perprovider.Vecs // every vector above: registered, and forgotten (Forget)
}

// NewMetrics creates the metrics and registers them on reg unless reg is
// nil. It panics if they are already registered on reg (a wiring bug).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_calls_total",
			Help: "Logical calls to a provider (retries included in one call), by method and final gRPC code; a call rejected by an open breaker counts as Unavailable.",
		}, []string{"provider", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "repool_sidecar_call_duration_seconds",
			Help:    "Duration of logical calls to a provider, retries included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"provider", "method"}),
		fastFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_sidecar_fast_fails_total",
			Help: "Calls failed fast, by reason: circuit-open (rejected without a network call), timeout, upstream (5xx-class answer after retries).",
		}, []string{"provider", "reason"}),
	}
	m.Vecs = perprovider.Vecs{m.calls, m.duration, m.fastFails}
	m.Register(reg)
	return m
}

// series are one provider's metric children, resolved on first use so that
// the hot path does no label look-up and creates no series it never uses.
type series struct {
	m        *Metrics
	provider string
	calls    [numMethods][numCodes]atomic.Pointer[prometheus.Counter]
	duration [numMethods]atomic.Pointer[prometheus.Observer]
	fastFail map[string]prometheus.Counter // by reason; fixed after creation
}

func newSeries(m *Metrics, provider string, reasons ...string) *series {
	s := &series{m: m, provider: provider, fastFail: make(map[string]prometheus.Counter, len(reasons))}
	for _, r := range reasons {
		s.fastFail[r] = m.fastFails.WithLabelValues(provider, r)
	}
	return s
}

func (s *series) call(method Method, code codes.Code) prometheus.Counter {
	if code >= numCodes {
		code = codes.Unknown
	}
	slot := &s.calls[method][code]
	if c := slot.Load(); c != nil {
		return *c
	}
	c := s.m.calls.WithLabelValues(s.provider, method.String(), code.String())
	slot.Store(&c)
	return c
}

func (s *series) observer(method Method) prometheus.Observer {
	slot := &s.duration[method]
	if o := slot.Load(); o != nil {
		return *o
	}
	o := s.m.duration.WithLabelValues(s.provider, method.String())
	slot.Store(&o)
	return o
}
