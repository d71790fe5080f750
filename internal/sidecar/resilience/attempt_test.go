package resilience

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
)

// attemptBreaker is a breaker whose attempt-level rules read clk; its
// window rules cannot trip it and it stays open for an hour.
func attemptBreaker(clk *clock.Fake, p BreakerPolicy) (*Breaker, chan Transition) {
	p.MinRequests, p.Window, p.OpenTimeout = 1000, time.Hour, time.Hour
	p.ConsecutiveFailures, p.ConsecutiveTimeouts = -1, -1
	ch := make(chan Transition, 4)
	return NewBreaker(BreakerConfig{Provider: "p", Policy: p, Clock: clk, Notify: ch}), ch
}

// attempt runs one attempt through Start, Sent and End that ends with
// err, and returns what End (or Start) returned.
func attempt(b *Breaker, err error) error {
	a, serr := b.Start(context.Background())
	if serr != nil {
		return serr
	}
	a.Sent()
	return a.End(err)
}

// sent starts an attempt and sends it.
func sent(t *testing.T, b *Breaker) *Attempt {
	t.Helper()
	a, err := b.Start(context.Background())
	if err != nil {
		t.Fatalf("Start = %v, want admitted", err)
	}
	a.Sent()
	return a
}

func wantOpen(t *testing.T, b *Breaker, ch chan Transition, rule TripRule) {
	t.Helper()
	if b.State() != StateOpen {
		t.Fatalf("breaker %v, want open (%v)", b.State(), rule)
	}
	select {
	case tr := <-ch:
		if tr.Rule != rule || tr.Reason() == "" {
			t.Fatalf("transition %+v (%q), want rule %v", tr, tr.Reason(), rule)
		}
	default:
		t.Fatal("no transition notified")
	}
}

func tenantElsewhere() error {
	s, _ := status.New(codes.Unavailable, "tenant served by group b").WithDetails(&errdetails.ErrorInfo{
		Domain: repoolv1.ErrorDomain, Reason: repoolv1.ReasonTenantElsewhere})
	return s.Err()
}

// TestOutageRule: every attempt failing as unavailable for outage_after, 3
// at least, opens the breaker; fewer attempts, a shorter time, an answer
// in between or a tenant refused elsewhere do not.
func TestOutageRule(t *testing.T) {
	unavailable := grpcErr(codes.Unavailable)
	p := BreakerPolicy{OutageAfter: 100 * time.Millisecond, SilenceAfter: -1}
	t.Run("opens after outage_after", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		b, ch := attemptBreaker(clk, p)
		for range 3 {
			_ = attempt(b, unavailable)
			clk.Advance(30 * time.Millisecond)
		}
		if b.State() != StateClosed {
			t.Fatalf("breaker %v after 90 ms of failed attempts, want closed", b.State())
		}
		clk.Advance(10 * time.Millisecond)
		_ = attempt(b, unavailable)
		wantOpen(t, b, ch, RuleOutage)
	})
	t.Run("the front end's no-server-alive answer is an outage", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		b, ch := attemptBreaker(clk, p)
		down := status.Error(codes.Unavailable, hopPrefix+"503 (Service Unavailable); transport: received unexpected content-type \"text/plain\"\ndata: \""+repoolv1.ClusterDownText+"\"")
		for range 3 {
			_ = attempt(b, down)
			clk.Advance(40 * time.Millisecond)
		}
		_ = attempt(b, down)
		wantOpen(t, b, ch, RuleOutage)
	})
	t.Run("an attempt starting after outage_after is refused and opens it", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		b, ch := attemptBreaker(clk, p)
		for range 3 {
			_ = attempt(b, unavailable)
		}
		clk.Advance(100 * time.Millisecond)
		if err := attempt(b, nil); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("attempt after 100 ms of outage = %v, want refused circuit-open", err)
		}
		wantOpen(t, b, ch, RuleOutage)
	})
	idle := errors.New("no attempt")
	for _, tt := range []struct {
		name  string
		steps []error // one attempt each (idle: none), 40 ms apart
		opens bool
	}{
		{"two attempts are not an outage", []error{unavailable, idle, idle, idle, unavailable}, false},
		{"a success ends it", []error{unavailable, unavailable, nil, unavailable, unavailable}, false},
		{"a business answer ends it", []error{unavailable, unavailable, grpcErr(codes.NotFound), unavailable, unavailable}, false},
		{"a handover is not an outage", []error{handoverErr(), handoverErr(), handoverErr(), handoverErr(), handoverErr()}, false},
		{"a handover ends one", []error{unavailable, unavailable, handoverErr(), unavailable, unavailable}, false},
		{"a tenant served elsewhere is not an outage", []error{tenantElsewhere(), tenantElsewhere(), tenantElsewhere(), tenantElsewhere(), tenantElsewhere()}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(time.Now())
			b, _ := attemptBreaker(clk, p)
			for _, err := range tt.steps {
				if err != idle {
					_ = attempt(b, err)
				}
				clk.Advance(40 * time.Millisecond)
			}
			if want := map[bool]State{false: StateClosed, true: StateOpen}[tt.opens]; b.State() != want {
				t.Fatalf("breaker %v after %v, want %v", b.State(), tt.steps, want)
			}
		})
	}
	t.Run("negative turns it off", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		b, _ := attemptBreaker(clk, BreakerPolicy{OutageAfter: -1, SilenceAfter: -1})
		for range 50 {
			_ = attempt(b, unavailable)
			clk.Advance(time.Second)
		}
		if b.State() != StateClosed {
			t.Fatalf("breaker %v with outage_after off, want closed", b.State())
		}
	})
}

