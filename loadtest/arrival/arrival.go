// Package arrival runs iterations with the semantics of k6's
// constant-arrival-rate executor, so the Go runner's numbers mean what k6's
// mean:
//
//   - iteration i is due at i*TimeUnit/Rate from the start, whatever the
//     system under test does (an open model);
//   - PreAllocatedVUs VUs exist before the start; a due iteration goes to a
//     free VU, and if none is free it is dropped (dropped_iterations) and
//     one more VU is started in the background, one at a time, up to MaxVUs;
//   - after Duration no iteration starts; running ones have GracefulStop to
//     finish, then their context is cancelled and they count as
//     interrupted.
//
// A VU here is a goroutine; starting one is immediate, where k6 needs a
// moment to initialise a JavaScript VU, so under a sudden slowdown k6 drops
// a few more iterations than this executor.
package arrival

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/repool/repool/internal/clock"
)

// Config is the executor's options, named as k6 names them.
type Config struct {
	// Rate iterations start every TimeUnit. Required.
	Rate int
	// TimeUnit is Rate's period. Required.
	TimeUnit time.Duration
	// Duration is how long iterations start. Required.
	Duration time.Duration
	// PreAllocatedVUs are started before the first iteration. Required.
	PreAllocatedVUs int
	// MaxVUs bounds the VUs. Default PreAllocatedVUs.
	MaxVUs int
	// GracefulStop is how long running iterations may finish after
	// Duration. Zero interrupts them at once.
	GracefulStop time.Duration
	// Clock schedules the iterations and measures the run. Default the
	// wall clock (clock.Real), as k6's executor has it.
	Clock clock.Clock
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Rate < 1:
		return fmt.Errorf("arrival: Rate %d: want at least 1", c.Rate)
	case c.TimeUnit <= 0 || c.Duration <= 0:
		return errors.New("arrival: TimeUnit and Duration must be positive")
	case c.PreAllocatedVUs < 1:
		return fmt.Errorf("arrival: PreAllocatedVUs %d: want at least 1", c.PreAllocatedVUs)
	case c.MaxVUs != 0 && c.MaxVUs < c.PreAllocatedVUs:
		return fmt.Errorf("arrival: MaxVUs %d is below PreAllocatedVUs %d", c.MaxVUs, c.PreAllocatedVUs)
	case c.GracefulStop < 0:
		return errors.New("arrival: GracefulStop must not be negative")
	}
	return nil
}

// Iteration runs one iteration. iter numbers started iterations from 0
// (k6's exec.scenario.iterationInTest). ctx is cancelled when the
// iteration is interrupted; the function should then return promptly.
type Iteration func(ctx context.Context, iter int64)

// Stats are a run's counts.
type Stats struct {
	// Iterations completed (not interrupted).
	Iterations int64
	// Dropped iterations found no free VU.
	Dropped int64
	// Interrupted iterations were still running when GracefulStop ran
	// out (or the run was cancelled).
	Interrupted int64
	// MaxVUs is the number of VUs allocated at the end (k6's vus_max).
	MaxVUs int64
	// PeakActive is the most VUs busy at once.
	PeakActive int64
	// Elapsed is the run's wall time, graceful stop included.
	Elapsed time.Duration
}

// Snapshot is the progress of a running executor.
type Snapshot struct {
	Elapsed                                  time.Duration
	Started, Completed, Dropped, Interrupted int64
	Active, Allocated, PeakActive            int64
	Done                                     bool
}

// Executor runs one constant-arrival-rate scenario. Run it once. Snapshot
// is safe to call concurrently with Run.
type Executor struct {
	cfg Config
	fn  Iteration

	start                                    atomic.Int64 // UnixNano; 0 before Run
	started, completed, dropped, interrupted atomic.Int64
	active, allocated, peak                  atomic.Int64
	done                                     atomic.Bool
}

// New returns an executor of fn with cfg.
func New(cfg Config, fn Iteration) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxVUs == 0 {
		cfg.MaxVUs = cfg.PreAllocatedVUs
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if fn == nil {
		return nil, errors.New("arrival: nil Iteration")
	}
	return &Executor{cfg: cfg, fn: fn}, nil
}

