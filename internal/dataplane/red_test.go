package dataplane

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// TestREDSeriesFromTheStart: before any call, every data-plane method has
// its count and duration series of code OK at 0 (an alert's rate over
// them sees the first call); a call is counted and timed under its method
// and code, a refusal under its own code.
func TestREDSeriesFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) { c.Metrics = reg })
	methods := len(repoolv1.PoolService_ServiceDesc.Methods) + len(repoolv1.PoolService_ServiceDesc.Streams) +
		len(repoolv1.AuthService_ServiceDesc.Methods)
	if got := testutil.CollectAndCount(e.svc.requests); got != methods {
		t.Fatalf("repool_grpc_requests_total has %d series before any call, want %d (one per method)", got, methods)
	}
	if got := testutil.CollectAndCount(e.svc.duration); got != methods {
		t.Fatalf("repool_grpc_server_handling_seconds has %d series before any call, want %d", got, methods)
	}
	if _, err := e.client.Register(as("key-a"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.Register(as("no-such-key"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r2"}}})
	wantCode(t, "Register with an unknown key", err, codes.Unauthenticated)
	count := func(code string) uint64 {
		t.Helper()
		var m dto.Metric
		if err := e.svc.duration.WithLabelValues(repoolv1.PoolService_Register_FullMethodName, code).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	if ok, unauth := count("OK"), count("Unauthenticated"); ok != 1 || unauth != 1 {
		t.Fatalf("Register's durations: %d OK, %d Unauthenticated; want 1 each", ok, unauth)
	}
	if got := testutil.ToFloat64(e.svc.requests.WithLabelValues(repoolv1.PoolService_Register_FullMethodName, "OK")); got != 1 {
		t.Fatalf("Register's OK count = %v, want 1", got)
	}
}

// BenchmarkCount is what counting and timing one successful call costs on
// the hot path: two clock reads, a map look-up, a counter and a histogram.
func BenchmarkCount(b *testing.B) {
	s := &Service{}
	s.requests, s.duration, s.ok = newRED()
	for b.Loop() {
		s.count(repoolv1.PoolService_Acquire_FullMethodName, nil, time.Now())
	}
}
