package dataplane

import (
	"context"
	"sync/atomic"
)

// callCount counts the data-plane calls between their admission and their
// answer (unary calls, and each call on a Leases stream), so that a server
// handing leadership over in place can wait for the calls it admitted
// before it writes its last checkpoint (Drain). Two atomic adds per call;
// the wake-up is sent only while a Drain waits.
type callCount struct {
	n        atomic.Int64
	draining atomic.Bool
	wake     chan struct{} // one token: a call ended and none is left
}

func newCallCount() *callCount { return &callCount{wake: make(chan struct{}, 1)} }

// enter counts a call in; it must come before the call's admission, so
// that a call Drain does not wait for sees the server inactive.
func (c *callCount) enter() { c.n.Add(1) }

// exit counts a call out.
func (c *callCount) exit() {
	if c.n.Add(-1) == 0 && c.draining.Load() {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// drain waits until no call is in progress, or ctx ends. draining is set
// before the count is read, so a call that ends after the read sends a
// token the wait receives.
func (c *callCount) drain(ctx context.Context) error {
	c.draining.Store(true)
	defer c.draining.Store(false)
	for c.n.Load() > 0 {
		select {
		case <-c.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Drain waits until every data-plane call admitted so far has been
// answered, or ctx ends (its error is returned). The caller has already
// made the server inactive (Config.Active refuses), so calls arriving
// meanwhile are refused at once and do not hold it up. A Leases stream
// counts only while one of its calls is in progress; EndLeases ends the
// streams themselves.
func (s *Service) Drain(ctx context.Context) error { return s.calls.drain(ctx) }
