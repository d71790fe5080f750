package perprovider

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestForget: Forget drops one provider's series in every vector and
// keeps the others'.
func TestForget(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a_total", Help: "a"}, []string{"provider"})
	b := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "b", Help: "b"}, []string{"provider", "x"})
	v := Vecs{a, b}
	v.Register(reg)
	v.Register(nil) // no registry: nothing to do
	for _, p := range []string{"eu", "us"} {
		a.WithLabelValues(p).Inc()
		b.WithLabelValues(p, "1").Set(1)
	}
	v.Forget("eu")
	if n := testutil.CollectAndCount(reg); n != 2 {
		t.Fatalf("series after Forget(eu) = %d, want us's 2", n)
	}
	if got := testutil.ToFloat64(a.WithLabelValues("us")); got != 1 {
		t.Fatalf("us's counter = %v, want 1", got)
	}
}
