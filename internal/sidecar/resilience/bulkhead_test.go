package resilience

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/testenv"
)

// fakeBulkhead is a bulkhead on a fake clock.
func fakeBulkhead(p BulkheadPolicy) (*Bulkhead, *clock.Fake, *Metrics) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	m := NewMetrics(nil)
	return NewBulkhead(BulkheadConfig{Provider: "p", Policy: p, Clock: clk, Metrics: m}), clk, m
}

// enter admits n attempts and sends them, failing the test on a refusal;
// it returns when they were sent.
func enter(t *testing.T, b *Bulkhead, clk *clock.Fake, n int) []time.Time {
	t.Helper()
	sent := make([]time.Time, n)
	for i := range n {
		if err := b.Enter(context.Background()); err != nil {
			t.Fatalf("Enter #%d = %v, want admitted at once", i+1, err)
		}
		b.Sent()
		sent[i] = clk.Now()
	}
	return sent
}

// waitIn starts Enter in a goroutine and returns once it waits for a slot;
// the channel receives Enter's result.
func waitIn(t *testing.T, b *Bulkhead, ctx context.Context) <-chan error {
	t.Helper()
	before := b.Status().Waiting
	got := make(chan error, 1)
	go func() { got <- b.Enter(ctx) }()
	testenv.Eventually(t, 10*time.Second, "an attempt to wait for a slot", func() bool { return b.Status().Waiting == before+1 })
	return got
}

// result waits for a waiting Enter's result.
func result(t *testing.T, got <-chan error) error {
	t.Helper()
	select {
	case err := <-got:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting Enter never returned")
		return nil
	}
}

// TestBulkheadWaitsAndGrowsForAFastProvider: beyond the limit an attempt
// waits instead of being refused while the provider answers fast; each fast
// answer while attempts wait grows the limit by one and gives the slot to
// the first waiting attempt, up to max_in_flight.
func TestBulkheadWaitsAndGrowsForAFastProvider(t *testing.T) {
	b, clk, m := fakeBulkhead(BulkheadPolicy{MinInFlight: 2, MaxInFlight: 3})
	sent := enter(t, b, clk, 2)
	first, second := waitIn(t, b, context.Background()), waitIn(t, b, context.Background())
	clk.Advance(time.Millisecond)
	b.Leave(sent[0]) // fast: the limit grows to 3 and both waiting attempts get a slot
	for i, got := range []<-chan error{first, second} {
		if err := result(t, got); err != nil {
			t.Fatalf("waiting attempt #%d = %v, want admitted", i+1, err)
		}
	}
	if s := b.Status(); s.Limit != 3 || s.InFlight != 3 || s.Waiting != 0 || s.Slow {
		t.Fatalf("status %+v, want limit 3, 3 in flight, none waiting, not slow", s)
	}
	third := waitIn(t, b, context.Background())
	clk.Advance(time.Millisecond)
	b.Leave(sent[1]) // fast, but the limit is at max_in_flight: the slot only changes hands
	if err := result(t, third); err != nil || b.Status().Limit != 3 {
		t.Fatalf("at max_in_flight: waiting attempt = %v, limit %d; want admitted, limit 3", err, b.Status().Limit)
	}
	if r, w := testutil.ToFloat64(m.bulkheadRejections.WithLabelValues("p")), testutil.ToFloat64(m.bulkheadWaits.WithLabelValues("p")); r != 0 || w != 3 {
		t.Fatalf("rejections %v, waits %v; want 0 and 3", r, w)
	}
	if got := testutil.ToFloat64(m.bulkheadLimit.WithLabelValues("p")); got != 3 {
		t.Fatalf("limit gauge %v, want 3", got)
	}
}

