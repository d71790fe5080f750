package server

import (
	"fmt"
	"strings"
	"testing"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// TestDemoTenantRunsAtFullSpeed: the demo tenant of a first start gets a
// local request limit (stored and audited as an operator's would be), the
// banner says so, and a local loop of 500 acquire/release cycles is never
// refused by it; a tenant created later gets the server defaults.
func TestDemoTenantRunsAtFullSpeed(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t)})
	if !strings.Contains(r.out, fmt.Sprintf("its request limit is %d/s, burst %d", DemoRatePerSecond, DemoBurst)) {
		t.Fatalf("first start printed %q, want the demo tenant's limit", r.out)
	}
	var lim struct {
		Effective struct {
			RatePerSecond float64 `json:"rate_per_second"`
			Burst         int     `json:"burst"`
		} `json:"effective"`
	}
	if code := r.api(t, "GET", "/api/v1/tenants/demo/limits", r.op, "", &lim); code != 200 || lim.Effective.RatePerSecond != DemoRatePerSecond || lim.Effective.Burst != DemoBurst {
		t.Fatalf("demo limits = %d %+v, want %d/s burst %d", code, lim, DemoRatePerSecond, DemoBurst)
	}
	var audit struct {
		Entries []struct{ Actor, Action string }
	}
	r.api(t, "GET", "/api/v1/tenants/demo/audit", r.op, "", &audit)
	found := false
	for _, e := range audit.Entries {
		found = found || (e.Actor == "bootstrap" && e.Action == "limits.put")
	}
	if !found {
		t.Fatalf("audit = %+v, want the bootstrap's limits.put", audit)
	}
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "p1"}, {Id: "p2"}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		l, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "search", TtlSeconds: 30})
		if err != nil {
			t.Fatalf("cycle %d: Acquire = %v", i, err)
		}
		if _, err := r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
			t.Fatalf("cycle %d: Release = %v", i, err)
		}
	}
	if code := r.api(t, "POST", "/api/v1/tenants", r.op, `{"id":"acme","name":"Acme"}`, nil); code != 201 {
		t.Fatalf("create tenant = %d", code)
	}
	if code := r.api(t, "GET", "/api/v1/tenants/acme/limits", r.op, "", &lim); code != 200 || lim.Effective.RatePerSecond == DemoRatePerSecond {
		t.Fatalf("acme limits = %d %+v, want the server defaults", code, lim)
	}
}
