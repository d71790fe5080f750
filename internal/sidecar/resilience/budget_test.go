package resilience

import (
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
)

func TestBudget(t *testing.T) {
	tests := []struct {
		name   string
		policy BudgetPolicy
		calls  int
		want   int // retries allowed
	}{
		{"20% of calls", BudgetPolicy{Ratio: 0.2, MinPerSecond: -1, Window: 10 * time.Second}, 100, 20},
		{"the floor when calls are few", BudgetPolicy{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}, 5, 10},
		{"the ratio when it is above the floor", BudgetPolicy{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second}, 100, 20},
		{"defaults: floor 10/s over 10s", BudgetPolicy{}, 0, 100},
		{"no ratio and no floor", BudgetPolicy{Ratio: -1, MinPerSecond: -1}, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(tt.policy, clock.NewFake(time.Unix(1e9, 0)))
			for range tt.calls {
				b.Call()
			}
			got := 0
			for b.TryRetry() {
				got++
			}
			if got != tt.want {
				t.Fatalf("TryRetry() allowed %d retries after %d calls, want %d", got, tt.calls, tt.want)
			}
		})
	}
}

func TestBudgetWindowSlides(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	b := NewBudget(BudgetPolicy{Ratio: 0.5, MinPerSecond: -1, Window: 10 * time.Second}, clk)
	for range 10 {
		b.Call()
	}
	for range 5 {
		if !b.TryRetry() {
			t.Fatal("TryRetry() = false within 50% of 10 calls")
		}
	}
	if b.TryRetry() {
		t.Fatal("TryRetry() = true beyond 50% of 10 calls")
	}
	clk.Advance(11 * time.Second) // calls and retries expire together
	for range 2 {
		b.Call()
	}
	if !b.TryRetry() || b.TryRetry() {
		t.Fatal("after the window slid, TryRetry() should allow exactly 1 retry for 2 new calls")
	}
}
