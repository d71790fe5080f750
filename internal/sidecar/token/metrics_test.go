package token

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// counterSum sums a counter family of m over all labels.
func counterSum(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	m.Register(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, mt := range mf.GetMetric() {
				sum += mt.GetCounter().GetValue()
			}
		}
	}
	return sum
}
