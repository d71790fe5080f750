package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/defaults"
)

// ErrBulkheadFull is matched (errors.Is) by the bulkhead's refusal of an
// attempt (Bulkhead.Enter): the provider is slow or has stopped answering
// and its attempts in flight are at the bulkhead's limit. Such an attempt
// never reaches the provider and is not counted by the breaker; a first
// attempt so refused fails at once, a retry waits for its next try. The
// refusal has a RetryAfter() time.Duration method.
var ErrBulkheadFull = errors.New("too many calls in flight to a slow provider")

// BulkheadPolicy configures a provider's bulkhead, which bounds the attempts
// in flight to the provider by a limit that follows the provider's latency:
// it grows while attempts wait for a slot and the provider answers fast,
// and halves, down to MinInFlight, when it answers slowly (at most once per
// SlowAfter). An attempt beyond the limit waits for a slot unless the
// provider is slow or silent (see SlowAfter), and is then refused at once
// (ErrBulkheadFull): a healthy provider is never refused, also when the
// machine stalls, and a slow or silent one holds at most MinInFlight of the
// backend's workers (more only for as long as it takes to be found slow).
// The zero value of every field means its default (see WithDefaults).
type BulkheadPolicy struct {
	// MinInFlight is the least the limit falls to: the attempts a slow or
	// silent provider may hold. Default 4; at least 1 and at most
	// MaxInFlight.
	MinInFlight int `yaml:"min_in_flight"`
	// MaxInFlight is the most the limit grows to (Envoy's max_requests);
	// attempts beyond it wait for a slot while the provider is fast.
	// Default 256; negative turns the bulkhead off (no bound, no refusal).
	MaxInFlight int `yaml:"max_in_flight"`
	// SlowAfter is the answer time at which an answer is slow: a slow
	// answer halves the limit (at most once per SlowAfter), and once every
	// answer for SlowAfter has been slow the provider is slow and the
	// bulkhead refuses the attempts beyond its limit instead of letting
	// them wait, until an answer comes faster. A provider that answers
	// nothing, with attempts sent, for twice SlowAfter (or twice its
	// slowest recent answer, if more) is silent, and refused the same way.
	// It must exceed the provider's normal answer time under load (its
	// distance included). Default 100ms.
	SlowAfter time.Duration `yaml:"slow_after"`
}

// WithDefaults returns p with defaults in place of zero values.
func (p BulkheadPolicy) WithDefaults() BulkheadPolicy { return defaults.Fill(p, bulkheadDefaults) }

// bulkheadDefaults are the defaults of BulkheadPolicy's fields.
var bulkheadDefaults = BulkheadPolicy{MinInFlight: 4, MaxInFlight: 256, SlowAfter: 100 * time.Millisecond}

// Validate names the first bad field (YAML name), after defaults.
func (p BulkheadPolicy) Validate() error {
	p = p.WithDefaults()
	switch {
	case p.MaxInFlight > 1_000_000:
		return fmt.Errorf("max_in_flight %d: want at most 1000000 (or negative: no bulkhead)", p.MaxInFlight)
	case p.MinInFlight < 1:
		return fmt.Errorf("min_in_flight %d: want at least 1", p.MinInFlight)
	case p.MaxInFlight > 0 && p.MinInFlight > p.MaxInFlight:
		return fmt.Errorf("min_in_flight %d: want at most max_in_flight (%d)", p.MinInFlight, p.MaxInFlight)
	case p.SlowAfter < time.Millisecond || p.SlowAfter > time.Minute:
		return fmt.Errorf("slow_after %v: want 1ms to 1m", p.SlowAfter)
	}
	return nil
}

// BulkheadConfig configures NewBulkhead.
type BulkheadConfig struct {
	// Provider names the bulkhead in metrics and errors. Required.
	Provider string
	// Policy is the bulkhead policy; zero fields mean their defaults. It
	// must be valid.
	Policy BulkheadPolicy
	// Clock tells the time and schedules the waits. Default the wall clock.
	Clock clock.Clock
	// Metrics receives the refusals, the waits and the limit. Default:
	// metrics that are not registered anywhere.
	Metrics *Metrics
}

// BulkheadStatus is a snapshot of a bulkhead, for the /v1/breakers view.
type BulkheadStatus struct {
	// Limit is the current limit; 0 when the bulkhead is off.
	Limit int
	// InFlight are the attempts admitted and not yet ended; Waiting, those
	// waiting for a slot.
	InFlight, Waiting int
	// Slow is true while the bulkhead refuses instead of waiting: the last
	// answer was slow, or no answer came for SlowAfter with attempts in
	// flight.
	Slow bool
	// LastAnswer is the time the last answered attempt took.
	LastAnswer time.Duration
}

