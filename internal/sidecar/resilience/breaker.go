package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"google.golang.org/grpc/codes"

	"github.com/repool/repool/internal/defaults"
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
	// OpenTimeout is how long an open breaker rejects calls before it
	// probes the provider (half-open). Default 250ms: the sidecar's probes
	// are its own health checks, which cost callers nothing, so a provider
	// that is back (a new leader after a failover, the VIP on another LB
	// host) is seen within about this time instead of callers waiting a
	// longer timeout out; a provider that stays down costs a health check
	// every 250 ms or so.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenProbes is how many calls a half-open breaker lets through.
	// All of them must succeed to close it; one failure opens it again.
	// Default 3. With a probe (the sidecar always has one), these are the
	// sidecar's own health checks, one after the other, and every caller is
	// rejected until they close the breaker; without one they are callers'
	// calls.
	HalfOpenProbes uint32 `yaml:"half_open_probes"`
	// ConsecutiveFailures trips the breaker when this many calls in a row
	// failed, whatever the window holds (Envoy's consecutive_5xx): a
	// cluster that went down is known bad after a few calls, not after the
	// window's successes are outweighed. Default 5; negative turns the rule
	// off.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// ConsecutiveTimeouts trips the breaker when this many calls in a row
	// ended in DEADLINE_EXCEEDED (the sidecar's timeout or a proxy's 504):
	// the slow-call rule for a silent provider, which answers nothing and
	// costs every caller a full timeout. Default 3 (the bulkhead's
	// min_in_flight calls hang at once, so it trips one timeout after the
	// fault); negative turns the rule off.
	ConsecutiveTimeouts int `yaml:"consecutive_timeouts"`
	// OutageAfter trips the breaker when every attempt (not call) for this
	// long, at least 3 of them, failed as unavailable — a load balancer with
	// no server up, a refused connection — and none was answered otherwise
	// (Envoy's consecutive_gateway_failure, timed): a provider that went
	// down is known bad within this time, not after several calls have
	// spent their retries. It must outlast a failover's handover, which
	// fails attempts the same way while it lasts: 0.05–0.07 s on an idle
	// machine behind HAProxy checking every 100 ms and a standby waiting on
	// the leader lock, more for a server that restores a large pool.
	// Default 200ms; negative turns the rule off.
	OutageAfter time.Duration `yaml:"outage_after"`
	// SilenceAfter trips the breaker when attempts have been sent and
	// waiting for this long (Attempt.Sent) and the provider answered none
	// of them, nor anything else, meanwhile (the slow-call rule for a
	// silent provider: a blackhole accepts connections and answers
	// nothing). The attempts in flight then
	// end at once, their calls failing circuit-open, instead of each waiting
	// for its timeout. It must exceed the provider's slowest normal answer.
	// Default 500ms; negative turns the rule off.
	SilenceAfter time.Duration `yaml:"silence_after"`
}

// WithDefaults returns p with defaults in place of zero values.
func (p BreakerPolicy) WithDefaults() BreakerPolicy { return defaults.Fill(p, breakerDefaults) }

// breakerDefaults are the defaults of BreakerPolicy's fields.
var breakerDefaults = BreakerPolicy{
	FailureRatio: 0.5, MinRequests: 20, Window: 10 * time.Second, Buckets: 10,
	OpenTimeout: 250 * time.Millisecond, HalfOpenProbes: 3,
	ConsecutiveFailures: 5, ConsecutiveTimeouts: 3,
	OutageAfter: 200 * time.Millisecond, SilenceAfter: 500 * time.Millisecond,
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
	case p.ConsecutiveFailures > 1000:
		return fmt.Errorf("consecutive_failures %d: want at most 1000", p.ConsecutiveFailures)
	case p.ConsecutiveTimeouts > 1000:
		return fmt.Errorf("consecutive_timeouts %d: want at most 1000", p.ConsecutiveTimeouts)
	case p.OutageAfter > time.Minute:
		return fmt.Errorf("outage_after %v: want at most 1m", p.OutageAfter)
	case p.SilenceAfter > time.Minute:
		return fmt.Errorf("silence_after %v: want at most 1m", p.SilenceAfter)
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
	// Rule is the rule that opened the breaker, for a transition to open.
	Rule TripRule
	// For a transition to open from closed: the failures and counted
	// outcomes in the window that tripped it (RuleFailureRatio), or the
	// failures in a row (the consecutive rules; Total 0). Both zero
	// otherwise.
	Failures, Total uint32
	// LastFailure is the code of the latest failure before the transition,
	// and Cause that failure in words (Cause), "" if none was seen.
	LastFailure codes.Code
	Cause       string
	// Window and Ratio are the policy's window and failure ratio.
	Window time.Duration
	Ratio  float64
	// After is the time of the attempt-level rule that opened the breaker
	// (OutageAfter, SilenceAfter); zero for the other rules.
	After time.Duration
}

