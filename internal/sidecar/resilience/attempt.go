package resilience

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
)

// The attempt-level rules. The breaker counts whole calls, after their
// retries (CB(Retry(call))); these rules watch the attempts inside those
// calls, so that the two shapes of a dead provider are known within a
// fraction of a second instead of after several calls' worth of retries or
// timeouts:
//
//   - outage: every attempt for BreakerPolicy.OutageAfter failed as
//     unavailable (the front end's answer that no server is alive, a
//     refused connection) and none was answered otherwise. The front end's
//     answer during a handover (Handover: a server alive, none active yet)
//     is not an outage and ends one: the calls waiting to retry through it
//     get their turn as soon as an attempt succeeds (Turn).
//   - silence: attempts have been sent and waiting for an answer for
//     BreakerPolicy.SilenceAfter and none of them, nor any other, was
//     answered meanwhile (a blackhole: connections open, nothing comes
//     back). The attempts in flight are then ended at once (their calls
//     fail circuit-open) instead of at their timeout. An attempt counts
//     once it is sent (Attempt.Sent), not while it waits for its token: a
//     cold sidecar's first token fetch is not the provider's silence.
//
// Either rule opens the breaker (RuleOutage, RuleSilence). They are checked
// when an attempt starts and when one ends, so they cost nothing when no
// call is made — and then nobody waits for the answer either.

// errTrip is the outcome that opens the breaker for an attempt-level rule:
// gobreaker opens only on a failed outcome, through ReadyToTrip.
var errTrip = errors.New("an attempt-level rule opened the breaker")

// abortGen is one generation of the attempts in flight: its context is
// cancelled, and replaced, when the silence rule opens the breaker.
type abortGen struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newAbortGen() *abortGen {
	ctx, cancel := context.WithCancel(context.Background())
	return &abortGen{ctx: ctx, cancel: cancel}
}

// Attempt is one admitted attempt; see Breaker.Start.
type Attempt struct {
	b      *Breaker
	ctx    context.Context
	gen    *abortGen
	stop   func() bool        // unhooks cancel from gen
	cancel context.CancelFunc // ends ctx
	sent   time.Time          // zero until Sent
}

// SentAt is when the attempt was sent (Sent), or zero if it was not.
func (a *Attempt) SentAt() time.Time { return a.sent }

// Context is the context the attempt must run with: the call's, ended also
// when the silence rule gives up on the provider.
func (a *Attempt) Context() context.Context { return a.ctx }

// Start admits one attempt of a call after the attempt-level rules: it
// returns an error matching ErrCircuitOpen when a rule finds the provider
// silent or down (and opens the breaker), or the Attempt, which must be
// ended once with End.
func (b *Breaker) Start(ctx context.Context) (*Attempt, error) {
	now := b.now()
	if rule, ok := b.verdict(now); ok {
		b.force(rule)
		return nil, b.errOpen
	}
	gen := b.abort.Load()
	actx, cancel := context.WithCancel(ctx)
	return &Attempt{b: b, ctx: actx, gen: gen, stop: context.AfterFunc(gen.ctx, cancel), cancel: cancel}, nil
}

// Sent marks the attempt as sent to the provider: from now on it waits for
// the provider's answer, and counts for the silence rule. Call it right
// before the request goes out; calling it again does nothing.
func (a *Attempt) Sent() {
	if !a.sent.IsZero() {
		return
	}
	b := a.b
	a.sent = b.now()
	if b.waitingAnswer.Load() == 0 {
		// Before the count, so that whoever sees this attempt waiting also
		// sees since when the provider has had attempts to answer.
		b.busySince.Store(a.sent.UnixNano())
	}
	b.waitingAnswer.Add(1)
}

// End ends the attempt with its outcome and returns the error to act on:
// err itself, or the circuit-open rejection if the silence rule ended the
// attempt. It records what the attempt says of the provider: an answer
// (anything but our own deadline or cancellation), a failure as
// unavailable, or a success, which ends an outage and gives a call waiting
// to retry its turn.
func (a *Attempt) End(err error) error {
	b := a.b
	a.stop()
	a.cancel()
	if !a.sent.IsZero() {
		b.waitingAnswer.Add(-1)
	}
	if err != nil && a.gen.ctx.Err() != nil {
		return b.errOpen // the silence rule gave up on the provider
	}
	if c := Code(err); c == codes.DeadlineExceeded || c == codes.Canceled || errors.Is(err, ErrBulkheadFull) {
		return err // no answer
	}
	now := b.now()
	b.lastAnswer.Store(now.UnixNano())
	if err != nil && !successful(err) && !excluded(err) {
		b.failed(err) // the cause a trip or a rejection will name
	}
	// The front end's "no server alive" is not retried, but it is the
	// outage the rule is for; its handover answer (a server alive, none
	// active yet) is not an outage, and ends one like any other answer.
	if (Retryable(err) || ClusterDown(err)) && !TenantElsewhere(err) && !Handover(err) {
		b.outageSince.CompareAndSwap(0, now.UnixNano())
		b.outageAttempts.Add(1)
		if rule, ok := b.verdict(now); ok {
			b.force(rule)
		}
		return err
	}
	if b.outageSince.Swap(0) != 0 { // any other answer ends an outage
		b.outageAttempts.Store(0)
	}
	if err == nil || successful(err) {
		b.passTurn() // the provider works: a waiting call may retry now
	}
	return err
}

// outageMinAttempts is how many failed attempts the outage rule wants
// besides its time, so that one slow failure is never an outage.
const outageMinAttempts = 3

// verdict applies the attempt-level rules at now.
func (b *Breaker) verdict(now time.Time) (TripRule, bool) {
	if d := b.policy.SilenceAfter; d > 0 && b.waitingAnswer.Load() > 0 {
		quiet := max(b.lastAnswer.Load(), b.busySince.Load())
		if quiet != 0 && now.UnixNano()-quiet >= int64(d) {
			return RuleSilence, true
		}
	}
	if d := b.policy.OutageAfter; d > 0 {
		if since := b.outageSince.Load(); since != 0 && now.UnixNano()-since >= int64(d) && b.outageAttempts.Load() >= outageMinAttempts {
			return RuleOutage, true
		}
	}
	return 0, false
}

// force opens the breaker for an attempt-level rule. For the silence rule it
// first ends every attempt in flight.
func (b *Breaker) force(rule TripRule) {
	if !b.forced.CompareAndSwap(0, uint32(rule)+1) {
		return // another attempt is opening it
	}
	if rule == RuleSilence {
		b.abort.Swap(newAbortGen()).cancel()
		if b.onSilence != nil {
			b.onSilence()
		}
	}
	_, _ = b.cb.Load().Execute(func() (struct{}, error) { return struct{}{}, errTrip })
	b.forced.Store(0)
}