// TestBulkheadRefusesForASlowProvider: slow answers halve the limit (once
// per slow_after, not below min_in_flight); once every answer for
// slow_after has been slow, an attempt beyond the limit is refused at once,
// without allocating, with an error that is neither retried nor counted by
// the breaker and says when to come back; a fast answer ends it.
func TestBulkheadRefusesForASlowProvider(t *testing.T) {
	b, clk, m := fakeBulkhead(BulkheadPolicy{MinInFlight: 2, MaxInFlight: 16})
	b.limit = 8 // as if it had grown
	sent := enter(t, b, clk, 8)
	clk.Advance(300 * time.Millisecond)
	b.Leave(sent[0])
	b.Leave(sent[1])
	if s := b.Status(); s.Limit != 4 || s.InFlight != 6 || s.Slow || s.LastAnswer != 300*time.Millisecond {
		t.Fatalf("after two slow answers at once: %+v, want limit 4 (8 halved once: one cut per slow_after), 6 in flight, not slow yet (one burst), last answer 300ms", s)
	}
	clk.Advance(100 * time.Millisecond)
	b.Leave(sent[2]) // slow answers for slow_after now
	if s := b.Status(); s.Limit != 2 || !s.Slow || s.LastAnswer != 400*time.Millisecond {
		t.Fatalf("after slow answers for slow_after: %+v, want limit 2 (halved again, not below 2), slow, last answer 400ms", s)
	}
	err := b.Enter(context.Background())
	if !errors.Is(err, ErrBulkheadFull) || Retryable(err) || Code(err) != codes.Unavailable || FastFail(err) != FastFailBulkhead || !excluded(err) {
		t.Fatalf("Enter with a slow provider = %v (retryable %v, code %v, fast-fail %q, excluded %v); want ErrBulkheadFull, not retryable, UNAVAILABLE, %q, excluded",
			err, Retryable(err), Code(err), FastFail(err), excluded(err), FastFailBulkhead)
	}
	var hint interface{ RetryAfter() time.Duration }
	if !errors.As(err, &hint) || hint.RetryAfter() != 400*time.Millisecond {
		t.Fatalf("the refusal's retry-after = %v, want the last answer's 400ms", hint)
	}
	if msg := err.Error(); !strings.Contains(msg, `"p"`) || !strings.Contains(msg, "400ms") || !strings.Contains(msg, "slow_after 100ms") {
		t.Fatalf("refusal %q: want the provider, its last answer time and slow_after named", msg)
	}
	if got := testing.AllocsPerRun(100, func() { _ = b.Enter(context.Background()) }); got != 0 {
		t.Fatalf("a refusal allocates %v times, want 0", got)
	}
	// 1 + AllocsPerRun's 100 runs and its warm-up run.
	if got := testutil.ToFloat64(m.bulkheadRejections.WithLabelValues("p")); got != 102 {
		t.Fatalf("rejections = %v, want 102", got)
	}
	for _, s := range sent[3:7] {
		b.Leave(s) // slow too: 1 left in flight, below the limit of 2
	}
	if err := b.Enter(context.Background()); err != nil {
		t.Fatalf("Enter below the limit with a slow provider = %v, want admitted", err)
	}
	b.Sent()
	now := clk.Now()
	clk.Advance(time.Millisecond)
	b.Leave(now) // a fast answer: no longer slow
	if s := b.Status(); s.Slow || s.Limit != 2 {
		t.Fatalf("after a fast answer: %+v, want not slow, limit 2", s)
	}
	sent = enter(t, b, clk, 1)                    // with sent[7], at the limit again
	waiting := waitIn(t, b, context.Background()) // waits again instead of being refused
	clk.Advance(time.Millisecond)
	b.Leave(sent[0])
	if err := result(t, waiting); err != nil {
		t.Fatalf("waiting attempt = %v, want admitted", err)
	}
}

// TestBulkheadRidesAStall: a stall of the machine delays every answer in
// flight at once — a burst of late answers — and the next ones are fast:
// the provider is not slow, nothing is refused, and the attempts that
// waited through it get their slots.
func TestBulkheadRidesAStall(t *testing.T) {
	b, clk, m := fakeBulkhead(BulkheadPolicy{MinInFlight: 4})
	sent := enter(t, b, clk, 4)
	clk.Advance(5 * time.Millisecond)
	w1, w2 := waitIn(t, b, context.Background()), waitIn(t, b, context.Background())
	clk.Advance(145 * time.Millisecond) // the stall: 150 ms without an answer, under twice slow_after
	for _, s := range sent {
		b.Leave(s) // the burst: four late answers at once
	}
	for i, got := range []<-chan error{w1, w2} {
		if err := result(t, got); err != nil {
			t.Fatalf("attempt #%d that waited through the stall = %v, want admitted", i+1, err)
		}
	}
	if s := b.Status(); s.Slow {
		t.Fatalf("after a burst of late answers: %+v, want not slow", s)
	}
	sent = enter(t, b, clk, 2) // below the limit (min 4)
	clk.Advance(2 * time.Millisecond)
	b.Leave(sent[0]) // fast again
	if err := b.Enter(context.Background()); err != nil {
		t.Fatalf("Enter after the stall = %v, want admitted", err)
	}
	if got := testutil.ToFloat64(m.bulkheadRejections.WithLabelValues("p")); got != 0 {
		t.Fatalf("rejections = %v, want 0", got)
	}
}

