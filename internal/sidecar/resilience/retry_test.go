package resilience

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/repool/repool/internal/clock"
)

// fastRetry retries quickly so that tests do not wait.
var fastRetry = RetryPolicy{MaxRetries: 3, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond, MaxElapsed: time.Second}

func newRetrier(p RetryPolicy, b BudgetPolicy) *Retrier {
	return NewRetrier(RetrierConfig{Provider: "p", Policy: p, Budget: NewBudget(b, nil)})
}

func TestRetrierRetriesOnlyUnavailable(t *testing.T) {
	tests := []struct {
		name     string
		errs     []error // one per attempt; nil after the list
		want     codes.Code
		attempts int
	}{
		{"UNAVAILABLE then success", []error{grpcErr(codes.Unavailable), grpcErr(codes.Unavailable)}, codes.OK, 3},
		{"INTERNAL is not retried", []error{grpcErr(codes.Internal)}, codes.Internal, 1},
		{"DEADLINE_EXCEEDED is not retried", []error{grpcErr(codes.DeadlineExceeded)}, codes.DeadlineExceeded, 1},
		{"a context deadline is not retried", []error{context.DeadlineExceeded}, codes.DeadlineExceeded, 1},
		{"NOT_FOUND is not retried", []error{grpcErr(codes.NotFound)}, codes.NotFound, 1},
		{"FAILED_PRECONDITION is not retried", []error{grpcErr(codes.FailedPrecondition)}, codes.FailedPrecondition, 1},
		{"RESOURCE_EXHAUSTED is not retried", []error{grpcErr(codes.ResourceExhausted)}, codes.ResourceExhausted, 1},
		{"UNAUTHENTICATED is not retried", []error{grpcErr(codes.Unauthenticated)}, codes.Unauthenticated, 1},
		{"a first attempt the bulkhead refuses fails at once", []error{ErrBulkheadFull}, codes.Unavailable, 1},
		{"a retry the bulkhead refuses is retried", []error{grpcErr(codes.Unavailable), ErrBulkheadFull}, codes.OK, 3},
		{"UNAVAILABLE until max_retries", []error{grpcErr(codes.Unavailable), grpcErr(codes.Unavailable), grpcErr(codes.Unavailable), grpcErr(codes.Unavailable), grpcErr(codes.Unavailable)}, codes.Unavailable, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRetrier(fastRetry, BudgetPolicy{})
			attempts := 0
			err := r.Do(context.Background(), func(context.Context) error {
				attempts++
				if attempts <= len(tt.errs) {
					return tt.errs[attempts-1]
				}
				return nil
			})
			if Code(err) != tt.want || attempts != tt.attempts {
				t.Fatalf("Do() = got %v after %d attempts, want %v after %d", err, attempts, tt.want, tt.attempts)
			}
		})
	}
}

func TestRetrierNegativeMaxRetriesDisablesRetries(t *testing.T) {
	p := fastRetry
	p.MaxRetries = -1
	r := newRetrier(p, BudgetPolicy{})
	attempts := 0
	err := r.Do(context.Background(), func(context.Context) error { attempts++; return grpcErr(codes.Unavailable) })
	if attempts != 1 || Code(err) != codes.Unavailable {
		t.Fatalf("Do() with max_retries -1 = got %v after %d attempts, want Unavailable after 1", err, attempts)
	}
}

func TestRetrierStaysWithinTheDeadline(t *testing.T) {
	p := RetryPolicy{MaxRetries: 5, InitialInterval: 200 * time.Millisecond, MaxInterval: time.Second, RandomizationFactor: -1, MaxElapsed: 10 * time.Second}
	r := newRetrier(p, BudgetPolicy{})
	ctx, cancel := context.WithTimeout(context.Background(), lastAttemptRoom)
	defer cancel()
	attempts := 0
	// The deadline leaves no room for another attempt. Had Do started the
	// wait, the deadline would have ended it: the error would be the
	// context's (DEADLINE_EXCEEDED), not the attempt's.
	err := r.Do(ctx, func(context.Context) error { attempts++; return grpcErr(codes.Unavailable) })
	if attempts != 1 || Code(err) != codes.Unavailable {
		t.Fatalf("Do() with a 200ms wait and a %v deadline = got %v after %d attempts, want Unavailable after 1, without waiting",
			lastAttemptRoom, err, attempts)
	}
}

