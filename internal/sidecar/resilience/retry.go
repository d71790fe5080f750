package resilience

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/defaults"
)

// ErrBudgetSpent is matched (errors.Is) by the error of a call whose retry
// was refused by the retry budget; the error also wraps the last attempt's
// error, so it keeps that error's gRPC code.
var ErrBudgetSpent = errors.New("retry budget spent")

// RetryPolicy configures the retries of transient failures (UNAVAILABLE)
// with exponential backoff and jitter. The zero value of every field means
// its default. Retries always stop at the call's deadline.
type RetryPolicy struct {
	// MaxRetries is the number of retries after the first attempt. Default
	// 5; negative means no retries. With the default waits (nominally 25,
	// 50, 100, 200 and 250 ms, on average 625 ms in all) a call rides out
	// a refused connection or a reset while the VIP moves. The front end's
	// answer during a handover (Handover) is retried until MaxElapsed
	// instead, and spends no budget: a leader change under a database
	// switchover takes about 2 s.
	MaxRetries int `yaml:"max_retries"`
	// InitialInterval is the nominal wait before the first retry. Default
	// 25ms.
	InitialInterval time.Duration `yaml:"initial_interval"`
	// Multiplier grows the nominal wait after each retry. Default 2; at
	// least 1.
	Multiplier float64 `yaml:"multiplier"`
	// MaxInterval caps the nominal wait. Default 250ms.
	MaxInterval time.Duration `yaml:"max_interval"`
	// RandomizationFactor spreads each wait uniformly over
	// [1-f, 1+f] × nominal. Default 1 (full jitter: anywhere from 0 to twice
	// the nominal wait, same mean); negative means 0 (no jitter).
	RandomizationFactor float64 `yaml:"randomization_factor"`
	// MaxElapsed bounds the time spent retrying, measured from the first
	// failure; the call's deadline bounds it further. It is how long a call
	// waits out a handover: a database switchover under the group leaves
	// the calls unanswered for 1.7–2.2 s (docs/ha.md). Default 3s, the
	// default timeout: a call waits until its deadline.
	MaxElapsed time.Duration `yaml:"max_elapsed"`
}

// WithDefaults returns p with defaults in place of zero values.
func (p RetryPolicy) WithDefaults() RetryPolicy { return defaults.Fill(p, retryDefaults) }

// retryDefaults are the defaults of RetryPolicy's fields.
var retryDefaults = RetryPolicy{
	MaxRetries: 5, InitialInterval: 25 * time.Millisecond, Multiplier: 2,
	MaxInterval: 250 * time.Millisecond, RandomizationFactor: 1, MaxElapsed: 3 * time.Second,
}

// Validate names the first bad field (YAML name), after defaults.
func (p RetryPolicy) Validate() error {
	p = p.WithDefaults()
	switch {
	case p.MaxRetries > 10:
		return fmt.Errorf("max_retries %d: want at most 10", p.MaxRetries)
	case p.InitialInterval < 0:
		return fmt.Errorf("initial_interval %v: must not be negative", p.InitialInterval)
	case p.Multiplier < 1:
		return fmt.Errorf("multiplier %v: want at least 1", p.Multiplier)
	case p.MaxInterval < p.InitialInterval:
		return fmt.Errorf("max_interval %v: want at least initial_interval %v", p.MaxInterval, p.InitialInterval)
	case p.RandomizationFactor > 1:
		return fmt.Errorf("randomization_factor %v: want at most 1", p.RandomizationFactor)
	case p.MaxElapsed < 0:
		return fmt.Errorf("max_elapsed %v: must not be negative", p.MaxElapsed)
	}
	return nil
}

// RetrierConfig configures NewRetrier.
type RetrierConfig struct {
	// Provider labels the metrics. Required.
	Provider string
	// Policy is the retry policy; zero fields mean their defaults.
	Policy RetryPolicy
	// Budget bounds the retries. Required; share one per provider.
	Budget *Budget
	// Clock measures elapsed time for MaxElapsed and schedules the waits
	// between attempts. Default the wall clock.
	Clock clock.Clock
	// Metrics counts retries and budget refusals. Default: metrics that are
	// not registered anywhere.
	Metrics *Metrics
}

// Retrier retries transient failures (see Retryable) of one provider's
// calls. Safe for concurrent use; it holds no goroutine.
type Retrier struct {
	policy   RetryPolicy
	budget   *Budget
	clock    clock.Clock
	retries  prometheus.Counter
	refusals prometheus.Counter
}

// NewRetrier returns a retrier. cfg.Policy must be valid.
func NewRetrier(cfg RetrierConfig) *Retrier {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Retrier{
		policy:   cfg.Policy.WithDefaults(),
		budget:   cfg.Budget,
		clock:    cfg.Clock,
		retries:  cfg.Metrics.retries.WithLabelValues(cfg.Provider),
		refusals: cfg.Metrics.budgetRefusals.WithLabelValues(cfg.Provider),
	}
}

// Policy returns the retrier's policy, defaults applied.
func (r *Retrier) Policy() RetryPolicy { return r.policy }

