package resilience

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

func grpcErr(c codes.Code) error { return status.Error(c, c.String()) }

// run executes n calls through b that end with err, and returns how many
// of them reached the function.
func run(b *Breaker, n int, err error) (called int) {
	for range n {
		_ = b.Execute(func() error { called++; return err })
	}
	return called
}

func TestBreakerTripsAtThreshold(t *testing.T) {
	policy := BreakerPolicy{FailureRatio: 0.5, MinRequests: 20, Window: time.Minute, OpenTimeout: time.Minute,
		ConsecutiveFailures: -1, ConsecutiveTimeouts: -1}
	tests := []struct {
		name      string
		successes int
		failures  int
		want      State
	}{
		{"19 failures are below min_requests", 0, 19, StateClosed},
		{"20 failures trip it", 0, 20, StateOpen},
		{"ratio exactly 50% over 20 trips it", 10, 10, StateOpen},
		{"ratio 45% over 20 does not", 11, 9, StateClosed},
		{"ratio 48% over 50 does not", 26, 24, StateClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy})
			run(b, tt.successes, nil)
			run(b, tt.failures, grpcErr(codes.Unavailable))
			if got := b.State(); got != tt.want {
				t.Fatalf("State() after %d successes and %d failures = got %v, want %v", tt.successes, tt.failures, got, tt.want)
			}
		})
	}
}

func TestBreakerClassifiesOutcomes(t *testing.T) {
	policy := BreakerPolicy{MinRequests: 5, Window: time.Minute, OpenTimeout: time.Minute}
	tests := []struct {
		name           string
		err            error
		wantSuccesses  uint32
		wantExclusions uint32
	}{
		{"NOT_FOUND is a success", grpcErr(codes.NotFound), 30, 0},
		{"INVALID_ARGUMENT is a success", grpcErr(codes.InvalidArgument), 30, 0},
		{"PERMISSION_DENIED is a success", grpcErr(codes.PermissionDenied), 30, 0},
		{"FAILED_PRECONDITION is a success", grpcErr(codes.FailedPrecondition), 30, 0},
		{"ALREADY_EXISTS is a success", grpcErr(codes.AlreadyExists), 30, 0},
		{"UNAUTHENTICATED is excluded", grpcErr(codes.Unauthenticated), 0, 30},
		{"RESOURCE_EXHAUSTED is excluded", grpcErr(codes.ResourceExhausted), 0, 30},
		{"a caller that went away is excluded", context.Canceled, 0, 30},
		{"a wrapped exclusion is excluded", fmt.Errorf("x: %w", grpcErr(codes.Unauthenticated)), 0, 30},
		{"TENANT_ELSEWHERE (a tenant being moved) is excluded", errorInfo(codes.Unavailable, repoolv1.ErrorDomain, repoolv1.ReasonTenantElsewhere), 0, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy})
			run(b, 30, tt.err)
			c := b.Status().Counts
			if b.State() != StateClosed || c.Failures != 0 || c.Successes != tt.wantSuccesses || c.Exclusions != tt.wantExclusions {
				t.Fatalf("after 30 × %v: state %v, counts %+v; want closed, %d successes, %d exclusions, no failure",
					tt.err, b.State(), c, tt.wantSuccesses, tt.wantExclusions)
			}
		})
	}
}

func TestBreakerFailures(t *testing.T) {
	for _, c := range []codes.Code{codes.Unavailable, codes.Internal, codes.DeadlineExceeded, codes.Unknown} {
		t.Run(c.String(), func(t *testing.T) {
			b := NewBreaker(BreakerConfig{Provider: "p", Policy: BreakerPolicy{MinRequests: 5, Window: time.Minute, OpenTimeout: time.Minute}})
			run(b, 5, grpcErr(c))
			if got := b.State(); got != StateOpen {
				t.Fatalf("State() after 5 × %v = got %v, want open", c, got)
			}
		})
	}
}

func TestBreakerOpenRejectsWithoutCalling(t *testing.T) {
	b := NewBreaker(BreakerConfig{Provider: "p", Policy: BreakerPolicy{MinRequests: 5, OpenTimeout: time.Minute}})
	run(b, 5, grpcErr(codes.Unavailable))
	called := false
	err := b.Execute(func() error { called = true; return nil })
	if called || !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Execute() on an open breaker = got %v (called %v), want ErrCircuitOpen without calling", err, called)
	}
	var hint interface{ RetryAfter() time.Duration }
	if !errors.As(err, &hint) || hint.RetryAfter() <= 0 || hint.RetryAfter() > time.Minute {
		t.Fatalf("rejection retry-after = got %v, want in (0, 1m]", hint)
	}
	if got := Code(err); got != codes.Unavailable {
		t.Fatalf("Code(rejection) = got %v, want Unavailable", got)
	}
	st := b.Status()
	if st.Trips != 1 || st.LastTrip.IsZero() || st.LastTripReason == "" || st.RetryAfter <= 0 {
		t.Fatalf("Status() = %+v, want one trip with a reason and a retry-after", st)
	}
}