// TestRetrierLastAttemptAtTheEnd: a wait that would end past max_elapsed,
// or past lastAttemptRoom before the deadline, is cut short, and the last
// attempt is made then (a handover may be over by then); none after it.
func TestRetrierLastAttemptAtTheEnd(t *testing.T) {
	p := RetryPolicy{MaxRetries: 5, InitialInterval: time.Hour, MaxInterval: time.Hour, RandomizationFactor: -1}
	for _, tc := range []struct {
		name       string
		maxElapsed time.Duration
		deadline   time.Duration // 0: none
		want       []time.Duration
	}{
		{"max_elapsed", 150 * time.Minute, 0, []time.Duration{0, time.Hour, 2 * time.Hour, 150 * time.Minute}},
		{"the deadline", 10 * time.Hour, 90*time.Minute + lastAttemptRoom, []time.Duration{0, time.Hour, 90 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.MaxElapsed = tc.maxElapsed
			clk := clock.NewFake(time.Unix(1e9, 0))
			start := clk.Now()
			r := NewRetrier(RetrierConfig{Provider: "p", Policy: p, Budget: NewBudget(BudgetPolicy{}, clk), Clock: clk})
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			var at []time.Duration // on the fake clock; only the retrier's goroutine writes, until done
			done := make(chan error, 1)
			go func() {
				done <- r.Do(ctx, func(context.Context) error { at = append(at, clk.Now().Sub(start)); return handoverErr() })
			}()
			wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel() // ends the last wait for a timer
			for {
				armed := make(chan error, 1)
				go func() { armed <- clk.Wait(wctx, 1) }()
				select {
				case err := <-done:
					// The deadline's wall time is an hour and a half
					// away: the planned times are exact to the wall time
					// the test took.
					if !Handover(err) || len(at) != len(tc.want) {
						t.Fatalf("Do() = %v after attempts at %v, want the handover answer after attempts at %v", err, at, tc.want)
					}
					for i := range at {
						if d := at[i] - tc.want[i]; d < -time.Second || d > time.Second {
							t.Fatalf("attempts at %v, want at %v", at, tc.want)
						}
					}
					return
				case err := <-armed:
					if err != nil {
						t.Fatalf("the retrier neither waits nor returns: %v", err)
					}
					clk.Advance(30 * time.Minute) // every planned attempt is at a multiple of it
				}
			}
		})
	}
}

func TestRetrierBudget(t *testing.T) {
	// No floor: retries are bounded by 20% of the calls alone.
	budget := BudgetPolicy{Ratio: 0.2, MinPerSecond: -1, Window: time.Minute}
	r := NewRetrier(RetrierConfig{Provider: "p", Policy: fastRetry, Budget: NewBudget(budget, clock.NewFake(time.Unix(1e9, 0)))})
	const calls = 200
	attempts, spent := 0, 0
	for range calls {
		err := r.Do(context.Background(), func(context.Context) error { attempts++; return grpcErr(codes.Unavailable) })
		if errors.Is(err, ErrBudgetSpent) {
			spent++
			if Code(err) != codes.Unavailable {
				t.Fatalf("Code(budget refusal) = got %v, want Unavailable (the last attempt's)", Code(err))
			}
		}
	}
	if max := calls + calls/5; attempts > max {
		t.Fatalf("%d failing calls made %d attempts, want at most %d ((1 + 0.2) × calls)", calls, attempts, max)
	}
	if spent == 0 {
		t.Fatalf("no call reported ErrBudgetSpent")
	}
}

