package sidecar_test

import (
	"context"
	"testing"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/fakeserver"
)

// TestTenantRouteHeader: once IssueToken has named the tenant, every
// data-plane call carries it as x-repool-tenant, by which HAProxy picks
// the tenant's group; IssueToken itself goes without (any group answers
// it).
func TestTenantRouteHeader(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{Tenant: "acme"})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	for range 3 {
		if r := h.acquire("p"); r.status != 200 {
			t.Fatalf("acquire = %d %s, want 200", r.status, r.raw)
		}
	}
	if got := fake.RouteCalls("Acquire", "acme"); got != 3 {
		t.Errorf("Acquire calls with %s acme = got %d, want 3 (of %d)", repoolv1.TenantRouteKey, got, fake.Calls("Acquire"))
	}
	if got := fake.RouteCalls("IssueToken", ""); got != 1 || fake.Calls("IssueToken") != 1 {
		t.Errorf("IssueToken calls without %s = got %d of %d, want the one call", repoolv1.TenantRouteKey, got, fake.Calls("IssueToken"))
	}
	es := openEvents(t, h, "p")
	defer func() { es.body.Close(); <-es.done }()
	if got := fake.RouteCalls("SubscribeEvents", "acme"); got != 1 {
		t.Errorf("SubscribeEvents calls with %s acme = got %d (of %d), want 1", repoolv1.TenantRouteKey, got, fake.Calls("SubscribeEvents"))
	}
}

// TestTenantElsewhere: a call refused because the tenant is served by
// another group (during a move, or before HAProxy's map caught up) is
// retried like any UNAVAILABLE, and such refusals, however many, leave
// the breaker closed.
func TestTenantElsewhere(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		fake := fakeserver.Start(t, fakeserver.Config{Acquire: failing(fakeserver.TenantElsewhere("b"), fakeserver.TenantElsewhere("b"))})
		h := start(t, one("p", fast(fake)), sidecar.Options{})
		if r := h.acquire("p"); r.status != 200 {
			t.Fatalf("acquire refused twice with TENANT_ELSEWHERE = %d %s, want 200 on the second retry", r.status, r.raw)
		}
		if got := fake.Calls("Acquire"); got != 3 {
			t.Fatalf("Acquire calls = got %d, want 3 (two retries)", got)
		}
	})
	t.Run("the breaker stays closed", func(t *testing.T) {
		fake := fakeserver.Start(t, fakeserver.Config{Acquire: func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			return nil, fakeserver.TenantElsewhere("b")
		}})
		pc := fast(fake)
		pc.Breaker.MinRequests = 5 // 10 failures would trip it
		pc.Breaker.ConsecutiveFailures = 3
		h := start(t, one("p", pc), sidecar.Options{})
		for range 10 {
			if r := h.acquire("p"); r.status != 503 || r.errCode() != "unavailable" {
				t.Fatalf("acquire always refused with TENANT_ELSEWHERE = %d %s, want 503 unavailable once the retries are spent", r.status, r.raw)
			}
		}
		if b := h.breaker("p"); b["state"] != "closed" {
			t.Fatalf("breaker after 10 calls refused with TENANT_ELSEWHERE = %v, want closed", b)
		}
		if got := fake.Calls("Acquire"); got != 30 {
			t.Errorf("Acquire calls = got %d, want 30 (each call retried twice)", got)
		}
	})
}