// Due returns when iteration i is due, from the start.
func (c Config) Due(i int64) time.Duration {
	return time.Duration(i * int64(c.TimeUnit) / int64(c.Rate))
}

// Run runs the scenario and returns when every iteration has returned. A
// cancelled ctx stops scheduling and interrupts running iterations at once.
// Run returns the time it started through started (before the first
// iteration), so callers can align their clocks with the schedule.
func (e *Executor) Run(ctx context.Context, started func(time.Time)) Stats {
	iterCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()

	// A free VU waits in idle (a VU puts itself back after each
	// iteration); a due iteration takes one without waiting, or is dropped.
	type vu struct{ work chan int64 }
	idle := make(chan *vu, e.cfg.MaxVUs)
	var (
		mu  sync.Mutex
		all []*vu
		wg  sync.WaitGroup
	)
	startVU := func() {
		v := &vu{work: make(chan int64, 1)}
		mu.Lock()
		all = append(all, v)
		mu.Unlock()
		e.allocated.Add(1)
		idle <- v // never blocks: capacity MaxVUs
		wg.Go(func() {
			for it := range v.work {
				a := e.active.Add(1)
				for p := e.peak.Load(); a > p && !e.peak.CompareAndSwap(p, a); p = e.peak.Load() {
				}
				e.fn(iterCtx, it)
				e.active.Add(-1)
				if iterCtx.Err() != nil {
					e.interrupted.Add(1)
				} else {
					e.completed.Add(1)
				}
				idle <- v
			}
		})
	}
	for range e.cfg.PreAllocatedVUs {
		startVU()
	}
	// The allocator starts one unplanned VU per request, one at a time, as
	// k6's does.
	grow := make(chan struct{})
	allocDone := make(chan struct{})
	go func() {
		defer close(allocDone)
		for range grow {
			startVU()
		}
	}()
	remaining := e.cfg.MaxVUs - e.cfg.PreAllocatedVUs

	clk := e.cfg.Clock
	t0 := clk.Now()
	e.start.Store(t0.UnixNano())
	if started != nil {
		started(t0)
	}
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var n int64
schedule:
	for i := int64(0); ; i++ {
		due := e.cfg.Due(i)
		if due >= e.cfg.Duration {
			break
		}
		if wait := t0.Add(due).Sub(clk.Now()); timer == nil {
			timer = clk.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.Chan():
		case <-ctx.Done():
			break schedule
		}
		select {
		case v := <-idle:
			v.work <- n
			n++
			e.started.Add(1)
			continue
		default:
		}
		e.dropped.Add(1)
		if remaining > 0 {
			select {
			case grow <- struct{}{}:
				remaining--
			default: // a VU is being started already
			}
		}
	}
	close(grow)
	<-allocDone
	for _, v := range all { // idle VUs return; busy ones after their iteration
		close(v.work)
	}

	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	grace := clk.NewTimer(e.cfg.GracefulStop)
	defer grace.Stop()
	select {
	case <-finished:
	case <-grace.Chan():
		interrupt()
		<-finished
	case <-ctx.Done():
		<-finished
	}
	e.done.Store(true)
	return Stats{
		Iterations: e.completed.Load(), Dropped: e.dropped.Load(), Interrupted: e.interrupted.Load(),
		MaxVUs: e.allocated.Load(), PeakActive: e.peak.Load(), Elapsed: clk.Now().Sub(t0),
	}
}

// Snapshot returns the executor's progress.
func (e *Executor) Snapshot() Snapshot {
	s := Snapshot{
		Started: e.started.Load(), Completed: e.completed.Load(), Dropped: e.dropped.Load(),
		Interrupted: e.interrupted.Load(), Active: e.active.Load(), Allocated: e.allocated.Load(),
		PeakActive: e.peak.Load(), Done: e.done.Load(),
	}
	if t := e.start.Load(); t != 0 {
		s.Elapsed = e.cfg.Clock.Now().Sub(time.Unix(0, t))
	}
	return s
}
