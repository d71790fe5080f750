// Package clock gives code an injectable source of time so that tests can
// advance time instead of sleeping.
package clock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the current time. Implementations are safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

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

// Fake is a clock that only moves when told to. The zero value is not
// usable; create one with NewFake. Safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d (backwards if d is negative).
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Every calls f every d until ctx ends, and returns then; the first call is
// d after Every starts. f returning false stops it early. A call of f that
// outlasts d delays the next one instead of piling up.
func Every(ctx context.Context, d time.Duration, f func(ctx context.Context) bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !f(ctx) {
				return
			}
		}
	}
}
