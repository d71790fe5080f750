// Package perprovider holds what the sidecar's layers share about their
// Prometheus metrics: every vector is labelled by provider, registered
// once per registry, and a removed provider's series are forgotten in all
// of them at once.
package perprovider

import "github.com/prometheus/client_golang/prometheus"

// Vec is a metric vector labelled by provider.
type Vec interface {
	prometheus.Collector
	DeletePartialMatch(prometheus.Labels) int
}

// Vecs are one layer's metric vectors. A layer's Metrics embeds them, so
// that its Forget is this one.
type Vecs []Vec

// Register registers every vector on reg unless reg is nil. It panics if
// one is already registered on reg (a wiring bug).
func (v Vecs) Register(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, c := range v {
		reg.MustRegister(c)
	}
}

// Forget drops the series of a provider that was removed.
func (v Vecs) Forget(provider string) {
	l := prometheus.Labels{"provider": provider}
	for _, c := range v {
		c.DeletePartialMatch(l)
	}
}