// TestSilenceRule: attempts in flight and no answer for silence_after opens
// the breaker and ends the attempts in flight, whose calls then fail
// circuit-open.
func TestSilenceRule(t *testing.T) {
	p := BreakerPolicy{OutageAfter: -1, SilenceAfter: 500 * time.Millisecond}
	t.Run("opens and ends the attempts in flight", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		b, ch := attemptBreaker(clk, p)
		clk.Advance(time.Hour) // the last answer long ago does not count: the provider was idle
		hanging := sent(t, b)
		clk.Advance(499 * time.Millisecond)
		second := sent(t, b) // 499 ms into the silence: admitted
		clk.Advance(time.Millisecond)
		if err := attempt(b, nil); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("Start after 500 ms without an answer = %v, want refused circuit-open", err)
		}
		wantOpen(t, b, ch, RuleSilence)
		for _, a := range []*Attempt{hanging, second} {
			select {
			case <-a.Context().Done():
			case <-time.After(10 * time.Second):
				t.Fatal("an attempt in flight was not ended")
			}
			if err := a.End(a.Context().Err()); !errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("End of an attempt the silence ended = %v, want circuit-open", err)
			}
		}
		if n := b.waitingAnswer.Load(); n != 0 {
			t.Fatalf("%d attempts waiting for an answer after every attempt ended, want 0", n)
		}
		// The next attempts are not ended by the old silence.
		if a, err := b.Start(context.Background()); err == nil {
			if a.Context().Err() != nil {
				t.Fatal("a new attempt starts ended")
			}
			_ = a.End(nil)
		}
	})
	t.Run("answers meanwhile keep it closed", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		b, _ := attemptBreaker(clk, p)
		slow := sent(t, b)
		for range 20 { // 2 s, an answer every 100 ms while one attempt hangs
			clk.Advance(100 * time.Millisecond)
			if err := attempt(b, grpcErr(codes.FailedPrecondition)); err == nil || errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("attempt = %v, want its own answer", err)
			}
		}
		if b.State() != StateClosed || slow.Context().Err() != nil {
			t.Fatalf("breaker %v, slow attempt ended %v: want closed and still in flight", b.State(), slow.Context().Err())
		}
		if err := slow.End(nil); err != nil {
			t.Fatalf("End = %v, want nil", err)
		}
	})
	t.Run("an attempt waiting for its token is not waiting for an answer", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		b, ch := attemptBreaker(clk, p)
		cold, err := b.Start(context.Background()) // a cold sidecar fetches its token
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second)
		if err := attempt(b, nil); err != nil || b.State() != StateClosed {
			t.Fatalf("attempt after 2 s of a token fetch = %v, breaker %v; want answered, closed", err, b.State())
		}
		cold.Sent() // the token came: now it waits for the provider
		clk.Advance(500 * time.Millisecond)
		if err := attempt(b, nil); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("Start 500 ms after the send = %v, want circuit-open", err)
		}
		wantOpen(t, b, ch, RuleSilence)
		_ = cold.End(context.Canceled)
	})
	t.Run("a timed-out attempt is no answer", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		b, ch := attemptBreaker(clk, p)
		hanging := sent(t, b)
		clk.Advance(300 * time.Millisecond)
		_ = attempt(b, context.DeadlineExceeded)
		clk.Advance(200 * time.Millisecond)
		if err := attempt(b, nil); !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("Start = %v, want circuit-open", err)
		}
		wantOpen(t, b, ch, RuleSilence)
		_ = hanging.End(context.Canceled)
	})
}

// TestTurn: while calls wait to retry, each success gives one of them its
// turn; without waiting calls a success gives none.
func TestTurn(t *testing.T) {
	clk := clock.NewFake(time.Now())
	b, _ := attemptBreaker(clk, BreakerPolicy{OutageAfter: time.Second, SilenceAfter: -1})
	_ = attempt(b, nil)
	select {
	case <-b.Turn():
		t.Fatal("a turn given with no call waiting")
	default:
	}
	b.Waiting(1)
	b.Waiting(1)
	_ = attempt(b, grpcErr(codes.Unavailable))
	select {
	case <-b.Turn():
		t.Fatal("a turn given on a failure")
	default:
	}
	_ = attempt(b, nil)
	_ = attempt(b, nil) // the turn is not taken yet: no second one
	wantTurn(t, b, "after a success with calls waiting")
	select {
	case <-b.Turn():
		t.Fatal("two turns for one untaken turn")
	default:
	}
	b.Waiting(-1)
	_ = attempt(b, grpcErr(codes.NotFound)) // a business answer: the provider works
	wantTurn(t, b, "after a business answer with a call waiting")
	b.Waiting(-1)
}

