package resilience

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc/codes"
)

// ErrCircuitOpen is matched (errors.Is) by every rejection of an open or
// saturated half-open breaker. The rejection also has a RetryAfter()
// time.Duration method telling how long the breaker stays open (for a
// half-open breaker, a fixed 250 ms: its probes settle soon).
var ErrCircuitOpen = errors.New("circuit breaker is open")

// halfOpenRetryAfter is the retry-after hint of a half-open breaker whose
// probes are all in flight: they settle within one call timeout, usually
// much sooner.
const halfOpenRetryAfter = 250 * time.Millisecond

// BreakerPolicy configures a provider's circuit breaker. The zero value of
// every field means its default (see WithDefaults).
type BreakerPolicy struct {
	// FailureRatio trips the breaker when failures / (successes + failures)
	// over the window reaches it. Default 0.5; range (0, 1].
	FailureRatio float64 `yaml:"failure_ratio"`
	// MinRequests is how many counted outcomes (successes + failures; not
	// excluded ones) the window must hold before the ratio may trip the
	// breaker. Default 20.
	MinRequests uint32 `yaml:"min_requests"`
	// Window is the rolling window over which outcomes are counted. Default
	// 10s.
	Window time.Duration `yaml:"window"`
	// Buckets divides Window; outcomes expire one bucket (Window/Buckets) at
	// a time. Default 10; at most 1000.
	Buckets int `yaml:"buckets"`
	// OpenTimeout is how long an open breaker rejects calls before it lets
	// probes through (half-open). Default 5s.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenProbes is how many calls a half-open breaker lets through.
	// All of them must succeed to close it; one failure opens it again.
	// Default 3.
	HalfOpenProbes uint32 `yaml:"half_open_probes"`
}

// WithDefaults returns p with defaults in place of zero values.
func (p BreakerPolicy) WithDefaults() BreakerPolicy {
	if p.FailureRatio == 0 {
		p.FailureRatio = 0.5
	}
	if p.MinRequests == 0 {
		p.MinRequests = 20
	}
	if p.Window == 0 {
		p.Window = 10 * time.Second
	}
	if p.Buckets == 0 {
		p.Buckets = 10
	}
	if p.OpenTimeout == 0 {
		p.OpenTimeout = 5 * time.Second
	}
	if p.HalfOpenProbes == 0 {
		p.HalfOpenProbes = 3
	}
	return p
}

// Validate names the first bad field (YAML name), after defaults.
func (p BreakerPolicy) Validate() error {
	p = p.WithDefaults()
	switch {
	case p.FailureRatio <= 0 || p.FailureRatio > 1:
		return fmt.Errorf("failure_ratio %v: want a value in (0, 1]", p.FailureRatio)
	case p.Window < time.Millisecond:
		return fmt.Errorf("window %v: want at least 1ms", p.Window)
	case p.Buckets < 1 || p.Buckets > 1000:
		return fmt.Errorf("buckets %d: want 1 to 1000", p.Buckets)
	case p.Window/time.Duration(p.Buckets) < time.Millisecond:
		return fmt.Errorf("buckets %d: a bucket of window %v must last at least 1ms", p.Buckets, p.Window)
	case p.OpenTimeout < time.Millisecond:
		return fmt.Errorf("open_timeout %v: want at least 1ms", p.OpenTimeout)
	}
	return nil
}

// State is a breaker's state.
type State int