func TestBreakerHalfOpen(t *testing.T) {
	// gobreaker reads the wall clock, so the open timeout is short and real.
	const open = 20 * time.Millisecond
	policy := BreakerPolicy{MinRequests: 5, OpenTimeout: open, HalfOpenProbes: 3}
	t.Run("successful probes close it", func(t *testing.T) {
		m := NewMetrics(nil)
		b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy, Metrics: m})
		run(b, 5, grpcErr(codes.Unavailable))
		time.Sleep(open + 10*time.Millisecond) // real time: gobreaker reads time.Now for the open timeout
		if got := b.State(); got != StateHalfOpen {
			t.Fatalf("State() after the open timeout = got %v, want half-open", got)
		}
		if called := run(b, 3, nil); called != 3 {
			t.Fatalf("half-open breaker let %d of 3 probes through, want 3", called)
		}
		if got := b.State(); got != StateClosed {
			t.Fatalf("State() after 3 successful probes = got %v, want closed", got)
		}
		if got := testutil.ToFloat64(m.transitions.WithLabelValues("p", "half-open", "closed")); got != 1 {
			t.Fatalf("half-open → closed transitions = got %v, want 1", got)
		}
	})
	t.Run("a failed probe opens it again", func(t *testing.T) {
		b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy})
		run(b, 5, grpcErr(codes.Unavailable))
		time.Sleep(open + 10*time.Millisecond) // real time: gobreaker reads time.Now for the open timeout
		run(b, 1, grpcErr(codes.Unavailable))
		if got := b.State(); got != StateOpen {
			t.Fatalf("State() after a failed probe = got %v, want open", got)
		}
		if st := b.Status(); st.Trips != 2 || st.LastTripReason == "" {
			t.Fatalf("Status() = %+v, want 2 trips and a reason", st)
		}
	})
	t.Run("only half_open_probes calls pass at once", func(t *testing.T) {
		b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy})
		run(b, 5, grpcErr(codes.Unavailable))
		time.Sleep(open + 10*time.Millisecond) // real time: gobreaker reads time.Now for the open timeout
		release := make(chan struct{})
		started := make(chan struct{}, 3)
		done := make(chan struct{})
		for range 3 {
			go func() {
				_ = b.Execute(func() error { started <- struct{}{}; <-release; return nil })
				done <- struct{}{}
			}()
		}
		for range 3 {
			<-started
		}
		if err := b.Execute(func() error { return nil }); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("4th call while 3 probes are in flight = got %v, want ErrCircuitOpen", err)
		}
		close(release)
		for range 3 {
			<-done
		}
		if got := b.State(); got != StateClosed {
			t.Fatalf("State() after the probes = got %v, want closed", got)
		}
	})
}

// TestBreakerConsecutiveRules: calls in a row that failed, or timed out,
// trip the breaker whatever the window holds; a success (or, for the
// timeouts, any other outcome) starts the count again.
func TestBreakerConsecutiveRules(t *testing.T) {
	unavailable, timeout := grpcErr(codes.Unavailable), grpcErr(codes.DeadlineExceeded)
	// A window full of successes: the ratio cannot trip it.
	policy := BreakerPolicy{MinRequests: 1, Window: time.Hour, OpenTimeout: time.Hour}
	tests := []struct {
		name     string
		outcomes []error
		want     State
		wantRule TripRule
	}{
		{"4 failures in a row do not trip it", []error{unavailable, unavailable, unavailable, unavailable}, StateClosed, 0},
		{"the 5th failure in a row does", []error{unavailable, unavailable, unavailable, unavailable, unavailable}, StateOpen, RuleConsecutiveFailures},
		{"a success starts the count again", []error{unavailable, unavailable, unavailable, unavailable, nil, unavailable, unavailable, unavailable, unavailable}, StateClosed, 0},
		{"a business answer is a success", []error{unavailable, unavailable, unavailable, unavailable, grpcErr(codes.NotFound), unavailable}, StateClosed, 0},
		{"an excluded outcome neither counts nor resets", []error{unavailable, unavailable, grpcErr(codes.ResourceExhausted), unavailable, unavailable, unavailable}, StateOpen, RuleConsecutiveFailures},
		{"2 timeouts in a row do not trip it", []error{timeout, timeout}, StateClosed, 0},
		{"3 timeouts in a row do", []error{timeout, timeout, timeout}, StateOpen, RuleConsecutiveTimeouts},
		{"a proxy's 504 is a timeout", []error{timeout, timeout, grpcErr504()}, StateOpen, RuleConsecutiveTimeouts},
		{"another failure between timeouts starts their count again", []error{timeout, timeout, unavailable, timeout}, StateClosed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := make(chan Transition, 1)
			b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy, Notify: ch})
			run(b, 100, nil)
			for _, err := range tt.outcomes {
				run(b, 1, err)
			}
			if got := b.State(); got != tt.want {
				t.Fatalf("State() after 100 successes and %v = got %v, want %v", tt.outcomes, got, tt.want)
			}
			if tt.want != StateOpen {
				return
			}
			tr := <-ch
			if tr.Rule != tt.wantRule || tr.Reason() == "" {
				t.Fatalf("transition = %+v (%q), want rule %v", tr, tr.Reason(), tt.wantRule)
			}
		})
	}
	t.Run("negative turns the rules off", func(t *testing.T) {
		b := NewBreaker(BreakerConfig{Provider: "p", Policy: BreakerPolicy{MinRequests: 1000, Window: time.Hour, OpenTimeout: time.Hour,
			ConsecutiveFailures: -1, ConsecutiveTimeouts: -1}})
		run(b, 50, timeout)
		if got := b.State(); got != StateClosed {
			t.Fatalf("State() after 50 timeouts with the rules off = got %v, want closed", got)
		}
	})
}

