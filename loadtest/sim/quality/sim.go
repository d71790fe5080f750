// Package quality measures how well the reputation pool (internal/pool)
// picks resources: Simulate runs the pool (ours), exact Thompson sampling,
// the heuristics popular proxy pools use and an oracle that knows the truth
// on copies of one seeded world (package world) and reports each one's
// success rate; ParseFlags and Run are the command line of loadtest/sim.
package quality

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/loadtest/sim/world"
)

// Config describes one simulation run. The zero value of every field means
// its default; defaults are applied by withDefaults.
type Config struct {
	// World is the simulated truth; World.Seed seeds everything.
	World world.Config
	// Steps is the number of requests. Default 216000 (6h at 100ms a step).
	Steps int
	// InFlight is the number of leases out at once: a lease is acquired on
	// every step and its outcome reported, and the lease released, InFlight
	// steps later. Default 16.
	InFlight int
	// HalfLife is the half-life of ours and exact. Default the pool's
	// default.
	HalfLife time.Duration
	// Leaders and Candidates override the pool's defaults when positive.
	Leaders, Candidates int
	// FailLimit is fail-counter's number of failures before removal.
	// Default 3.
	FailLimit int
	// ScoreLimit is error-score's blocking score. Default 3.
	ScoreLimit float64
	// Parallel bounds the strategies simulated at once. Default GOMAXPROCS.
	Parallel int
}

func (c Config) withDefaults() Config {
	if c.Steps == 0 {
		c.Steps = 216000
	}
	if c.InFlight == 0 {
		c.InFlight = 16
	}
	if c.HalfLife == 0 {
		c.HalfLife = pool.Config{}.WithDefaults().HalfLife
	}
	if c.FailLimit == 0 {
		c.FailLimit = 3
	}
	if c.ScoreLimit == 0 {
		c.ScoreLimit = 3
	}
	if c.Parallel == 0 {
		c.Parallel = runtime.GOMAXPROCS(0)
	}
	c.World = c.World.WithDefaults()
	return c
}

// Validate reports the first field that is out of range, after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.World.Validate(); err != nil {
		return err
	}
	switch {
	case c.Steps < 1:
		return fmt.Errorf("Steps %d is below 1", c.Steps)
	case c.InFlight < 1 || c.InFlight > c.World.Resources:
		return fmt.Errorf("InFlight %d is outside [1, Resources=%d]", c.InFlight, c.World.Resources)
	case c.World.Step > pool.MaxTTL/time.Duration(2*c.InFlight):
		return fmt.Errorf("InFlight %d × Step %v: leases stay out %v and ours leases for twice that, above the pool's longest TTL, %v",
			c.InFlight, c.World.Step, time.Duration(c.InFlight)*c.World.Step, pool.MaxTTL)
	case c.HalfLife < 0:
		return fmt.Errorf("HalfLife %v is negative", c.HalfLife)
	case c.Leaders < 0 || c.Candidates < 0:
		return fmt.Errorf("Leaders %d / Candidates %d is negative", c.Leaders, c.Candidates)
	case c.FailLimit < 1:
		return fmt.Errorf("FailLimit %d is below 1", c.FailLimit)
	case c.ScoreLimit <= 0:
		return fmt.Errorf("ScoreLimit %v is not positive", c.ScoreLimit)
	case c.Parallel < 1:
		return fmt.Errorf("Parallel %d is below 1", c.Parallel)
	}
	return c.poolConfig().Validate()
}

// leaseTTL is the TTL ours leases with: twice as long as a lease stays out
// (InFlight steps), and at least the pool's shortest, so that none expires.
// Validate checks that it is at most the pool's longest.
func (c Config) leaseTTL() time.Duration {
	return max(pool.MinTTL, 2*time.Duration(c.InFlight)*c.World.Step)
}