// Reason says why the breaker opened; empty for other transitions.
func (t Transition) Reason() string {
	if t.To != StateOpen {
		return ""
	}
	last := t.LastFailure.String()
	if t.Cause != "" {
		last = t.Cause
	}
	switch t.Rule {
	case RuleConsecutiveFailures:
		return fmt.Sprintf("%d calls in a row failed; last failure: %s", t.Failures, last)
	case RuleConsecutiveTimeouts:
		return fmt.Sprintf("%d calls in a row timed out; last: %s", t.Failures, last)
	case RuleOutage:
		return fmt.Sprintf("every attempt for %v failed as unavailable; last failure: %s", t.After, last)
	case RuleSilence:
		return fmt.Sprintf("attempts in flight and no answer for %v", t.After)
	case RuleFailureRatio:
		return fmt.Sprintf("failure ratio %.0f%% (%d of %d calls) in %v reached %.0f%%; last failure: %s",
			100*float64(t.Failures)/float64(t.Total), t.Failures, t.Total, t.Window, 100*t.Ratio, last)
	}
	return fmt.Sprintf("a half-open probe failed: %s", last)
}

// TripRule names the rule that opened a breaker.
type TripRule int

// The rules that open a breaker.
const (
	// RuleProbe: a half-open probe failed.
	RuleProbe TripRule = iota
	// RuleFailureRatio: BreakerPolicy.FailureRatio over the window.
	RuleFailureRatio
	// RuleConsecutiveFailures: BreakerPolicy.ConsecutiveFailures.
	RuleConsecutiveFailures
	// RuleConsecutiveTimeouts: BreakerPolicy.ConsecutiveTimeouts.
	RuleConsecutiveTimeouts
	// RuleOutage: BreakerPolicy.OutageAfter.
	RuleOutage
	// RuleSilence: BreakerPolicy.SilenceAfter.
	RuleSilence
)

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
	// Probe, when set, is the half-open breaker's health check: once
	// OpenTimeout has passed, the breaker runs it (in a goroutine of its
	// own, bounded by ProbeTimeout) up to HalfOpenProbes times in a row
	// while every caller is still rejected; all must succeed (nil) to close
	// the breaker, one failure opens it again. Callers' calls then never
	// wait on a provider that is known bad. Without it, callers' calls are
	// the probes.
	Probe func(context.Context) error
	// ProbeTimeout bounds one probe. Default 1s.
	ProbeTimeout time.Duration
	// OnSilence, when set, runs when the silence rule opens the breaker,
	// after the attempts in flight were ended: the provider drops the
	// connection that fell silent, so that the next attempt (a probe)
	// dials afresh instead of waiting on a connection to a host that may
	// be gone without a reset.
	OnSilence func()
	// Clock tells the time for the attempt-level rules (OutageAfter,
	// SilenceAfter). Default the wall clock; gobreaker's own window and
	// open timeout always read the wall clock.
	Clock interface{ Now() time.Time }
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
	// LastFailure and LastCause are the gRPC code and the cause in words
	// of the latest failure the breaker counted; LastCause is empty if it
	// counted none.
	LastFailure codes.Code
	LastCause   string
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
	// cb is the gobreaker state machine; Reconnected replaces an open one
	// whose early probes passed with a fresh, closed one.
	cb        atomic.Pointer[gobreaker.CircuitBreaker[struct{}]]
	settings  gobreaker.Settings
	onSilence func()
	notify    chan<- Transition

	// Metric children resolved once, so the callbacks only touch atomics.
	stateGauge  prometheus.Gauge
	transitions [3][3]prometheus.Counter // [from][to]; nil if impossible
	dropped     prometheus.Counter

	// Rejections, allocated once so that rejecting allocates nothing.
	errOpen, errBusy *openError

	probe        func(context.Context) error
	probeTimeout time.Duration
	probing      atomic.Bool // a probe goroutine is running

	// Written by the callbacks, under gobreaker's lock, with atomics only;
	// read anywhere.
	since        atomic.Int64           // unix nanos of the last transition
	opened       atomic.Int64           // unix nanos of the last transition to open
	lastTrip     atomic.Int64           // unix nanos of the last trip
	trips        atomic.Uint64          // transitions to open
	tripFailures atomic.Uint32          // failures in the window that tripped it
	tripTotal    atomic.Uint32          // counted outcomes in that window; 0: a probe failed
	lastFailure  atomic.Uint32          // codes.Code of the latest failure
	lastCause    atomic.Pointer[string] // Cause of the latest failure
	tripRule     atomic.Uint32          // TripRule of the last trip

	// wakeSignal is closed when the breaker opens (and replaced by a fresh
	// one): every call waiting to retry stops waiting (Wake).
	wakeSignal atomic.Pointer[chan struct{}]
	// turn passes one waiting call its turn to retry after each success
	// (Turn); waiting counts the calls waiting (Waiting).
	turn    chan struct{}
	waiting atomic.Int32

	// The attempt-level rules (attempt.go), in unix nanos of now(): when
	// the provider last answered an attempt, when attempts were last sent
	// with none waiting for an answer, and since when (0: not) every
	// attempt failed as unavailable, with how many attempts; and the
	// attempts sent and waiting for an answer.
	now            func() time.Time
	lastAnswer     atomic.Int64
	busySince      atomic.Int64
	outageSince    atomic.Int64
	outageAttempts atomic.Int32
	waitingAnswer  atomic.Int32
	forced         atomic.Uint32            // 1 + the TripRule being forced by force; 0: none
	abort          atomic.Pointer[abortGen] // the attempts in flight, ended by the silence rule

	// Calls in a row that failed, and that timed out; written under
	// gobreaker's lock (isSuccessful, onStateChange).
	consecFailures, consecTimeouts atomic.Uint32
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
	signal := make(chan struct{})
	b.wakeSignal.Store(&signal)
	b.turn = make(chan struct{}, 1)
	b.abort.Store(newAbortGen())
	b.now = time.Now
	if cfg.Clock != nil {
		b.now = cfg.Clock.Now
	}
	for _, ft := range [][2]State{{StateClosed, StateOpen}, {StateOpen, StateHalfOpen}, {StateHalfOpen, StateClosed}, {StateHalfOpen, StateOpen}} {
		b.transitions[ft[0]][ft[1]] = m.transitions.WithLabelValues(cfg.Provider, ft[0].String(), ft[1].String())
	}
	b.errOpen = &openError{b: b, cause: gobreaker.ErrOpenState}
	b.errBusy = &openError{b: b, cause: gobreaker.ErrTooManyRequests}
	b.probe, b.probeTimeout = cfg.Probe, cfg.ProbeTimeout
	if b.probeTimeout <= 0 {
		b.probeTimeout = time.Second
	}
	b.since.Store(time.Now().UnixNano())
	b.onSilence = cfg.OnSilence
	b.settings = gobreaker.Settings{
		Name:          cfg.Provider,
		MaxRequests:   p.HalfOpenProbes,
		Interval:      p.Window,
		BucketPeriod:  p.Window / time.Duration(p.Buckets),
		Timeout:       p.OpenTimeout,
		ReadyToTrip:   b.readyToTrip,
		OnStateChange: b.onStateChange,
		IsSuccessful:  b.isSuccessful,
		IsExcluded:    excluded,
	}
	b.cb.Store(gobreaker.NewCircuitBreaker[struct{}](b.settings))
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
	switch b.cb.Load().State() { // one lock, as gobreaker's own rejection takes
	case gobreaker.StateOpen:
		return b.errOpen
	case gobreaker.StateHalfOpen:
		if b.probe != nil {
			b.startProbe()
			return b.errBusy
		}
	}
	_, err := b.cb.Load().Execute(func() (struct{}, error) { return struct{}{}, fn() })
	switch err {
	case gobreaker.ErrOpenState:
		return b.errOpen
	case gobreaker.ErrTooManyRequests:
		return b.errBusy
	}
	return err
}