// wantTurn fails the test unless a turn is there to take.
func wantTurn(t *testing.T, b *Breaker, when string) {
	t.Helper()
	select {
	case <-b.Turn():
	default:
		t.Fatalf("no turn given %s", when)
	}
}

// TestRetryTakesItsTurn: a call waiting an hour to retry retries as soon as
// another attempt succeeds.
func TestRetryTakesItsTurn(t *testing.T) {
	clk := clock.NewFake(time.Now())
	b, _ := attemptBreaker(clk, BreakerPolicy{OutageAfter: time.Hour, SilenceAfter: -1})
	p := RetryPolicy{MaxRetries: 3, InitialInterval: time.Hour, MaxInterval: time.Hour, RandomizationFactor: -1, MaxElapsed: 10 * time.Hour}
	r := NewRetrier(RetrierConfig{Provider: "p", Policy: p, Budget: NewBudget(BudgetPolicy{}, clk), Clock: clk})
	done := make(chan error, 1)
	tries := 0
	go func() {
		done <- r.DoUntil(context.Background(), b, func(ctx context.Context) error {
			tries++
			if tries == 1 {
				return attempt(b, grpcErr(codes.Unavailable))
			}
			return attempt(b, nil)
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.Wait(ctx, 1); err != nil {
		t.Fatalf("no wait armed: %v", err)
	}
	for b.waiting.Load() == 0 { // the timer is armed just before the call counts itself waiting
		if ctx.Err() != nil {
			t.Fatal("the call never counted itself waiting")
		}
		runtime.Gosched()
	}
	_ = attempt(b, nil) // another call's attempt succeeds
	select {
	case err := <-done:
		if err != nil || tries != 2 {
			t.Fatalf("DoUntil() = %v after %d tries, want success on the 2nd", err, tries)
		}
	case <-ctx.Done():
		t.Fatal("the waiting call did not take its turn")
	}
}

// TestAttemptsConcurrently: many goroutines start and end attempts with
// mixed outcomes while the rules trip the breaker; every attempt is ended
// once and none is left waiting for an answer.
func TestAttemptsConcurrently(t *testing.T) {
	b := NewBreaker(BreakerConfig{Provider: "p", Policy: BreakerPolicy{OutageAfter: time.Millisecond,
		SilenceAfter: 2 * time.Millisecond, OpenTimeout: time.Millisecond}})
	outcomes := []error{nil, grpcErr(codes.Unavailable), grpcErr(codes.NotFound), context.DeadlineExceeded}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				_ = b.Execute(func() error {
					a, err := b.Start(context.Background())
					if err != nil {
						return err
					}
					if rng.IntN(8) != 0 {
						a.Sent()
					}
					if rng.IntN(4) == 0 {
						select {
						case <-a.Context().Done():
						case <-time.After(time.Duration(rng.IntN(3)) * time.Millisecond):
						}
					}
					return a.End(outcomes[rng.IntN(len(outcomes))])
				})
			}
		}()
	}
	wg.Wait()
	if w := b.waitingAnswer.Load(); w != 0 {
		t.Fatalf("%d attempts waiting for an answer at the end, want 0", w)
	}
}

// TestSilenceDropsTheConnection: the silence rule runs OnSilence (the
// provider drops its connection) when it opens the breaker, and the
// outage rule does not.
func TestSilenceDropsTheConnection(t *testing.T) {
	clk := clock.NewFake(time.Now())
	var drops atomic.Int32
	p := BreakerPolicy{OutageAfter: 200 * time.Millisecond, SilenceAfter: 500 * time.Millisecond,
		MinRequests: 1000, Window: time.Hour, OpenTimeout: time.Hour, ConsecutiveFailures: -1, ConsecutiveTimeouts: -1}
	b := NewBreaker(BreakerConfig{Provider: "p", Policy: p, Clock: clk, OnSilence: func() { drops.Add(1) }})
	hanging := sent(t, b)
	clk.Advance(500 * time.Millisecond)
	if err := attempt(b, nil); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Start after 500 ms without an answer = %v, want circuit-open", err)
	}
	if n := drops.Load(); n != 1 {
		t.Fatalf("OnSilence ran %d times when the silence rule opened the breaker, want 1", n)
	}
	_ = hanging.End(hanging.Context().Err())

	o := NewBreaker(BreakerConfig{Provider: "p", Policy: p, Clock: clk, OnSilence: func() { t.Error("the outage rule ran OnSilence") }})
	for range 4 {
		_ = attempt(o, grpcErr(codes.Unavailable))
		clk.Advance(100 * time.Millisecond)
	}
	if o.State() != StateOpen {
		t.Fatalf("state %v after 300 ms of unavailable attempts, want open (outage)", o.State())
	}
}