// poolConfig is the pool configuration ours runs with (before the clock and
// randomness are injected): the defaults but for HalfLife and any override.
func (c Config) poolConfig() pool.Config {
	return pool.Config{HalfLife: c.HalfLife, Leaders: c.Leaders, Candidates: c.Candidates}
}

// Result is one strategy's score on the world.
type Result struct {
	Name      string
	Heuristic bool
	Requests  int
	Acquired  int
	Exhausted int     // requests with nothing leased (counted as failures)
	Successes int     // realised successes
	ExpectedP float64 // sum of the true p of every lease, at the time of use
	// Early* cover the first quarter of the requests, Late* the last
	// quarter, when drift, breakage and permanent blocking have had time to
	// act.
	EarlyRequests, EarlySuccesses int
	LateRequests, LateSuccesses   int
	// Pool holds what ours' pool reports about itself at the end.
	Pool *PoolStats
	// Elapsed is the wall time the strategy's run took (not compared by
	// tests: it is the only nondeterministic field).
	Elapsed time.Duration
}

// SuccessRate is the percentage of requests that succeeded.
func (r Result) SuccessRate() float64 { return pct(r.Successes, r.Requests) }

// ExpectedRate is the mean true success probability of the requests, in
// percent: the success rate without the outcome noise.
func (r Result) ExpectedRate() float64 {
	if r.Requests == 0 {
		return 0
	}
	return 100 * r.ExpectedP / float64(r.Requests)
}

// EarlyRate is the success percentage over the first quarter of requests.
func (r Result) EarlyRate() float64 { return pct(r.EarlySuccesses, r.EarlyRequests) }

// LateRate is the success percentage over the last quarter of requests.
func (r Result) LateRate() float64 { return pct(r.LateSuccesses, r.LateRequests) }

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// PoolStats is what ours' pool says about itself at the end of a run.
type PoolStats struct {
	pool.Counters
	// Probation is how many of the Cells (resource, context) finished their
	// quarantine cooldown but were never probed back: Acquire skips them.
	Probation, Cells int
}

// Report is a whole run: the world as it was at the start and the results,
// oracle first.
type Report struct {
	Config  Config
	Start   WorldSummary
	Results []Result
}

// WorldSummary describes a world's starting point and what happened to it.
type WorldSummary struct {
	MeanP     float64 // mean success probability over every cell
	TopMeanP  float64 // mean, over contexts, of the InFlight best cells' p
	Above90   float64 // share of healthy cells with p > 0.9
	Breakages int     // over the whole run
}

// simStart is the fake clock's starting time; any fixed instant will do.
var simStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Simulate runs every strategy on its own copy of the world built from
// cfg.World; the copies evolve identically and draw the same requests, so
// the strategies are compared on common random numbers. It is
// deterministic for a given cfg whatever cfg.Parallel is.
func Simulate(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.withDefaults()
	kinds := strategyKinds(cfg)
	rep := Report{Config: cfg, Results: make([]Result, len(kinds))}

	var (
		wg   sync.WaitGroup
		sem  = make(chan struct{}, cfg.Parallel)
		errs = make([]error, len(kinds))
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, k := range kinds {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			start := time.Now()
			res, ws, err := runOne(ctx, cfg, k, uint64(i))
			res.Elapsed = time.Since(start)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", k.name, err)
				cancel()
				return
			}
			rep.Results[i] = res
			if i == 0 {
				rep.Start = ws
			}
		})
	}
	wg.Wait()
	if err := firstCause(errs); err != nil {
		return Report{}, err
	}
	return rep, nil
}

// firstCause returns the first error that is not a cancellation: when one
// strategy fails, the others are cancelled, and their context.Canceled only
// hides the cause. If every error is a cancellation (the caller cancelled),
// it returns the first.
func firstCause(errs []error) error {
	var first error
	for _, err := range errs {
		switch {
		case err == nil:
		case !errors.Is(err, context.Canceled):
			return err
		case first == nil:
			first = err
		}
	}
	return first
}

