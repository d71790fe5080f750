package clock

import (
	"context"
	"sync/atomic"
	"time"
)

// Awake is a clock that does not count the time its own process was not
// running: a stall of the process or of the whole machine (SIGSTOP, a
// virtual machine paused, a swap storm, the scheduler starved of CPU) does
// not move it. A heartbeat goroutine wakes every period on the base clock;
// a beat that comes more than period+tolerance after the one before means
// the process did not run meanwhile, and the excess is added to the stall
// total that Now subtracts. Between beats, a Now read later than
// period+tolerance after the last beat stands still at that point, so that
// the first reader after a stall (which may run before the heartbeat does)
// sees no more time pass than the heartbeat will later account for.
//
// Now never goes backwards and moves continuously: it is the base clock's
// time minus every stall seen so far. The rules that judge a provider by
// how long it has not answered (the sidecar's silence and outage rules and
// its bulkhead) read it, so that a stall of their own process is not taken
// for the provider's silence. Timers are the base clock's.
//
// The heartbeat costs one wake-up per period (about 100 a second at the
// sidecar's 10ms); it stops when the context given to NewAwake ends, after
// which Now is the base clock's minus the stalls seen until then.
type Awake struct {
	base      Clock
	period    time.Duration
	tolerance time.Duration
	beat      atomic.Pointer[awakeBeat]
	done      chan struct{}
}

// awakeBeat is one heartbeat: when it ran on the base clock and the stall
// total until then. One pointer, so that a reader sees the two together.
type awakeBeat struct {
	at      time.Time
	stalled time.Duration
}

// NewAwake starts the heartbeat of an Awake clock on base, every period
// (> 0); a beat later than tolerance past its period counts as a stall.
// It stops when ctx ends (Done is then closed).
func NewAwake(ctx context.Context, base Clock, period, tolerance time.Duration) *Awake {
	a := &Awake{base: base, period: period, tolerance: tolerance, done: make(chan struct{})}
	a.beat.Store(&awakeBeat{at: base.Now()})
	t := base.NewTicker(period)
	go func() {
		defer close(a.done)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.Chan():
				a.heartbeat()
			}
		}
	}()
	return a
}

// heartbeat records a beat, adding the time since the last one beyond
// period+tolerance to the stall total.
func (a *Awake) heartbeat() {
	now := a.base.Now()
	last := a.beat.Load()
	stalled := last.stalled
	if over := now.Sub(last.at) - a.period - a.tolerance; over > 0 {
		stalled += over
	}
	a.beat.Store(&awakeBeat{at: now, stalled: stalled})
}

// Now returns the base clock's time less every stall seen so far, the one
// going on (since the last beat) included.
func (a *Awake) Now() time.Time {
	now := a.base.Now()
	b := a.beat.Load()
	if now.Before(b.at) {
		now = b.at // read before a beat that was stored meanwhile
	}
	if limit := b.at.Add(a.period + a.tolerance); now.After(limit) {
		now = limit // a stall, or a beat about to come: stand still
	}
	return now.Add(-b.stalled)
}

// Stalled returns the total of the stalls seen so far, the one going on
// included.
func (a *Awake) Stalled() time.Duration {
	now := a.base.Now()
	b := a.beat.Load()
	s := b.stalled
	if over := now.Sub(b.at) - a.period - a.tolerance; over > 0 {
		s += over
	}
	return s
}

// Done is closed when the heartbeat has stopped.
func (a *Awake) Done() <-chan struct{} { return a.done }

// NewTimer returns a timer of the base clock.
func (a *Awake) NewTimer(d time.Duration) Timer { return a.base.NewTimer(d) }

// NewTicker returns a ticker of the base clock.
func (a *Awake) NewTicker(d time.Duration) Ticker { return a.base.NewTicker(d) }

// AfterFunc schedules f on the base clock.
func (a *Awake) AfterFunc(d time.Duration, f func()) Timer { return a.base.AfterFunc(d, f) }

var _ Clock = (*Awake)(nil)