// grpcErr504 is how grpc-go reports a proxy's 504.
func grpcErr504() error {
	return status.Error(codes.Unavailable, "unexpected HTTP status code received from server: 504 (Gateway Timeout)")
}

// TestBreakerProbe: with a probe, a half-open breaker keeps rejecting
// callers while its own probes run, one after the other; they close it when
// all succeed, and open it again when one fails.
func TestBreakerProbe(t *testing.T) {
	const open = 20 * time.Millisecond // gobreaker reads the wall clock
	policy := BreakerPolicy{OpenTimeout: open, HalfOpenProbes: 3}
	t.Run("successful probes close it; callers never probe", func(t *testing.T) {
		probes := make(chan struct{}, 10)
		b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy, Probe: func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("a probe without a deadline")
			}
			probes <- struct{}{}
			return nil
		}})
		run(b, 5, grpcErr(codes.Unavailable))
		time.Sleep(open + 10*time.Millisecond) // real time: gobreaker reads time.Now for the open timeout
		deadline := time.Now().Add(10 * time.Second)
		for b.State() != StateClosed {
			if called := run(b, 1, nil); called != 0 {
				t.Fatal("a caller's call went through a half-open breaker that has a probe")
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %v after 10s of probing", b.State())
			}
			time.Sleep(time.Millisecond) // real time: the probes run on gobreaker's wall-clock state
		}
		if n := len(probes); n != 3 {
			t.Fatalf("%d probes closed it, want 3", n)
		}
		if called := run(b, 5, nil); called != 5 {
			t.Fatalf("closed breaker let %d of 5 calls through", called)
		}
	})
	t.Run("a failed probe opens it again", func(t *testing.T) {
		ch := make(chan Transition, 10)
		b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy, Notify: ch, Probe: func(ctx context.Context) error {
			<-ctx.Done() // a silent provider: the probe's timeout ends it
			return grpcErr(codes.DeadlineExceeded)
		}, ProbeTimeout: 5 * time.Millisecond})
		run(b, 5, grpcErr(codes.Unavailable))
		time.Sleep(open + 10*time.Millisecond) // real time: gobreaker reads time.Now for the open timeout
		start := time.Now()
		if err := b.Execute(func() error { t.Error("a caller probed"); return nil }); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("Execute() on a half-open breaker with a probe = %v, want ErrCircuitOpen", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("the rejection took %v: it waited for the probe", d)
		}
		for tr := range ch {
			if tr.From == StateHalfOpen && tr.To == StateOpen {
				if tr.Rule != RuleProbe || !strings.HasPrefix(tr.Reason(), "a half-open probe failed: no answer in time") {
					t.Fatalf("transition = %+v (%q), want a failed probe", tr, tr.Reason())
				}
				return
			}
		}
	})
}

func TestBreakerNotifiesWithoutBlocking(t *testing.T) {
	ch := make(chan Transition, 1)
	b := NewBreaker(BreakerConfig{Provider: "p", Policy: BreakerPolicy{MinRequests: 5, OpenTimeout: 10 * time.Millisecond}, Notify: ch})
	run(b, 5, grpcErr(codes.Internal))
	tr := <-ch
	if tr.Provider != "p" || tr.From != StateClosed || tr.To != StateOpen || tr.Reason() == "" {
		t.Fatalf("transition = got %+v (reason %q), want closed → open with a reason", tr, tr.Reason())
	}
	// Nobody reads ch now: the next transitions must be dropped, not block.
	time.Sleep(20 * time.Millisecond) // real time: past gobreaker's wall-clock open timeout, so the calls below transition
	done := make(chan struct{})
	go func() { run(b, 3, nil); _ = b.State(); run(b, 1, nil); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the breaker blocked on a full notification channel")
	}
}