// TestBulkheadRefusesWhenTheProviderFallsSilent: attempts wait while the
// provider answers; once the attempts sent have had no answer for twice
// slow_after, the waiting attempts are refused and so are the next ones,
// at once. A provider whose recent answers were slower gets longer.
func TestBulkheadRefusesWhenTheProviderFallsSilent(t *testing.T) {
	b, clk, _ := fakeBulkhead(BulkheadPolicy{MinInFlight: 2})
	enter(t, b, clk, 2)
	clk.Advance(40 * time.Millisecond)
	waiting := waitIn(t, b, context.Background())
	if err := clk.Wait(context.Background(), 1); err != nil { // the waiter's timer
		t.Fatal(err)
	}
	clk.Advance(159 * time.Millisecond)
	select {
	case err := <-waiting:
		t.Fatalf("a waiting attempt returned %v 199 ms into the silence, want it still waiting", err)
	default:
	}
	clk.Advance(time.Millisecond)
	if err := result(t, waiting); !errors.Is(err, ErrBulkheadFull) {
		t.Fatalf("a waiting attempt 200 ms into the silence = %v, want refused", err)
	}
	if err := b.Enter(context.Background()); !errors.Is(err, ErrBulkheadFull) {
		t.Fatalf("Enter during the silence = %v, want refused at once", err)
	}
	if s := b.Status(); !s.Slow || s.InFlight != 2 || s.Waiting != 0 {
		t.Fatalf("status %+v, want slow, 2 in flight, none waiting", s)
	}

	t.Run("after slower answers, a longer silence", func(t *testing.T) {
		b, clk, _ := fakeBulkhead(BulkheadPolicy{MinInFlight: 1})
		sent := enter(t, b, clk, 1)
		clk.Advance(300 * time.Millisecond)
		b.Leave(sent[0]) // a 300 ms answer
		sent = enter(t, b, clk, 1)
		clk.Advance(5 * time.Millisecond)
		b.Leave(sent[0]) // a fast one: no slow spell; the peak decays to 262.5 ms
		enter(t, b, clk, 1)
		clk.Advance(520 * time.Millisecond)
		if s := b.Status(); s.Slow {
			t.Fatalf("520 ms without an answer after a 300 ms one: %+v, want not silent yet (twice the recent peak)", s)
		}
		clk.Advance(5 * time.Millisecond)
		if s := b.Status(); !s.Slow {
			t.Fatalf("525 ms without an answer after a 300 ms one: %+v, want silent", s)
		}
	})
}

// TestBulkheadTokenWaitIsNotSilence: attempts admitted but not yet sent
// (waiting for their token) owe no answer: however long they take, the
// attempts behind them wait instead of being refused.
func TestBulkheadTokenWaitIsNotSilence(t *testing.T) {
	b, clk, _ := fakeBulkhead(BulkheadPolicy{MinInFlight: 1})
	if err := b.Enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	waiting := waitIn(t, b, context.Background())
	if err := clk.Wait(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if err := clk.Wait(context.Background(), 1); err != nil { // re-armed, still waiting
		t.Fatal(err)
	}
	if s := b.Status(); s.Waiting != 1 || s.Slow {
		t.Fatalf("after a 1 s token wait: %+v, want one waiting, not slow", s)
	}
	b.Leave(time.Time{}) // never sent: the slot changes hands, nothing learned
	if err := result(t, waiting); err != nil {
		t.Fatalf("waiting attempt = %v, want admitted", err)
	}
	if s := b.Status(); s.Limit != 1 || s.LastAnswer != 0 {
		t.Fatalf("status %+v, want limit 1 and no answer recorded", s)
	}
}

// TestBulkheadWaitEndsWithTheContext: a waiting attempt whose context ends
// returns the context's error and leaves no slot taken.
func TestBulkheadWaitEndsWithTheContext(t *testing.T) {
	b, clk, _ := fakeBulkhead(BulkheadPolicy{MinInFlight: 1})
	sent := enter(t, b, clk, 1)
	ctx, cancel := context.WithCancel(context.Background())
	waiting := waitIn(t, b, ctx)
	cancel()
	if err := result(t, waiting); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting attempt whose context ended = %v, want context.Canceled", err)
	}
	b.Leave(sent[0])
	if s := b.Status(); s.InFlight != 0 || s.Waiting != 0 {
		t.Fatalf("status %+v, want nothing in flight or waiting", s)
	}
}

