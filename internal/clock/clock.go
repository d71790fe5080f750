// Package clock gives code an injectable source of time that reads and
// schedules, so that tests advance time instead of sleeping: every loop,
// timer and wait in the server and the sidecar takes a Clock, and tests
// hand it a Fake that fires timers and tickers only when advanced. The
// timers and the fake are github.com/jonboulle/clockwork's.
package clock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock tells the current time and schedules timers on it.
// Implementations are safe for concurrent use.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that fires every d (d > 0).
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine d from now, unless the timer
	// is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a time.Timer whose channel is Chan().
type Timer = clockwork.Timer

// Ticker is a time.Ticker whose channel is Chan().
type Ticker = clockwork.Ticker

// realTimers schedules on the wall clock; the clocks of this package that
// only change how Now reads embed it.
type realTimers struct{}

func (realTimers) NewTimer(d time.Duration) Timer { return clockwork.NewRealClock().NewTimer(d) }

func (realTimers) NewTicker(d time.Duration) Ticker { return clockwork.NewRealClock().NewTicker(d) }

func (realTimers) AfterFunc(d time.Duration, f func()) Timer {
	return clockwork.NewRealClock().AfterFunc(d, f)
}

// Real is the wall clock.
type Real struct{ realTimers }

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

var _ Clock = Real{}

// Anchored is the wall clock read at half the cost of time.Now: it reads
// the monotonic clock on every call and the wall clock only to re-anchor,
// once per interval. time.Now reads both, and on a virtual machine each
// read is a vDSO call of tens of nanoseconds, which a pool's Report pays on
// every call. The times it returns carry a monotonic reading, as
// time.Now's do; a step of the system's wall clock shows after at most one
// interval. Create one with NewAnchored. Safe for concurrent use.
type Anchored struct {
	realTimers
	interval time.Duration
	anchor   atomic.Pointer[time.Time]
}

var _ Clock = (*Anchored)(nil)

// NewAnchored returns an Anchored clock that re-reads the wall clock every
// interval (every second when interval <= 0).
func NewAnchored(interval time.Duration) *Anchored {
	if interval <= 0 {
		interval = time.Second
	}
	a := &Anchored{interval: interval}
	now := time.Now()
	a.anchor.Store(&now)
	return a
}

// Now returns the anchor plus the monotonic time elapsed since it, and
// re-anchors once the anchor is an interval old.
func (a *Anchored) Now() time.Time {
	anchor := a.anchor.Load()
	d := time.Since(*anchor) // reads the monotonic clock only
	if d < a.interval {
		return anchor.Add(d)
	}
	now := time.Now()
	a.anchor.CompareAndSwap(anchor, &now)
	return now
}

// Coarse is a wall clock that a goroutine advances every resolution, so
// that Now is one atomic load: for hot paths that read the time on every
// call and need it only to about the resolution, as a pool's decay and
// lease expiry do. Its readings carry no monotonic reading and may lag the
// wall clock by up to a resolution (more if the goroutine is not scheduled
// in time). When the context given to NewCoarse ends, the goroutine stops
// and Now reads the wall clock directly, so a stopped clock never freezes.
// Safe for concurrent use.
type Coarse struct {
	realTimers
	now     atomic.Int64 // unix nanoseconds
	stopped atomic.Bool
	done    chan struct{}
}

var _ Clock = (*Coarse)(nil)

// NewCoarse starts a Coarse clock that advances every resolution (every
// millisecond when resolution <= 0) until ctx ends.
func NewCoarse(ctx context.Context, resolution time.Duration) *Coarse {
	if resolution <= 0 {
		resolution = time.Millisecond
	}
	c := &Coarse{done: make(chan struct{})}
	c.now.Store(time.Now().UnixNano())
	go c.run(ctx, resolution)
	return c
}

func (c *Coarse) run(ctx context.Context, resolution time.Duration) {
	defer close(c.done)
	t := time.NewTicker(resolution)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.stopped.Store(true)
			return
		case now := <-t.C:
			c.now.Store(now.UnixNano())
		}
	}
}

// Now returns the time as of the last tick.
func (c *Coarse) Now() time.Time {
	if c.stopped.Load() {
		return time.Now()
	}
	return time.Unix(0, c.now.Load())
}

// Done is closed once the clock's goroutine has stopped.
func (c *Coarse) Done() <-chan struct{} { return c.done }

// Fake is a clock that only moves when told to, and fires the timers and
// tickers made from it as it passes their times. The zero value is not
// usable; create one with NewFake. Safe for concurrent use.
type Fake struct{ fc *clockwork.FakeClock }

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{fc: clockwork.NewFakeClockAt(start)} }

// Now returns the fake's current time.
func (f *Fake) Now() time.Time { return f.fc.Now() }

// NewTimer returns a timer that fires once the fake has advanced by d.
func (f *Fake) NewTimer(d time.Duration) Timer { return f.fc.NewTimer(d) }

// NewTicker returns a ticker that fires each time the fake passes another d.
func (f *Fake) NewTicker(d time.Duration) Ticker { return f.fc.NewTicker(d) }

// AfterFunc calls fn once the fake has advanced by d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer { return f.fc.AfterFunc(d, fn) }

// Advance moves the clock forward by d and fires, in order, every timer
// and ticker whose time it passes, before it returns. A negative d moves
// the clock back and fires nothing.
func (f *Fake) Advance(d time.Duration) { f.fc.Advance(d) }

// Set moves the clock to t, firing what Advance would.
func (f *Fake) Set(t time.Time) { f.fc.Advance(t.Sub(f.fc.Now())) }

// Wait blocks until n timers, tickers or AfterFuncs are waiting on the
// fake (the goroutine under test has armed them), or ctx ends: call it
// before Advance so that the advance is not lost on a timer not yet made.
func (f *Fake) Wait(ctx context.Context, n int) error { return f.fc.BlockUntilContext(ctx, n) }

// Every calls f every d, on c, until ctx ends, and returns then; the first
// call is d after Every starts. f returning false stops it early. A call of
// f that outlasts d delays the next one instead of piling up.
func Every(ctx context.Context, c Clock, d time.Duration, f func(ctx context.Context) bool) {
	t := c.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			if !f(ctx) {
				return
			}
		}
	}
}

// Sleep waits d on c, or until ctx ends, whichever is first; it returns
// ctx.Err() if ctx ended first and nil otherwise.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.Chan():
		return nil
	}
}