func TestBreakerOpenRejectAllocatesNothing(t *testing.T) {
	b := NewBreaker(BreakerConfig{Provider: "p", Policy: BreakerPolicy{MinRequests: 5, OpenTimeout: time.Hour}})
	run(b, 5, grpcErr(codes.Unavailable))
	fn := func() error { return nil }
	if got := testing.AllocsPerRun(1000, func() { _ = b.Execute(fn) }); got != 0 {
		t.Fatalf("Execute() on an open breaker allocates %v times per call, want 0", got)
	}
}

// BenchmarkBreakerOpenReject measures the rejection of a call by an open
// breaker: the whole cost a backend pays during an outage. Target: under
// 1µs, 0 allocations.
func BenchmarkBreakerOpenReject(b *testing.B) {
	br := NewBreaker(BreakerConfig{Provider: "p", Policy: BreakerPolicy{MinRequests: 5, OpenTimeout: time.Hour}})
	run(br, 5, grpcErr(codes.Unavailable))
	fn := func() error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Execute(fn); err == nil {
				b.Fatal("open breaker admitted a call")
			}
		}
	})
}

// TestBreakerReconnected: a reconnection probes an open breaker at once,
// long before its open timeout, and closes it through half-open if every
// probe passes; a failed probe leaves it open; a closed breaker, or one
// without a probe, does not probe.
func TestBreakerReconnected(t *testing.T) {
	policy := BreakerPolicy{OpenTimeout: time.Hour, HalfOpenProbes: 3}
	newProbed := func(probe func(context.Context) error) (*Breaker, chan Transition) {
		ch := make(chan Transition, 10)
		return NewBreaker(BreakerConfig{Provider: "p", Policy: policy, Notify: ch, Probe: probe}), ch
	}
	t.Run("probes pass: closed through half-open", func(t *testing.T) {
		var probes atomic.Int32
		b, ch := newProbed(func(context.Context) error { probes.Add(1); return nil })
		run(b, 5, grpcErr(codes.Unavailable))
		if b.State() != StateOpen {
			t.Fatalf("state %v after 5 failures, want open", b.State())
		}
		b.Reconnected()
		testenv.Eventually(t, 10*time.Second, "the breaker to close after the reconnection", func() bool { return b.State() == StateClosed })
		if n := probes.Load(); n != 3 {
			t.Fatalf("%d probes closed it, want HalfOpenProbes (3)", n)
		}
		var got []string
		for len(ch) > 0 {
			tr := <-ch
			got = append(got, tr.From.String()+">"+tr.To.String())
		}
		if want := []string{"closed>open", "open>half-open", "half-open>closed"}; !slices.Equal(got, want) {
			t.Fatalf("transitions = %v, want %v", got, want)
		}
		if called := run(b, 5, nil); called != 5 {
			t.Fatalf("the closed breaker let %d of 5 calls through", called)
		}
		// The new state machine counts: it trips again like the first.
		run(b, 5, grpcErr(codes.Unavailable))
		if b.State() != StateOpen {
			t.Fatalf("state %v after 5 more failures, want open again", b.State())
		}
	})
	t.Run("a failed probe leaves it open", func(t *testing.T) {
		b, _ := newProbed(func(context.Context) error { return grpcErr(codes.Unavailable) })
		run(b, 5, grpcErr(codes.Unavailable))
		b.Reconnected()
		testenv.Eventually(t, 10*time.Second, "the early probe to end", func() bool { return !b.probing.Load() })
		if b.State() != StateOpen {
			t.Fatalf("state %v after a failed early probe, want open", b.State())
		}
	})
	t.Run("closed: no probe", func(t *testing.T) {
		b, _ := newProbed(func(context.Context) error { t.Error("a closed breaker probed"); return nil })
		b.Reconnected()
		if b.probing.Load() {
			t.Fatal("a closed breaker started probing")
		}
	})
	t.Run("without a probe it waits for its timeout", func(t *testing.T) {
		b := NewBreaker(BreakerConfig{Provider: "p", Policy: policy})
		run(b, 5, grpcErr(codes.Unavailable))
		b.Reconnected()
		if b.State() != StateOpen || b.probing.Load() {
			t.Fatalf("state %v, probing %v: want open, no probe", b.State(), b.probing.Load())
		}
	})
}