// Wake returns a channel that is closed when the breaker next opens: a call
// waiting to retry selects on it (Retrier.DoUntil), so that it stops
// waiting (and, at its next attempt, Admit refuses it) as soon as other
// calls have found the provider down, instead of at the end of its backoff.
func (b *Breaker) Wake() <-chan struct{} { return *b.wakeSignal.Load() }

// Turn returns the channel on which a call waiting to retry gets its turn
// to retry now: each attempt that succeeds while calls wait gives one of
// them its turn. The calls that waited through a failover's handover are
// so answered one after the other as soon as the new active server
// answers — each success passing the turn on — rather than at the end of
// their backoffs, and never all at once.
func (b *Breaker) Turn() <-chan struct{} { return b.turn }

// Waiting counts the calls waiting to retry: +1 when one starts waiting, -1
// when it stops.
func (b *Breaker) Waiting(delta int) { b.waiting.Add(int32(delta)) }

// passTurn gives one waiting call its turn, if a call waits.
func (b *Breaker) passTurn() {
	if b.waiting.Load() > 0 {
		select {
		case b.turn <- struct{}{}:
		default: // a turn is already waiting to be taken
		}
	}
}

// wake closes the current Wake channel and puts a fresh one in its place.
func (b *Breaker) wake() {
	fresh := make(chan struct{})
	if old := b.wakeSignal.Swap(&fresh); old != nil {
		close(*old)
	}
}

