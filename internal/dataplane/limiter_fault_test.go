package dataplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/ratelimit"
)

// brokenBackend is a rate-limit backend that cannot decide (a distributed
// limiter whose store is down).
type brokenBackend struct{}

func (brokenBackend) Take(context.Context, string, int, time.Time) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, errors.New("limiter store unreachable")
}
func (brokenBackend) Set(string, float64, int, time.Time) error { return nil }
func (brokenBackend) Forget(string)                             {}

func TestLimiterFaultFailsOpenAndIsCounted(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	lim, err := ratelimit.New(ratelimit.Config{Backend: brokenBackend{}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	e.svc.cfg.Limiter = lim
	for i := 0; i < 3; i++ {
		if _, err := e.client.Register(as("key-a"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
			t.Fatalf("Register() with a broken limiter = %v, want success (fail open)", err)
		}
	}
	n, err := testutil.GatherAndCount(reg, "repool_ratelimit_errors_total")
	if err != nil || n != 1 {
		t.Fatalf("repool_ratelimit_errors_total series = %d, %v", n, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		switch mf.GetName() {
		case "repool_ratelimit_errors_total":
			if got := mf.GetMetric()[0].GetCounter().GetValue(); got != 3 {
				t.Fatalf("repool_ratelimit_errors_total = %v, want 3", got)
			}
		case "repool_ratelimit_rejected_total":
			for _, m := range mf.GetMetric() {
				if m.GetCounter().GetValue() != 0 {
					t.Fatalf("faults counted as rejections: %v", m)
				}
			}
		}
	}
}