// Breaker states.
const (
	StateClosed State = iota
	StateHalfOpen
	StateOpen
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateHalfOpen:
		return "half-open"
	case StateOpen:
		return "open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

func fromGobreaker(s gobreaker.State) State {
	switch s {
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	case gobreaker.StateOpen:
		return StateOpen
	}
	return StateClosed
}

// Transition is one change of a breaker's state, delivered on
// BreakerConfig.Notify for logging.
type Transition struct {
	Provider string
	From, To State
	At       time.Time
	// For a transition to open from closed: the failures and counted
	// outcomes in the window that tripped it. Both zero otherwise.
	Failures, Total uint32
	// LastFailure is the code of the latest failure before the transition.
	LastFailure codes.Code
	// Window and Ratio are the policy's window and failure ratio.
	Window time.Duration
	Ratio  float64
}

// Reason says why the breaker opened; empty for other transitions.
func (t Transition) Reason() string {
	if t.To != StateOpen {
		return ""
	}
	if t.Total == 0 {
		return fmt.Sprintf("a half-open probe failed (%v)", t.LastFailure)
	}
	return fmt.Sprintf("failure ratio %.0f%% (%d of %d calls) in %v reached %.0f%%; last failure %v",
		100*float64(t.Failures)/float64(t.Total), t.Failures, t.Total, t.Window, 100*t.Ratio, t.LastFailure)
}

// BreakerConfig configures NewBreaker.
type BreakerConfig struct {
	// Provider names the breaker in metrics, logs and errors. Required.
	Provider string
	// Policy is the breaker policy; zero fields mean their defaults.
	Policy BreakerPolicy
	// Metrics receives the state and transitions. Default: metrics that are
	// not registered anywhere.
	Metrics *Metrics
	// Notify, when set, receives every transition. The breaker never
	// blocks on it: a transition that does not fit is dropped and counted.
	Notify chan<- Transition
}

// Counts are the outcomes a breaker holds in its current window (closed) or
// since it became half-open.
type Counts struct {
	Requests, Successes, Failures, Exclusions uint32
	ConsecutiveSuccesses, ConsecutiveFailures uint32
}

// Status is a snapshot of a breaker for the /v1/breakers view.
type Status struct {
	Provider string
	State    State
	// Since is when the breaker entered State (or was created).
	Since time.Time
	// RetryAfter is how long an open breaker keeps rejecting calls.
	RetryAfter time.Duration
	Counts     Counts
	// Trips counts the transitions to open since the breaker was created.
	Trips uint64
	// LastTrip and LastTripReason describe the latest transition to open;
	// LastTrip is zero if the breaker never opened.
	LastTrip       time.Time
	LastTripReason string
}

// Breaker is one provider's circuit breaker: sony/gobreaker's local
// breaker over a rolling window, tripping on a failure ratio (never on a
// consecutive-failure count, which a rolling window would decay). It counts
// the outcome of whatever function Execute runs — in the sidecar, the whole
// retried call, so one logical call is one outcome.
//
// Time comes from the wall clock: gobreaker reads time.Now itself.
//
// A Breaker is safe for concurrent use. It holds no goroutine and needs no
// cleanup.
type Breaker struct {
	provider string
	policy   BreakerPolicy
	cb       *gobreaker.CircuitBreaker[struct{}]
	notify   chan<- Transition

	// Metric children resolved once, so the callbacks only touch atomics.
	stateGauge  prometheus.Gauge
	transitions [3][3]prometheus.Counter // [from][to]; nil if impossible
	dropped     prometheus.Counter

	// Rejections, allocated once so that rejecting allocates nothing.
	errOpen, errBusy *openError

	// Written by the callbacks, under gobreaker's lock, with atomics only;
	// read anywhere.
	since        atomic.Int64  // unix nanos of the last transition
	opened       atomic.Int64  // unix nanos of the last transition to open
	lastTrip     atomic.Int64  // unix nanos of the last trip
	trips        atomic.Uint64 // transitions to open
	tripFailures atomic.Uint32 // failures in the window that tripped it
	tripTotal    atomic.Uint32 // counted outcomes in that window; 0: a probe failed
	lastFailure  atomic.Uint32 // codes.Code of the latest failure
}

// NewBreaker returns a closed breaker. cfg.Policy must be valid.
func NewBreaker(cfg BreakerConfig) *Breaker {
	p := cfg.Policy.WithDefaults()
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	b := &Breaker{provider: cfg.Provider, policy: p, notify: cfg.Notify,
		stateGauge: m.state.WithLabelValues(cfg.Provider),
		dropped:    m.droppedEvents.WithLabelValues(cfg.Provider),
	}
	for _, ft := range [][2]State{{StateClosed, StateOpen}, {StateOpen, StateHalfOpen}, {StateHalfOpen, StateClosed}, {StateHalfOpen, StateOpen}} {
		b.transitions[ft[0]][ft[1]] = m.transitions.WithLabelValues(cfg.Provider, ft[0].String(), ft[1].String())
	}
	b.errOpen = &openError{b: b, cause: gobreaker.ErrOpenState}
	b.errBusy = &openError{b: b, cause: gobreaker.ErrTooManyRequests}
	b.since.Store(time.Now().UnixNano())
	b.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:          cfg.Provider,
		MaxRequests:   p.HalfOpenProbes,
		Interval:      p.Window,
		BucketPeriod:  p.Window / time.Duration(p.Buckets),
		Timeout:       p.OpenTimeout,
		ReadyToTrip:   b.readyToTrip,
		OnStateChange: b.onStateChange,
		IsSuccessful:  b.isSuccessful,
		IsExcluded:    excluded,
	})
	b.stateGauge.Set(float64(StateClosed))
	return b
}

// Provider returns the name of the breaker's provider.
func (b *Breaker) Provider() string { return b.provider }

// Policy returns the breaker's policy, defaults applied.
func (b *Breaker) Policy() BreakerPolicy { return b.policy }

// Execute runs fn unless the breaker rejects it, and counts fn's outcome.
// A rejection returns at once, without calling fn and without allocating,
// an error matching ErrCircuitOpen. Otherwise it returns fn's error.
func (b *Breaker) Execute(fn func() error) error {
	_, err := b.cb.Execute(func() (struct{}, error) { return struct{}{}, fn() })
	switch err {
	case gobreaker.ErrOpenState:
		return b.errOpen
	case gobreaker.ErrTooManyRequests:
		return b.errBusy
	}
	return err
}

