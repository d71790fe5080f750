package dataplane

import (
	"testing"

	"google.golang.org/grpc/codes"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// TestLatencyThroughEveryCall: latency_ms on a unary Release, a Release
// with next, a Report and a Release on the Leases stream each reach the
// pool, which GetResource shows as the cell's mean; a latency without an
// outcome, or above 24 hours, is refused and releases nothing.
func TestLatencyThroughEveryCall(t *testing.T) {
	e, _ := newSwitchEnv(t)
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}}); err != nil {
		t.Fatal(err)
	}
	latencyOf := func() float64 {
		t.Helper()
		got, err := e.client.GetResource(a, &repoolv1.GetResourceRequest{Id: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		return got.GetResource().GetContexts()[0].GetLatencyMs()
	}
	acq, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	l := acq.GetLease()
	for name, req := range map[string]*repoolv1.ReleaseRequest{
		"latency without an outcome": {LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), LatencyMs: 100},
		"latency above 24 hours":     {LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS, LatencyMs: 86_400_001},
	} {
		_, err := e.client.Release(a, req)
		wantCode(t, name, err, codes.InvalidArgument)
	}
	p, _ := e.pools.Pool("a")
	if p.ActiveLeases() != 1 {
		t.Fatal("a refused latency released the lease")
	}
	// Unary Release with next: 100ms.
	resp, err := e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(),
		Outcome: repoolv1.Outcome_SUCCESS, LatencyMs: 100, Next: &repoolv1.NextLease{Context: "x", TtlSeconds: 60}})
	if err != nil {
		t.Fatal(err)
	}
	if got := latencyOf(); got < 99.9 || got > 100.1 {
		t.Fatalf("latency after Release(next, 100ms) = %vms, want 100", got)
	}
	// Report: 300ms; the mean of 100 and 300 is 200.
	if _, err := e.client.Report(a, &repoolv1.ReportRequest{ResourceId: "r1", Context: "x", Outcome: repoolv1.Outcome_SUCCESS, LatencyMs: 300}); err != nil {
		t.Fatal(err)
	}
	if got := latencyOf(); got < 199.9 || got > 200.1 {
		t.Fatalf("latency after Report(300ms) = %vms, want 200", got)
	}
	// The Leases stream: a plain Release of 500ms; (100+300+500)/3 = 300.
	st := openLeases(t, e, "key-a")
	next := resp.GetNext().GetLease()
	call := releaseCall(next, repoolv1.Outcome_FAILURE, nil)
	call.GetRelease().LatencyMs = 500
	if reply, err := do(st, call); err != nil || reply.GetRelease() == nil {
		t.Fatalf("stream release = %v, %v", reply, err)
	}
	if got := latencyOf(); got < 299.9 || got > 300.1 {
		t.Fatalf("latency after the stream's Release(500ms) = %vms, want 300", got)
	}
}