// Bulkhead bounds the attempts in flight to one provider (see
// BulkheadPolicy). Safe for concurrent use; it holds no goroutine.
type Bulkhead struct {
	provider string
	policy   BulkheadPolicy
	clock    clock.Clock
	off      bool
	errFull  *bulkheadError // allocated once: a refusal allocates nothing

	rejected, waits prometheus.Counter
	limitGauge      prometheus.Gauge

	// lastAnswer is the time the last answered attempt took, in
	// nanoseconds, for RetryAfter without the lock.
	lastAnswer atomic.Int64

	mu       sync.Mutex
	inFlight int // admitted, not yet left
	sent     int // of those, sent to the provider (Sent)
	limit    int
	waiters  []*slotWaiter // first in, first served
	// quietSince is when the provider last answered an attempt, or when
	// attempts were sent with none waiting for an answer (unix nanos of
	// clock).
	quietSince int64
	// spellSince is when the answers started to come slow (SlowAfter or
	// more) and none fast since (unix nanos of clock); 0 while the last
	// answer was fast.
	spellSince int64
	// peak is a decaying maximum of the answer times (nanoseconds): how
	// long the provider's slowest recent answers took, which sets how long
	// a silence must last to be the provider's (silentAfter).
	peak int64
	// lastCut is when a slow answer last halved the limit (unix nanos of
	// clock): at most one cut per SlowAfter, so that the answers of one
	// slow spell (a burst of them after a stall) halve it once, as TCP
	// halves its window once per round trip.
	lastCut int64
}

// slotWaiter is one attempt waiting for a slot: ch receives true when it is
// given one, false when it is refused.
type slotWaiter struct{ ch chan bool }

// NewBulkhead returns a bulkhead at its least limit. cfg.Policy must be
// valid.
func NewBulkhead(cfg BulkheadConfig) *Bulkhead {
	p := cfg.Policy.WithDefaults()
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	b := &Bulkhead{provider: cfg.Provider, policy: p, clock: cfg.Clock, off: p.MaxInFlight < 0, limit: p.MinInFlight,
		rejected:   m.bulkheadRejections.WithLabelValues(cfg.Provider),
		waits:      m.bulkheadWaits.WithLabelValues(cfg.Provider),
		limitGauge: m.bulkheadLimit.WithLabelValues(cfg.Provider),
	}
	b.errFull = &bulkheadError{b: b}
	if b.off {
		b.limit = 0
	}
	b.limitGauge.Set(float64(b.limit))
	return b
}

// Policy returns the bulkhead's policy, defaults applied.
func (b *Bulkhead) Policy() BulkheadPolicy { return b.policy }

// Enter admits one attempt: at once when the attempts in flight are below
// the limit and nobody waits; otherwise, unless the provider is slow, after
// waiting for a slot in turn. It returns an error matching ErrBulkheadFull
// when the provider is slow (at once) or falls silent during the wait, or
// ctx's error when ctx ends first. Every nil return must be paired with one
// Leave.
func (b *Bulkhead) Enter(ctx context.Context) error {
	now := b.clock.Now().UnixNano()
	b.mu.Lock()
	if b.off || (b.inFlight < b.limit && len(b.waiters) == 0) {
		b.inFlight++
		b.mu.Unlock()
		return nil
	}
	if b.slowLocked(now) {
		b.mu.Unlock()
		b.rejected.Inc()
		return b.errFull
	}
	w := &slotWaiter{ch: make(chan bool, 1)}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	b.waits.Inc()
	return b.wait(ctx, w)
}

// wait waits for w's slot: until it is given one, until the provider has
// been silent for silentAfter (refused), or until ctx ends. A provider that
// turns slow meanwhile does not refuse it: it waits for the slot its turn
// brings (the slow verdict refuses those that come after it).
func (b *Bulkhead) wait(ctx context.Context, w *slotWaiter) error {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// Check again when the provider will have been silent for
		// silentAfter (or that long from now, if nothing waits for its
		// answer).
		b.mu.Lock()
		d := b.silentAfterLocked()
		if b.sent > 0 {
			d = max(d-time.Duration(b.clock.Now().UnixNano()-b.quietSince), 0)
		}
		b.mu.Unlock()
		if timer == nil {
			timer = b.clock.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case ok := <-w.ch:
			return b.given(ok)
		case <-ctx.Done():
			if !b.dequeue(w, func() bool { return true }) {
				// Given a slot or refused meanwhile: a slot goes back.
				if <-w.ch {
					b.Leave(time.Time{})
				}
			}
			return ctx.Err()
		case <-timer.Chan():
			if b.dequeue(w, func() bool { return b.silentLocked(b.clock.Now().UnixNano()) }) {
				b.rejected.Inc()
				return b.errFull
			}
			select {
			case ok := <-w.ch:
				return b.given(ok)
			default: // still waiting: the provider answered meanwhile
			}
		}
	}
}

// given turns a waiter's answer into Enter's result.
func (b *Bulkhead) given(ok bool) error {
	if ok {
		return nil
	}
	b.rejected.Inc()
	return b.errFull
}