// TestRetrierWaitsOnItsClock: the wait between attempts is a timer of the
// retrier's clock: with a fake, the retry happens when the fake passes the
// wait, and not before.
func TestRetrierWaitsOnItsClock(t *testing.T) {
	clk := clock.NewFake(time.Now())
	p := RetryPolicy{MaxRetries: 1, InitialInterval: time.Hour, MaxInterval: time.Hour, RandomizationFactor: -1, MaxElapsed: 2 * time.Hour}
	r := NewRetrier(RetrierConfig{Provider: "p", Policy: p, Budget: NewBudget(BudgetPolicy{}, clk), Clock: clk})
	attempts := make(chan struct{}, 2)
	done := make(chan error, 1)
	go func() {
		done <- r.Do(context.Background(), func(context.Context) error {
			attempts <- struct{}{}
			if len(attempts) == 1 {
				return grpcErr(codes.Unavailable)
			}
			return nil
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.Wait(ctx, 1); err != nil {
		t.Fatalf("no wait armed on the retrier's clock after a failure: %v", err)
	}
	clk.Advance(time.Hour - time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Do() = %v before the fake clock passed the 1h wait", err)
	default:
	}
	clk.Advance(time.Millisecond)
	select {
	case err := <-done:
		if err != nil || len(attempts) != 2 {
			t.Fatalf("Do() = %v after %d attempts, want success on the retry", err, len(attempts))
		}
	case <-ctx.Done():
		t.Fatal("no retry after the fake clock passed the wait")
	}
}

// TestRetryWaitEndsWhenTheBreakerOpens: a call waiting an hour to retry
// runs its next attempt as soon as its provider's breaker opens (other
// calls found the provider down), without the clock moving, and that
// attempt is refused circuit-open; a later opening does not wake a call
// that no longer waits on it.
func TestRetryWaitEndsWhenTheBreakerOpens(t *testing.T) {
	clk := clock.NewFake(time.Now())
	p := RetryPolicy{MaxRetries: 3, InitialInterval: time.Hour, MaxInterval: time.Hour, RandomizationFactor: -1, MaxElapsed: 10 * time.Hour}
	r := NewRetrier(RetrierConfig{Provider: "p", Policy: p, Budget: NewBudget(BudgetPolicy{}, clk), Clock: clk})
	b := NewBreaker(BreakerConfig{Provider: "p", Policy: BreakerPolicy{ConsecutiveFailures: 2, OpenTimeout: time.Hour}})
	attempts := 0
	done := make(chan error, 1)
	go func() {
		done <- r.DoUntil(context.Background(), b, func(context.Context) error {
			attempts++
			if attempts > 1 {
				if err := b.Admit(); err != nil {
					return err
				}
			}
			return grpcErr(codes.Unavailable)
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.Wait(ctx, 1); err != nil {
		t.Fatalf("no wait armed after the first failure: %v", err)
	}
	// Two other calls fail: the breaker opens.
	for range 2 {
		_ = b.Execute(func() error { return grpcErr(codes.Unavailable) })
	}
	if b.State() != StateOpen {
		t.Fatalf("breaker %v after 2 failures in a row, want open", b.State())
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrCircuitOpen) || attempts != 2 {
			t.Fatalf("DoUntil() = %v after %d attempts, want ErrCircuitOpen on the 2nd", err, attempts)
		}
	case <-ctx.Done():
		t.Fatal("the wait to retry did not end when the breaker opened")
	}
	select {
	case <-b.Wake():
		t.Fatal("the next opening's channel is already closed")
	default:
	}
}

// TestRetrierWaitsOutAHandover: the front end's handover answer is retried
// past max_retries and without the retry budget, until max_elapsed (on the
// retrier's clock); any other failure keeps both bounds.
func TestRetrierWaitsOutAHandover(t *testing.T) {
	p := RetryPolicy{MaxRetries: 2, InitialInterval: time.Second, MaxInterval: time.Second, RandomizationFactor: -1, MaxElapsed: 10 * time.Second}
	noBudget := BudgetPolicy{Ratio: 0.001, MinPerSecond: -1, Window: time.Minute} // refuses every retry
	run := func(t *testing.T, b BudgetPolicy, fail func(attempt int) error) (int, error) {
		t.Helper()
		clk := clock.NewFake(time.Now())
		r := NewRetrier(RetrierConfig{Provider: "p", Policy: p, Budget: NewBudget(b, clk), Clock: clk})
		attempts := 0
		done := make(chan error, 1)
		go func() {
			done <- r.Do(context.Background(), func(context.Context) error { attempts++; return fail(attempts) })
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			select {
			case err := <-done:
				return attempts, err
			default:
			}
			// Each wait is one second: pass it once it is armed.
			if err := clk.Wait(ctx, 1); err != nil {
				select {
				case err := <-done:
					return attempts, err
				default:
				}
				t.Fatalf("the retrier neither waits nor returns: %v", err)
			}
			clk.Advance(time.Second)
		}
	}
	t.Run("a handover that ends within max_elapsed", func(t *testing.T) {
		attempts, err := run(t, noBudget, func(n int) error {
			if n <= 7 {
				return handoverErr()
			}
			return nil
		})
		if err != nil || attempts != 8 {
			t.Fatalf("Do() = %v after %d attempts, want success on the 8th (7 handover answers, max_retries 2, no budget)", err, attempts)
		}
	})
	t.Run("a handover that outlasts max_elapsed", func(t *testing.T) {
		attempts, err := run(t, BudgetPolicy{}, func(int) error { return handoverErr() })
		// Attempts at 0, 1, ..., 10 s: a next wait would end past 10 s.
		if !Handover(err) || attempts != 11 {
			t.Fatalf("Do() = %v after %d attempts, want the handover answer after 11 (one a second for max_elapsed 10s)", err, attempts)
		}
	})
	t.Run("other failures keep max_retries", func(t *testing.T) {
		attempts, err := run(t, BudgetPolicy{}, func(int) error { return grpcErr(codes.Unavailable) })
		if Code(err) != codes.Unavailable || attempts != 3 {
			t.Fatalf("Do() = %v after %d attempts, want Unavailable after 3 (max_retries 2)", err, attempts)
		}
	})
	t.Run("other failures keep the budget", func(t *testing.T) {
		attempts, err := run(t, noBudget, func(int) error { return grpcErr(codes.Unavailable) })
		if !errors.Is(err, ErrBudgetSpent) || attempts != 1 {
			t.Fatalf("Do() = %v after %d attempts, want the budget's refusal after 1", err, attempts)
		}
	})
	t.Run("a failure after a handover counts from there", func(t *testing.T) {
		attempts, err := run(t, BudgetPolicy{}, func(n int) error {
			if n <= 5 {
				return handoverErr()
			}
			return grpcErr(codes.Unavailable)
		})
		// 5 handover answers, then the first attempt's failure and its two
		// retries.
		if Code(err) != codes.Unavailable || Handover(err) || attempts != 8 {
			t.Fatalf("Do() = %v after %d attempts, want Unavailable after 8", err, attempts)
		}
	})
}
