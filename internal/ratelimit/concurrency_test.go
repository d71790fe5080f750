package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestConcurrentAllow has many goroutines spend one tenant's bucket at one
// instant while other tenants' limits change and tenants are forgotten:
// exactly the burst passes, and every refusal is counted.
func TestConcurrentAllow(t *testing.T) {
	const (
		goroutines = 64
		calls      = 100
	)
	l, _ := newTestLimiter(t, Config{})
	var (
		allowed atomic.Int64
		wg      sync.WaitGroup
		start   = make(chan struct{})
	)
	for i := range goroutines {
		wg.Go(func() {
			<-start
			other := fmt.Sprintf("t%d", i%4)
			for j := range calls {
				d, err := l.Allow(context.Background(), "a", acquire)
				switch {
				case err == nil && d.Allowed:
					allowed.Add(1)
				case !errors.Is(err, ErrLimited) || d.RetryAfter <= 0:
					t.Errorf("Allow(a) = got %+v, %v, want allowed or refused with a retry-after", d, err)
				}
				// Churn on other tenants.
				switch j % 10 {
				case 0:
					if err := l.Set(other, float64(1+j), 1+i); err != nil {
						t.Errorf("Set(%s) = %v", other, err)
					}
				case 5:
					l.Forget(other)
				default:
					if _, err := l.Allow(context.Background(), other, register); err != nil && !errors.Is(err, ErrLimited) {
						t.Errorf("Allow(%s) = %v", other, err)
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := allowed.Load(); got != DefaultBurst {
		t.Fatalf("allowed requests = got %d, want %d", got, DefaultBurst)
	}
	if got, want := testutil.ToFloat64(l.rejected.WithLabelValues("a")), float64(goroutines*calls-DefaultBurst); got != want {
		t.Fatalf("repool_ratelimit_rejected_total{tenant=a} = got %v, want %v", got, want)
	}
}

// TestConcurrentRefusalsSpendNothing: refusals, however they interleave,
// leave the bucket as it was, so the tenant gets its rate back on time. A
// reserve-then-cancel implementation loses tokens here (see Local).
func TestConcurrentRefusalsSpendNothing(t *testing.T) {
	const goroutines = 64
	for round := range 20 {
		l, fc := newTestLimiter(t, Config{Rate: 10, Burst: 5})
		for range 5 {
			mustAllow(t, l, "a", acquire)
		}
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range 20 {
					if d, err := l.Allow(context.Background(), "a", acquire); d.Allowed || !errors.Is(err, ErrLimited) {
						t.Errorf("Allow() on an empty bucket = got %+v, %v, want refused", d, err)
					}
				}
			})
		}
		wg.Wait()
		fc.Advance(100 * time.Millisecond)
		if d, err := l.Allow(context.Background(), "a", acquire); err != nil || !d.Allowed {
			t.Fatalf("round %d: Allow() one token-time after %d refusals = got %+v, %v, want allowed",
				round, goroutines*20, d, err)
		}
		wantRefused(t, l, "a", acquire, ReasonRateLimited, 100*time.Millisecond)
	}
}