// slot is a lease in flight.
type slot struct {
	open    bool
	l       lease
	ctx     int
	success bool
}

// runOne runs one strategy over its own copy of the world.
func runOne(ctx context.Context, cfg Config, k strategyKind, id uint64) (Result, WorldSummary, error) {
	w, err := world.New(cfg.World)
	if err != nil {
		return Result{}, WorldSummary{}, err
	}
	ws := summarize(w, cfg.InFlight)
	clk := clock.NewFake(simStart)
	seed := cfg.World.Seed*0x9e3779b97f4a7c15 + id
	s, err := k.build(env{
		world: w, clock: clk, cfg: cfg, seed: seed,
		rng: rand.New(rand.NewPCG(seed, 0x7374726174)), // "strat"
	})
	if err != nil {
		return Result{}, WorldSummary{}, err
	}

	res := Result{Name: k.name, Heuristic: k.heuristic}
	ring := make([]slot, cfg.InFlight)
	busy := make([]bool, w.Resources())
	earlyTo, lateFrom := cfg.Steps/4, cfg.Steps-cfg.Steps/4
	step := cfg.World.Step
	for t := range cfg.Steps {
		if t%4096 == 0 && ctx.Err() != nil {
			return Result{}, WorldSummary{}, ctx.Err()
		}
		if t > 0 {
			clk.Advance(step)
		}
		req := w.Next()
		sl := &ring[t%cfg.InFlight]
		if sl.open {
			if err := s.Observe(sl.l, sl.ctx, sl.success); err != nil {
				return Result{}, WorldSummary{}, fmt.Errorf("step %d: %w", t, err)
			}
			busy[sl.l.res] = false
			sl.open = false
		}
		early, late := t < earlyTo, t >= lateFrom
		res.Requests++
		if early {
			res.EarlyRequests++
		}
		if late {
			res.LateRequests++
		}
		l, err := s.Pick(req.Context)
		if errors.Is(err, errNoResource) {
			res.Exhausted++
			continue
		}
		if err != nil {
			return Result{}, WorldSummary{}, fmt.Errorf("step %d: %w", t, err)
		}
		if l.res < 0 || l.res >= len(busy) || busy[l.res] {
			return Result{}, WorldSummary{}, fmt.Errorf("step %d: leased resource %d, which is out of range or busy", t, l.res)
		}
		busy[l.res] = true
		p := w.P(l.res, req.Context)
		ok := req.U < p
		*sl = slot{open: true, l: l, ctx: req.Context, success: ok}
		res.Acquired++
		res.ExpectedP += p
		if ok {
			res.Successes++
			if early {
				res.EarlySuccesses++
			}
			if late {
				res.LateSuccesses++
			}
		}
	}
	if o, ok := s.(*ours); ok {
		ps, err := o.stats()
		if err != nil {
			return Result{}, WorldSummary{}, err
		}
		res.Pool = &ps
	}
	ws.Breakages = w.Stats().Breakages
	return res, ws, nil
}

// summarize describes the world before its first request.
func summarize(w *world.World, top int) WorldSummary {
	var ws WorldSummary
	n, k := w.Resources(), w.Contexts()
	healthy := 0
	ps := make([]float64, n)
	for c := range k {
		for r := range n {
			p := w.P(r, c)
			ps[r] = p
			ws.MeanP += p
			if !w.Bad(r) {
				healthy++
				if p > 0.9 {
					ws.Above90++
				}
			}
		}
		// mean of the top best p: partial selection is plenty for n cells.
		for i := range min(top, n) {
			m := i
			for j := i + 1; j < n; j++ {
				if ps[j] > ps[m] {
					m = j
				}
			}
			ps[i], ps[m] = ps[m], ps[i]
			ws.TopMeanP += ps[i] / float64(min(top, n)*k)
		}
	}
	ws.MeanP /= float64(n * k)
	if healthy > 0 {
		ws.Above90 /= float64(healthy)
	}
	return ws
}
