package resilience

import (
	"testing"
	"time"
)

// TestNewGuard: one policy builds the breaker, the budget and the retrier;
// a rebuild keeps the breaker and the budget whose policies did not change,
// and replaces those whose did.
func TestNewGuard(t *testing.T) {
	p := Policy{Timeout: time.Second, Retry: RetryPolicy{MaxRetries: 2}, Breaker: BreakerPolicy{MinRequests: 4}}
	g := NewGuard(GuardConfig{Provider: "p", Policy: p}, nil)
	if g.Policy != p.WithDefaults() || g.Breaker.Policy() != p.Breaker.WithDefaults() ||
		g.Retrier.Policy() != p.Retry.WithDefaults() || g.Retrier.budget != g.Budget || g.Breaker.probeTimeout != time.Second {
		t.Fatalf("NewGuard(%+v) = %+v, want its parts built from the policy, the retrier spending the budget, probes bounded by the timeout", p, g)
	}

	retry := p
	retry.Retry.MaxRetries = 3
	if g2 := NewGuard(GuardConfig{Provider: "p", Policy: retry}, g); g2.Breaker != g.Breaker || g2.Budget != g.Budget || g2.Retrier.Policy().MaxRetries != 3 {
		t.Errorf("a retry change: breaker kept %v, budget kept %v, max_retries %d; want both kept and 3",
			g2.Breaker == g.Breaker, g2.Budget == g.Budget, g2.Retrier.Policy().MaxRetries)
	}
	for name, q := range map[string]Policy{
		"breaker": {Timeout: time.Second, Retry: p.Retry, Breaker: BreakerPolicy{MinRequests: 5}},
		"timeout": {Timeout: 2 * time.Second, Retry: p.Retry, Breaker: p.Breaker},
	} {
		if g2 := NewGuard(GuardConfig{Provider: "p", Policy: q}, g); g2.Breaker == g.Breaker || g2.Budget != g.Budget {
			t.Errorf("a %s change: breaker kept %v, budget kept %v; want a new breaker, the budget kept", name, g2.Breaker == g.Breaker, g2.Budget == g.Budget)
		}
	}
	budget := p
	budget.RetryBudget.Ratio = 0.1
	if g2 := NewGuard(GuardConfig{Provider: "p", Policy: budget}, g); g2.Breaker != g.Breaker || g2.Budget == g.Budget || g2.Retrier.budget != g2.Budget {
		t.Errorf("a budget change: breaker kept %v, budget kept %v; want the breaker kept, a new budget the retrier spends", g2.Breaker == g.Breaker, g2.Budget == g.Budget)
	}
}

// TestPolicyOverlay: the overlay takes every field the other policy sets,
// one by one, nested ones included.
func TestPolicyOverlay(t *testing.T) {
	base := Policy{Timeout: time.Second, Retry: RetryPolicy{MaxRetries: 4, InitialInterval: time.Millisecond}, Bulkhead: BulkheadPolicy{MaxInFlight: 2}}
	got := base.Overlay(Policy{Retry: RetryPolicy{MaxRetries: -1}, RetryBudget: BudgetPolicy{Ratio: 0.3}})
	want := Policy{Timeout: time.Second, Retry: RetryPolicy{MaxRetries: -1, InitialInterval: time.Millisecond},
		RetryBudget: BudgetPolicy{Ratio: 0.3}, Bulkhead: BulkheadPolicy{MaxInFlight: 2}}
	if got != want {
		t.Fatalf("Overlay = %+v, want %+v", got, want)
	}
	if base.Overlay(Policy{}) != base {
		t.Fatalf("Overlay of the zero policy changed %+v", base)
	}
}