// Do runs op, and runs it again after a backoff while it fails with a
// retryable error (or, on a retry, is refused by the bulkhead), the policy
// allows another retry, the budget has one to spend and the schedule has
// time left (backOff: max_elapsed, and ctx's deadline less
// lastAttemptRoom). It returns op's last
// error; if the budget refused a retry, that error also matches
// ErrBudgetSpent; if ctx ended during a wait, ctx's error.
//
// Every call to Do is one call for the budget.
func (r *Retrier) Do(ctx context.Context, op func(context.Context) error) error {
	return r.DoUntil(ctx, nil, op)
}

// Waker tells calls waiting to retry when to stop waiting. Breaker is one.
type Waker interface {
	// Wake returns a channel that is closed when every waiting call should
	// stop waiting (the breaker opened: the next attempt is refused).
	Wake() <-chan struct{}
	// Turn returns a channel on which one waiting call at a time is told
	// to retry now (the provider answered again).
	Turn() <-chan struct{}
	// Waiting counts the calls waiting: +1, then -1.
	Waiting(delta int)
}

// DoUntil is Do, except that a wait to retry ends early when w says so:
// op then runs at once. A nil w never ends a wait.
func (r *Retrier) DoUntil(ctx context.Context, w Waker, op func(context.Context) error) error {
	r.budget.Call()
	err := op(ctx)
	if !Retryable(err) || r.policy.MaxRetries < 0 {
		return err
	}
	b := r.backOff(ctx)
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	counted := 0 // retries after answers other than a handover's
	for {
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			return err // elapsed time or the deadline are used up
		}
		// A handover's answer comes from the front end, not a server: its
		// retries neither use up max_retries nor spend the budget, so that
		// a call waits out a leader change of up to max_elapsed.
		if !Handover(err) {
			if counted++; counted > r.policy.MaxRetries {
				return err
			}
			if !r.budget.TryRetry() {
				r.refusals.Inc()
				return fmt.Errorf("%w: %w", ErrBudgetSpent, err)
			}
		}
		if timer == nil {
			timer = r.clock.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		if cerr := r.wait(ctx, w, timer); cerr != nil {
			return fmt.Errorf("%w (waiting to retry after: %v)", cerr, err)
		}
		r.retries.Inc()
		// A retry the bulkhead refuses waits for another: it is a call the
		// provider already failed for a reason worth a retry, and the
		// attempts that fill the bulkhead will end (answered, timed out, or
		// ended by the silence rule). Only a first attempt the bulkhead
		// refuses fails at once.
		if err = op(ctx); !Retryable(err) && !errors.Is(err, ErrBulkheadFull) {
			return err
		}
	}
}

// wait waits for timer, or until w says to stop waiting, or ctx ends (its
// error).
func (r *Retrier) wait(ctx context.Context, w Waker, timer clock.Timer) error {
	var wake, turn <-chan struct{} // nil: never
	if w != nil {
		wake, turn = w.Wake(), w.Turn()
		w.Waiting(1)
		defer w.Waiting(-1)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.Chan():
	case <-wake:
	case <-turn:
	}
	return nil
}

// lastAttemptRoom is the time a call's last attempt is given before the
// call's deadline: no attempt is planned to start later than this before
// it. An answer through the front end takes a few milliseconds.
const lastAttemptRoom = 50 * time.Millisecond

// backOff builds the wait schedule of one call, every field set: the
// library's defaults would allow 15 minutes of retrying. The retries end at
// max_elapsed after the first failure, or lastAttemptRoom before ctx's
// deadline if that is sooner, and a wait that would end past that is cut
// short so that the last attempt is made then (lastWait): a call whose
// next nominal wait does not fit still has its last try at the end of what
// it may wait, when a handover may be over.
func (r *Retrier) backOff(ctx context.Context) backoff.BackOff {
	p := r.policy
	limit := p.MaxElapsed
	if dl, ok := ctx.Deadline(); ok {
		// The deadline is a wall-clock time, like the timers.
		limit = min(limit, time.Until(dl)-lastAttemptRoom)
	}
	exp := &backoff.ExponentialBackOff{
		InitialInterval:     p.InitialInterval,
		RandomizationFactor: max(p.RandomizationFactor, 0),
		Multiplier:          p.Multiplier,
		MaxInterval:         p.MaxInterval,
		MaxElapsedTime:      0, // no limit of the library's: lastWait ends the schedule
		Stop:                backoff.Stop,
		Clock:               r.clock,
	}
	exp.Reset()
	return backoff.WithContext(&lastWait{BackOff: exp, clock: r.clock, until: r.clock.Now().Add(limit)}, ctx)
}

// lastWait ends a wait schedule at until: a wait that would end past it
// ends at it instead, and none is planned from it on.
type lastWait struct {
	backoff.BackOff
	clock clock.Clock
	until time.Time
}

// NextBackOff returns the next wait, cut to end at until, or backoff.Stop.
func (l *lastWait) NextBackOff() time.Duration {
	wait := l.BackOff.NextBackOff()
	left := l.until.Sub(l.clock.Now())
	if wait == backoff.Stop || left <= 0 {
		return backoff.Stop
	}
	return min(wait, left)
}
