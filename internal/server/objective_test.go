package server

import (
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/tenants"
)

// TestTenantObjectiveAppliesLive: a tenant-admin's objective
// success_per_time is applied to the running pool at once (a resource as
// reliable as another but 10× slower stops being leased) and again after
// a restart; null gives the server-wide success back.
func TestTenantObjectiveAppliesLive(t *testing.T) {
	st := sqliteStore(t)
	cfg := Config{Store: st, Limits: requestLimit(1e6, 1e6), Policy: tenants.Policy{}}
	r := start(t, cfg)
	admin, _, err := control.MintToken(r.s.signer, control.RoleTenantAdmin, "demo", time.Hour)
	if err != nil {
		t.Fatalf("MintToken() = got error %v, want nil", err)
	}
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "fast"}, {Id: "slow"}}}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		for id, ms := range map[string]uint32{"fast": 100, "slow": 1000} {
			if _, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: id, Context: "search", Outcome: repoolv1.Outcome_SUCCESS, LatencyMs: ms}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// slowShare leases and releases (without an outcome) 200 times and
	// returns the share of leases on slow.
	slowShare := func(r *running) float64 {
		t.Helper()
		slow := 0
		for range 200 {
			acq, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "search", TtlSeconds: 30})
			if err != nil {
				t.Fatal(err)
			}
			l := acq.GetLease()
			if l.GetResourceId() == "slow" {
				slow++
			}
			if _, err := r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken()}); err != nil {
				t.Fatal(err)
			}
		}
		return float64(slow) / 200
	}
	if got := slowShare(r); got < 0.2 {
		t.Fatalf("slow's share under the server-wide success objective = %.2f, want a fair share (the latency does not count)", got)
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/demo/policy", admin, `{"objective":"fastest"}`, nil); code != 400 {
		t.Fatalf("PUT .../policy objective fastest = got %d, want 400", code)
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/demo/policy", admin, `{"objective":"success_per_time"}`, nil); code != 200 {
		t.Fatalf("PUT .../policy objective success_per_time = got %d, want 200", code)
	}
	if got := slowShare(r); got > 0.05 {
		t.Fatalf("slow's share under success_per_time = %.2f, want almost none", got)
	}
	r.stop(t)

	// After a restart the stored objective is in force again; the latency
	// estimates are rebuilt from the next outcomes.
	r2 := start(t, cfg)
	for range 5 {
		for id, ms := range map[string]uint32{"fast": 100, "slow": 1000} {
			if _, err := r2.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: id, Context: "search", Outcome: repoolv1.Outcome_SUCCESS, LatencyMs: ms}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := slowShare(r2); got > 0.05 {
		t.Fatalf("slow's share under success_per_time after a restart = %.2f, want almost none", got)
	}
	if code := r2.api(t, "PUT", "/api/v1/tenants/demo/policy", admin, `{"objective":null}`, nil); code != 200 {
		t.Fatalf("PUT .../policy objective null = got %d, want 200", code)
	}
	if got := slowShare(r2); got < 0.2 {
		t.Fatalf("slow's share back under the server-wide success = %.2f, want a fair share", got)
	}
}