// Admit returns the rejection Execute would return if the breaker is open,
// or nil, without running or counting anything. It is for work with no
// single outcome to count, such as opening a long-lived stream.
func (b *Breaker) Admit() error {
	if b.State() == StateOpen {
		return b.errOpen
	}
	return nil
}

// State returns the breaker's state, moving an open breaker whose timeout
// has passed to half-open.
func (b *Breaker) State() State { return fromGobreaker(b.cb.State()) }

// RetryAfter is how long the breaker stays open from now, at least 1ms; for
// a breaker that is not open, a short hint.
func (b *Breaker) RetryAfter() time.Duration {
	if b.State() != StateOpen {
		return halfOpenRetryAfter
	}
	left := b.policy.OpenTimeout - time.Since(time.Unix(0, b.opened.Load()))
	return max(left, time.Millisecond)
}

// Status returns a snapshot of the breaker.
func (b *Breaker) Status() Status {
	st := b.State()
	c := b.cb.Counts()
	s := Status{
		Provider: b.provider,
		State:    st,
		Since:    time.Unix(0, b.since.Load()),
		Counts: Counts{
			Requests: c.Requests, Successes: c.TotalSuccesses, Failures: c.TotalFailures,
			Exclusions: c.TotalExclusions, ConsecutiveSuccesses: c.ConsecutiveSuccesses,
			ConsecutiveFailures: c.ConsecutiveFailures,
		},
		Trips: b.trips.Load(),
	}
	if st == StateOpen {
		s.RetryAfter = b.RetryAfter()
	}
	if at := b.lastTrip.Load(); at != 0 {
		s.LastTrip = time.Unix(0, at)
		s.LastTripReason = b.trip(StateOpen, s.LastTrip).Reason()
	}
	return s
}

// trip describes a transition from the recorded atomics.
func (b *Breaker) trip(to State, at time.Time) Transition {
	t := Transition{Provider: b.provider, To: to, At: at, Window: b.policy.Window, Ratio: b.policy.FailureRatio,
		LastFailure: codes.Code(b.lastFailure.Load())}
	if to == StateOpen {
		t.Failures, t.Total = b.tripFailures.Load(), b.tripTotal.Load()
	}
	return t
}

// readyToTrip runs under gobreaker's lock after each failure of a closed
// breaker: trip when the window holds enough outcomes and the failure ratio
// is reached. It only reads its argument and stores atomics.
func (b *Breaker) readyToTrip(c gobreaker.Counts) bool {
	total := c.TotalSuccesses + c.TotalFailures
	if total < b.policy.MinRequests || float64(c.TotalFailures) < b.policy.FailureRatio*float64(total) {
		return false
	}
	b.tripFailures.Store(c.TotalFailures)
	b.tripTotal.Store(total)
	return true
}

// isSuccessful runs under gobreaker's lock: classify and remember the code
// of a failure for the trip reason.
func (b *Breaker) isSuccessful(err error) bool {
	if successful(err) {
		return true
	}
	b.lastFailure.Store(uint32(Code(err)))
	return false
}

// onStateChange runs under gobreaker's lock, so it only records: atomics,
// pre-resolved metrics, and a non-blocking send. It never calls back into
// the breaker.
func (b *Breaker) onStateChange(_ string, from, to gobreaker.State) {
	now := time.Now()
	f, t := fromGobreaker(from), fromGobreaker(to)
	b.since.Store(now.UnixNano())
	if t == StateOpen {
		b.opened.Store(now.UnixNano())
		b.lastTrip.Store(now.UnixNano())
		b.trips.Add(1)
		if f == StateHalfOpen {
			b.tripTotal.Store(0) // a failed probe, not the ratio
		}
	}
	b.stateGauge.Set(float64(t))
	if c := b.transitions[f][t]; c != nil {
		c.Inc()
	}
	if b.notify == nil {
		return
	}
	tr := b.trip(t, now)
	tr.From = f
	select {
	case b.notify <- tr:
	default:
		b.dropped.Inc()
	}
}

// openError is a breaker's rejection. Each breaker allocates its two
// rejections once.
type openError struct {
	b     *Breaker
	cause error // gobreaker.ErrOpenState or ErrTooManyRequests
}

func (e *openError) Error() string {
	if e.cause == gobreaker.ErrTooManyRequests {
		return fmt.Sprintf("provider %q: circuit breaker is half-open and its probes are in flight", e.b.provider)
	}
	return fmt.Sprintf("provider %q: circuit breaker is open", e.b.provider)
}

// Is makes the rejection match ErrCircuitOpen.
func (e *openError) Is(target error) bool { return target == ErrCircuitOpen }

// Unwrap returns gobreaker's sentinel.
func (e *openError) Unwrap() error { return e.cause }

// RetryAfter is how long the breaker stays open.
func (e *openError) RetryAfter() time.Duration { return e.b.RetryAfter() }