// Admit returns the rejection Execute would return if the breaker is open,
// or nil, without running or counting anything. It is for work with no
// single outcome to count, such as opening a long-lived stream.
func (b *Breaker) Admit() error {
	switch b.State() {
	case StateOpen:
		return b.errOpen
	case StateHalfOpen:
		if b.probe != nil {
			b.startProbe()
			return b.errBusy
		}
	}
	return nil
}

// startProbe runs the half-open probes in a goroutine unless one runs
// already. The goroutine ends when a probe fails, when HalfOpenProbes
// probes succeeded (the breaker closed), or when the breaker left the
// half-open state.
func (b *Breaker) startProbe() {
	if !b.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer b.probing.Store(false)
		for range b.policy.HalfOpenProbes {
			if b.cb.Load().State() != gobreaker.StateHalfOpen {
				return
			}
			_, err := b.cb.Load().Execute(func() (struct{}, error) {
				ctx, cancel := context.WithTimeout(context.Background(), b.probeTimeout)
				defer cancel()
				return struct{}{}, b.probe(ctx)
			})
			if err != nil {
				return
			}
		}
	}()
}

// Reconnected tells the breaker that its provider's connection has just
// been set up again (the channel went READY after it was not). An open
// breaker with a Probe then probes at once instead of at the end of its
// OpenTimeout: the front end answers connections again, as it does as soon
// as the VIP has moved to the other LB host. If every probe passes (as in
// the half-open state, HalfOpenProbes of them) while the breaker is still
// open, it closes, through half-open, as if its timeout had passed; a
// failed probe leaves it open until its timeout, as before. A breaker that
// is not open, or that probes already, ignores it.
func (b *Breaker) Reconnected() {
	cb := b.cb.Load()
	if b.probe == nil || cb.State() != gobreaker.StateOpen || !b.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer b.probing.Store(false)
		for range b.policy.HalfOpenProbes {
			ctx, cancel := context.WithTimeout(context.Background(), b.probeTimeout)
			err := b.probe(ctx)
			cancel()
			if err != nil || cb.State() != gobreaker.StateOpen {
				return // failed, or the breaker moved on by itself meanwhile
			}
		}
		if !b.cb.CompareAndSwap(cb, gobreaker.NewCircuitBreaker[struct{}](b.settings)) {
			return
		}
		b.onStateChange(b.provider, gobreaker.StateOpen, gobreaker.StateHalfOpen)
		b.onStateChange(b.provider, gobreaker.StateHalfOpen, gobreaker.StateClosed)
	}()
}

// State returns the breaker's state, moving an open breaker whose timeout
// has passed to half-open.
func (b *Breaker) State() State { return fromGobreaker(b.cb.Load().State()) }

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
	c := b.cb.Load().Counts()
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
	if c := b.lastCause.Load(); c != nil {
		s.LastFailure, s.LastCause = codes.Code(b.lastFailure.Load()), *c
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
	if c := b.lastCause.Load(); c != nil {
		t.Cause = *c
	}
	if to == StateOpen {
		t.Rule = TripRule(b.tripRule.Load())
		t.Failures, t.Total = b.tripFailures.Load(), b.tripTotal.Load()
		switch t.Rule {
		case RuleOutage:
			t.After = b.policy.OutageAfter
		case RuleSilence:
			t.After = b.policy.SilenceAfter
		}
	}
	return t
}

