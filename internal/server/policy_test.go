package server

import (
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/tenants"
)

// TestPolicyFlagsReachThePools: a resource that keeps failing is
// quarantined after --quarantine-after failures, for the cooldown
// --cooldown-base sets.
func TestPolicyFlagsReachThePools(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t), Policy: tenants.Policy{FailuresToQuarantine: 2, CooldownBase: 90 * time.Second, CooldownMax: time.Hour}})
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "p1"}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: "p1", Context: "search", Outcome: repoolv1.Outcome_FAILURE}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	c := got.GetResource().GetContexts()[0]
	left := time.Until(c.GetBlockedUntil().AsTime())
	if c.GetQuarantine() != "blocked" || left < 60*time.Second || left > 2*time.Minute {
		t.Fatalf("after 2 failures: %v (cooldown left %v), want blocked for about 90s (±20%% jitter)", c, left)
	}
}

// failures reports n failures of resource id in context.
func failures(t *testing.T, r *running, key, id, context string, n int) {
	t.Helper()
	for range n {
		if _, err := r.pool.Report(withKey(key), &repoolv1.ReportRequest{ResourceId: id, Context: context, Outcome: repoolv1.Outcome_FAILURE}); err != nil {
			t.Fatal(err)
		}
	}
}

// quarantineOf returns the quarantine state of id in its only context and
// how long is left of its cooldown.
func quarantineOf(t *testing.T, r *running, key, id string) (string, time.Duration) {
	t.Helper()
	got, err := r.pool.GetResource(withKey(key), &repoolv1.GetResourceRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	c := got.GetResource().GetContexts()[0]
	if c.GetQuarantine() != "blocked" {
		return c.GetQuarantine(), 0
	}
	return c.GetQuarantine(), time.Until(c.GetBlockedUntil().AsTime())
}

// TestTenantPolicyAppliesLive: a tenant-admin's policy, set through the
// control plane, changes the running pool's quarantine at once (a
// resource with 2 failures is blocked at the third, where the server-wide
// flags wait for 5), for the tenant's cooldown; a policy out of range
// changes nothing; and the policy is back in force after a restart.
func TestTenantPolicyAppliesLive(t *testing.T) {
	st := sqliteStore(t)
	cfg := Config{Store: st, Limits: requestLimit(1e6, 1e6), Policy: tenants.Policy{FailuresToQuarantine: 5, QuarantineBelow: -1}}
	r := start(t, cfg)
	admin, _, err := control.MintToken(r.s.signer, control.RoleTenantAdmin, "demo", time.Hour)
	if err != nil {
		t.Fatalf("MintToken() = got error %v, want nil", err)
	}
	if _, err := r.pool.Register(withKey(r.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "p1"}, {Id: "p2"}}}); err != nil {
		t.Fatal(err)
	}
	failures(t, r, r.key, "p1", "search", 2)
	if q, _ := quarantineOf(t, r, r.key, "p1"); q == "blocked" {
		t.Fatalf("p1 after 2 failures under the server-wide policy = %s, want not blocked", q)
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/demo/policy", admin, `{"quarantine_after":0}`, nil); code != 400 {
		t.Fatalf("PUT .../policy quarantine_after 0 = got %d, want 400", code)
	}
	var got struct {
		Effective struct {
			QuarantineAfter     int64 `json:"quarantine_after"`
			CooldownBaseSeconds int64 `json:"cooldown_base_seconds"`
		} `json:"effective"`
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/demo/policy", admin, `{"quarantine_after":3,"cooldown_base_seconds":600}`, &got); code != 200 ||
		got.Effective.QuarantineAfter != 3 || got.Effective.CooldownBaseSeconds != 600 {
		t.Fatalf("PUT .../policy = got %d %+v, want 200 with quarantine_after 3, cooldown_base_seconds 600 in force", code, got)
	}
	failures(t, r, r.key, "p1", "search", 1)
	q, left := quarantineOf(t, r, r.key, "p1")
	if q != "blocked" || left < 8*time.Minute || left > 12*time.Minute {
		t.Fatalf("p1 after a third failure under the tenant's policy = %s for %v, want blocked for about 10m (±20%% jitter)", q, left)
	}
	r.stop(t)

	// After a restart the stored policy is in force again, for resources
	// restored and registered alike.
	r2 := start(t, cfg)
	if _, err := r2.pool.Register(withKey(r.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "p3"}}}); err != nil {
		t.Fatal(err)
	}
	failures(t, r2, r.key, "p3", "search", 3)
	if q, left := quarantineOf(t, r2, r.key, "p3"); q != "blocked" || left < 8*time.Minute {
		t.Fatalf("p3 after 3 failures after a restart = %s for %v, want blocked for about 10m", q, left)
	}
	// Back to the server-wide default: 3 failures no longer block.
	if code := r2.api(t, "PUT", "/api/v1/tenants/demo/policy", admin, `{"quarantine_after":null}`, nil); code != 200 {
		t.Fatalf("PUT .../policy quarantine_after null = got %d, want 200", code)
	}
	failures(t, r2, r.key, "p2", "search", 3)
	if q, _ := quarantineOf(t, r2, r.key, "p2"); q == "blocked" {
		t.Fatalf("p2 after 3 failures back under the server-wide policy = %s, want not blocked", q)
	}
}

// TestServerWidePolicyStarts: a server-wide policy whose durations are
// not whole seconds, shown to the control plane in whole seconds, starts a
// server (the control plane's ranges accept it).
func TestServerWidePolicyStarts(t *testing.T) {
	p := tenants.Policy{QuarantineBelow: -0.5, CooldownBase: 1500 * time.Millisecond, CooldownMax: 1600 * time.Millisecond, HalfLife: 90 * time.Second}
	start(t, Config{Store: sqliteStore(t), Policy: p})
}
