package server

import (
	"strings"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/tenants"
)

// resourceOf returns a resource's view through the data plane.
func resourceOf(t *testing.T, r *running, key, id string) *repoolv1.ResourceInfo {
	t.Helper()
	got, err := r.pool.GetResource(withKey(key), &repoolv1.GetResourceRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetResource()
}

// TestRetirementAndQuarantineControlSurviveARestart: through the real
// server, a resource registered with max_uses is retired at its last use
// (and acquires then say all_retired), an operator's quarantine of
// another reaches its pool at once, recent counts show beside the
// posterior, and all of it is as it was after a restart; a tenant policy
// with a lower max_uses retires at once the resources beyond it, and a
// tenant-admin lifts the quarantine.
func TestRetirementAndQuarantineControlSurviveARestart(t *testing.T) {
	cfg := Config{Store: sqliteStore(t), Limits: requestLimit(1e6, 1e6), Policy: tenants.Policy{QuarantineBelow: -1}}
	r := start(t, cfg)
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{
		{Id: "once", MaxUses: 1}, {Id: "p2"}, {Id: "p3"},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "bad", MaxUses: -1}}}); err == nil {
		t.Fatal("Register(max_uses -1) succeeded")
	}
	// Lease all three (capacity 1 each): "once" is retired by its lease.
	for range 3 {
		if _, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "search", TtlSeconds: 60}); err != nil {
			t.Fatal(err)
		}
	}
	if got := resourceOf(t, r, r.key, "once"); got.GetState() != "retired" || got.GetRetiredReason() != "max_uses 1 reached" || got.GetUses() != 1 {
		t.Fatalf("once after its one use: %v", got)
	}
	for range 9 {
		failures(t, r, r.key, "p3", "other", 1)
		if _, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: "p3", Context: "other", Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
			t.Fatal(err)
		}
	}
	op, _, err := control.MintToken(r.s.signer, control.RoleOperator, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var view struct {
		Quarantine string `json:"quarantine"`
	}
	if code := r.api(t, "POST", "/api/v1/tenants/demo/resources/p2/quarantine", op, `{"seconds":900,"reason":"test"}`, &view); code != 200 || view.Quarantine != "blocked" {
		t.Fatalf("quarantine p2 = %d %+v, want 200 blocked", code, view)
	}
	if got := resourceOf(t, r, r.key, "p2"); got.GetQuarantine() != "blocked" {
		t.Fatalf("p2 after the operator's quarantine: %v", got)
	}
	before := resourceOf(t, r, r.key, "p3").GetAggregate()
	if before.GetRecentSuccesses() != 9 || before.GetRecentFailures() != 9 {
		t.Fatalf("p3 recent counts %d/%d, want 9/9", before.GetRecentSuccesses(), before.GetRecentFailures())
	}
	r.stop(t)

	r2 := start(t, cfg)
	if got := resourceOf(t, r2, r.key, "once"); got.GetState() != "retired" || got.GetRetiredReason() != "max_uses 1 reached" || got.GetUses() != 1 || got.GetMaxUses() != 1 {
		t.Fatalf("once after a restart: %v", got)
	}
	if got := resourceOf(t, r2, r.key, "p2"); got.GetQuarantine() != "blocked" || time.Until(got.GetBlockedUntil().AsTime()) < 10*time.Minute {
		t.Fatalf("p2 after a restart: %v, want blocked for about 15m", got)
	}
	if got := resourceOf(t, r2, r.key, "p3").GetAggregate(); got.GetRecentSuccesses() != 9 || got.GetRecentFailures() != 9 {
		t.Fatalf("p3 recent counts after a restart %d/%d, want 9/9", got.GetRecentSuccesses(), got.GetRecentFailures())
	}
	// Only p3 may serve (once retired, p2 quarantined); a policy of
	// max_uses 1 retires it (and p2) at once, and acquires say why.
	admin, _, err := control.MintToken(r2.s.signer, control.RoleTenantAdmin, "demo", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if code := r2.api(t, "POST", "/api/v1/tenants/demo/resources/p2/lift", admin, `{"reason":"fixed"}`, &view); code != 200 || view.Quarantine != "none" {
		t.Fatalf("lift p2 = %d %+v", code, view)
	}
	if code := r2.api(t, "PUT", "/api/v1/tenants/demo/policy", admin, `{"max_uses":1}`, nil); code != 200 {
		t.Fatalf("PUT .../policy max_uses 1 = %d", code)
	}
	for _, id := range []string{"p2", "p3"} {
		if got := resourceOf(t, r2, r.key, id); got.GetState() != "retired" || got.GetRetiredReason() != "max_uses 1 reached" {
			t.Fatalf("%s after max_uses 1: %v", id, got)
		}
	}
	_, err = r2.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "search", TtlSeconds: 60})
	if err == nil || !strings.Contains(err.Error(), "are retired") {
		t.Fatalf("Acquire with every resource retired = %v, want all retired", err)
	}
}

// TestRetirementFlagsReachThePools: --max-uses retires a resource without
// its own limit at that many leases; a resource's own max_uses overrides it.
func TestRetirementFlagsReachThePools(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t), Policy: tenants.Policy{MaxUses: 2}})
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "p1"}, {Id: "p2", MaxUses: 3}}}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		l, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken()}); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]string{"p1": "max_uses 2 reached", "p2": "max_uses 3 reached"} {
		if got := resourceOf(t, r, r.key, id); got.GetState() != "retired" || got.GetRetiredReason() != want {
			t.Fatalf("%s after 5 leases between them: %v, want retired, %q", id, got, want)
		}
	}
}