// dequeue removes w from the waiters if it still waits and cond, checked
// under the lock, holds; it reports whether it did.
func (b *Bulkhead) dequeue(w *slotWaiter, cond func() bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.waiters {
		if x == w {
			if !cond() {
				return false
			}
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// Sent marks an admitted attempt as sent to the provider, once: from now
// on the provider owes it an answer. An attempt that waits for its token is
// not yet sent, so that a cold sidecar's first token fetch does not make
// the provider look silent.
func (b *Bulkhead) Sent() {
	now := b.clock.Now().UnixNano()
	b.mu.Lock()
	if b.sent == 0 {
		b.quietSince = now
	}
	b.sent++
	b.mu.Unlock()
}

// slowLocked reports whether the provider is slow at now: every answer for
// SlowAfter has been slow, or it is silent (silentLocked). One late answer,
// or a burst of them, is not enough: a stall of the machine (of the sidecar
// itself, not the provider) delays every answer in flight at once, and the
// next ones come fast again.
func (b *Bulkhead) slowLocked(now int64) bool {
	return (b.spellSince != 0 && now-b.spellSince >= int64(b.policy.SlowAfter)) || b.silentLocked(now)
}

// silentLocked reports whether attempts were sent and the provider has
// answered none for silentAfter.
func (b *Bulkhead) silentLocked(now int64) bool {
	return b.sent > 0 && now-b.quietSince >= int64(b.silentAfterLocked())
}

// silentAfterLocked is how long the provider may answer nothing, with
// attempts sent, before it counts as silent: twice SlowAfter, or twice its
// slowest recent answer if that is more.
func (b *Bulkhead) silentAfterLocked() time.Duration {
	return 2 * max(b.policy.SlowAfter, time.Duration(b.peak))
}

// Leave ends an attempt admitted by Enter. sent is when the attempt went to
// the provider (and Sent was called); zero if it never did (its token could
// not be had, say), and then it says nothing of the provider's speed.
//
// An attempt answered within SlowAfter grows the limit by one if attempts
// wait for a slot, and ends a slow spell; one answered after SlowAfter or
// later starts a slow spell if none runs, and halves the limit (not below
// MinInFlight; at most once per SlowAfter). A freed slot goes to the first
// waiting attempt.
func (b *Bulkhead) Leave(sent time.Time) {
	now := b.clock.Now()
	var took time.Duration
	if !sent.IsZero() {
		took = max(now.Sub(sent), 0)
		b.lastAnswer.Store(int64(took))
	}
	b.mu.Lock()
	b.inFlight--
	limit := b.limit
	if !sent.IsZero() {
		b.sent--
		b.quietSince = now.UnixNano()
	}
	if !sent.IsZero() && !b.off {
		b.peak = max(int64(took), b.peak-b.peak/8)
		switch {
		case took >= b.policy.SlowAfter:
			if b.spellSince == 0 {
				b.spellSince = now.UnixNano()
			}
			if now.UnixNano()-b.lastCut >= int64(b.policy.SlowAfter) {
				b.limit = max(b.policy.MinInFlight, b.limit/2)
				b.lastCut = now.UnixNano()
			}
		default:
			b.spellSince = 0
			if len(b.waiters) > 0 && b.limit < b.policy.MaxInFlight {
				b.limit++
			}
		}
	}
	for len(b.waiters) > 0 && (b.off || b.inFlight < b.limit) {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.inFlight++
		w.ch <- true
	}
	changed := b.limit != limit
	limit = b.limit
	b.mu.Unlock()
	if changed {
		b.limitGauge.Set(float64(limit))
	}
}

// Status returns a snapshot of the bulkhead.
func (b *Bulkhead) Status() BulkheadStatus {
	now := b.clock.Now().UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	return BulkheadStatus{Limit: b.limit, InFlight: b.inFlight, Waiting: len(b.waiters),
		Slow: !b.off && b.slowLocked(now), LastAnswer: time.Duration(b.lastAnswer.Load())}
}

// RetryAfter is how long a refused attempt should wait before it tries
// again: the time the provider's last answer took, at least SlowAfter and
// at most a second.
func (b *Bulkhead) RetryAfter() time.Duration {
	return min(max(time.Duration(b.lastAnswer.Load()), b.policy.SlowAfter), time.Second)
}

// bulkheadError is the bulkhead's refusal, allocated once per bulkhead.
type bulkheadError struct{ b *Bulkhead }

func (e *bulkheadError) Error() string {
	last := "none yet"
	if d := e.b.lastAnswer.Load(); d > 0 {
		last = time.Duration(d).Round(time.Millisecond).String()
	}
	return fmt.Sprintf("provider %q is slow or not answering (slow_after %v; last answer took %s): its calls in flight fill the bulkhead",
		e.b.provider, e.b.policy.SlowAfter, last)
}

// Is makes the refusal match ErrBulkheadFull.
func (e *bulkheadError) Is(target error) bool { return target == ErrBulkheadFull }

// RetryAfter is the bulkhead's hint.
func (e *bulkheadError) RetryAfter() time.Duration { return e.b.RetryAfter() }