// readyToTrip runs under gobreaker's lock after each failure of a closed
// breaker: trip when the calls in a row that failed or timed out reach
// their bound, or when the window holds enough outcomes and the failure
// ratio is reached. It only reads its argument and atomics, and stores
// atomics.
func (b *Breaker) readyToTrip(c gobreaker.Counts) bool {
	if r := b.forced.Load(); r != 0 {
		return b.tripped(TripRule(r-1), 0, 0)
	}
	if n := b.consecTimeouts.Load(); b.policy.ConsecutiveTimeouts > 0 && n >= uint32(b.policy.ConsecutiveTimeouts) {
		return b.tripped(RuleConsecutiveTimeouts, n, 0)
	}
	if n := b.consecFailures.Load(); b.policy.ConsecutiveFailures > 0 && n >= uint32(b.policy.ConsecutiveFailures) {
		return b.tripped(RuleConsecutiveFailures, n, 0)
	}
	total := c.TotalSuccesses + c.TotalFailures
	if total < b.policy.MinRequests || float64(c.TotalFailures) < b.policy.FailureRatio*float64(total) {
		return false
	}
	return b.tripped(RuleFailureRatio, c.TotalFailures, total)
}

// tripped records why the breaker is about to open, and returns true.
func (b *Breaker) tripped(rule TripRule, failures, total uint32) bool {
	b.tripRule.Store(uint32(rule))
	b.tripFailures.Store(failures)
	b.tripTotal.Store(total)
	return true
}

// isSuccessful runs under gobreaker's lock for every outcome that is not
// excluded: classify, count the calls in a row that failed and timed out,
// and remember the code of a failure for the trip reason.
func (b *Breaker) isSuccessful(err error) bool {
	if successful(err) {
		b.consecFailures.Store(0)
		b.consecTimeouts.Store(0)
		return true
	}
	if err == errTrip {
		b.consecFailures.Add(1)
		return false // an attempt-level rule's trip: the failure it saw is recorded already
	}
	c := Code(err)
	b.failed(err)
	b.consecFailures.Add(1)
	if c == codes.DeadlineExceeded {
		b.consecTimeouts.Add(1)
	} else {
		b.consecTimeouts.Store(0)
	}
	return false
}

// failed records the code and the cause of a failure, for the trip reason
// and the rejections' messages.
func (b *Breaker) failed(err error) {
	b.lastFailure.Store(uint32(Code(err)))
	cause := Cause(err)
	b.lastCause.Store(&cause)
}

// onStateChange runs under gobreaker's lock, so it only records: atomics,
// pre-resolved metrics, and a non-blocking send. It never calls back into
// the breaker.
func (b *Breaker) onStateChange(_ string, from, to gobreaker.State) {
	now := time.Now()
	f, t := fromGobreaker(from), fromGobreaker(to)
	b.since.Store(now.UnixNano())
	b.consecFailures.Store(0)
	b.consecTimeouts.Store(0)
	b.outageSince.Store(0)
	b.outageAttempts.Store(0)
	if t == StateOpen {
		b.wake()
		b.opened.Store(now.UnixNano())
		b.lastTrip.Store(now.UnixNano())
		b.trips.Add(1)
		if f == StateHalfOpen {
			b.tripped(RuleProbe, 0, 0) // a failed probe, not a rule of the window
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
	why := ""
	if at := e.b.lastTrip.Load(); at != 0 {
		why = " (" + e.b.trip(StateOpen, time.Unix(0, at)).Reason() + ")"
	}
	if e.cause == gobreaker.ErrTooManyRequests {
		return fmt.Sprintf("provider %q: circuit breaker is half-open and its probes are in flight%s", e.b.provider, why)
	}
	return fmt.Sprintf("provider %q: circuit breaker is open%s", e.b.provider, why)
}

// Is makes the rejection match ErrCircuitOpen.
func (e *openError) Is(target error) bool { return target == ErrCircuitOpen }

// Unwrap returns gobreaker's sentinel.
func (e *openError) Unwrap() error { return e.cause }

// RetryAfter is how long the breaker stays open.
func (e *openError) RetryAfter() time.Duration { return e.b.RetryAfter() }