// TestBulkheadDefaultsAndOff: the default admits 4 at once and lets a fifth
// wait for a fast provider (it never refuses one); a negative max_in_flight
// turns the bulkhead off.
func TestBulkheadDefaultsAndOff(t *testing.T) {
	b, clk, _ := fakeBulkhead(BulkheadPolicy{})
	if p := b.Policy(); p != (BulkheadPolicy{MinInFlight: 4, MaxInFlight: 256, SlowAfter: 100 * time.Millisecond}) {
		t.Fatalf("default policy %+v", p)
	}
	sent := enter(t, b, clk, 4)
	fifth := waitIn(t, b, context.Background())
	clk.Advance(time.Millisecond)
	b.Leave(sent[0])
	if err := result(t, fifth); err != nil {
		t.Fatalf("a fifth attempt to a fast provider = %v, want admitted after a wait", err)
	}
	off, _, _ := fakeBulkhead(BulkheadPolicy{MaxInFlight: -1})
	for i := range 10_000 {
		if err := off.Enter(context.Background()); err != nil {
			t.Fatalf("Enter #%d with the bulkhead off = %v", i+1, err)
		}
	}
}

// TestBulkheadPolicyValidate names each bad field.
func TestBulkheadPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p    BulkheadPolicy
		want string
	}{
		{BulkheadPolicy{MinInFlight: -1}, "min_in_flight -1"},
		{BulkheadPolicy{MinInFlight: 8, MaxInFlight: 4}, "min_in_flight 8: want at most max_in_flight (4)"},
		{BulkheadPolicy{MaxInFlight: 2_000_000}, "max_in_flight 2000000"},
		{BulkheadPolicy{SlowAfter: time.Microsecond}, "slow_after 1µs"},
		{BulkheadPolicy{SlowAfter: time.Hour}, "slow_after 1h0m0s"},
	} {
		if err := tc.p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error with %q", tc.p, err, tc.want)
		}
	}
	for _, p := range []BulkheadPolicy{{}, {MaxInFlight: -1, MinInFlight: 100}, {MinInFlight: 1, MaxInFlight: 1}} {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", p, err)
		}
	}
	if err := (Policy{Bulkhead: BulkheadPolicy{MinInFlight: -3}}).Validate(); err == nil || !strings.HasPrefix(err.Error(), "bulkhead.min_in_flight") {
		t.Errorf("Policy.Validate = %v, want it named bulkhead.min_in_flight", err)
	}
}

// TestBulkheadConcurrently: many goroutines enter, send and leave with
// mixed answer times (real clock) and some give up waiting; the attempts
// in flight never exceed max_in_flight, and the bulkhead ends empty.
func TestBulkheadConcurrently(t *testing.T) {
	b := NewBulkhead(BulkheadConfig{Provider: "p", Policy: BulkheadPolicy{MinInFlight: 2, MaxInFlight: 6, SlowAfter: 2 * time.Millisecond}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := 0
	for g := range 32 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3))*time.Millisecond)
				if err := b.Enter(ctx); err != nil {
					cancel()
					continue
				}
				cancel()
				mu.Lock()
				peak = max(peak, b.Status().InFlight)
				mu.Unlock()
				var at time.Time
				if rng.IntN(8) != 0 {
					b.Sent()
					at = time.Now()
					time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // the provider's answer time
				}
				b.Leave(at)
			}
		})
	}
	wg.Wait()
	if s := b.Status(); s.InFlight != 0 || s.Waiting != 0 || peak > 6 || b.sent != 0 {
		t.Fatalf("at the end: %+v (%d sent), peak %d; want nothing in flight, sent or waiting, peak ≤ 6", s, b.sent, peak)
	}
}
