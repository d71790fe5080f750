package jobs

import (
	"errors"
	"fmt"
	"time"

	"github.com/repool/repool/internal/clock"
)

// Result is one strategy's run.
type Result struct {
	Name string
	// Jobs and Successes count every job; the After* ones those from
	// Config.SwitchAt on.
	Jobs, Successes           int
	AfterJobs, AfterSuccesses int
	// Failures is the failed jobs its worker ran another job after;
	// SameAfterFailure how many of those next jobs ran on the same
	// resource.
	Failures, SameAfterFailure int
	// TurnedBadJobs is the jobs given to the resources that turned bad
	// (TurnsTo) from the switch on; TurnedBadBeforeLeft those of them
	// before the first stretch of LeftAfter jobs that none of them got:
	// the jobs it took the strategy to leave them (a pool's later probes
	// are not counted there).
	TurnedBadJobs, TurnedBadBeforeLeft int
	// SlowJobs is the jobs on slow resources (a mean latency 5× the
	// fastest's or more).
	SlowJobs int
	// Elapsed is the simulated time from the first job's start to the last
	// one's end.
	Elapsed time.Duration
	// PerResource is the jobs each resource ran.
	PerResource []int
}

// SuccessRate is the percentage of jobs that succeeded.
func (r Result) SuccessRate() float64 { return pct(r.Successes, r.Jobs) }

// AfterRate is the success percentage from the switch on.
func (r Result) AfterRate() float64 { return pct(r.AfterSuccesses, r.AfterJobs) }

// SameAfterFailureRate is the percentage of failures whose worker's next
// job ran on the same resource.
func (r Result) SameAfterFailureRate() float64 { return pct(r.SameAfterFailure, r.Failures) }

// SlowShare is the percentage of jobs on slow resources.
func (r Result) SlowShare() float64 { return pct(r.SlowJobs, r.Jobs) }

// JobsPerSecond is the jobs run per simulated second.
func (r Result) JobsPerSecond() float64 { return float64(r.Jobs) / r.Elapsed.Seconds() }

// SuccessesPerSecond is the successful jobs per simulated second.
func (r Result) SuccessesPerSecond() float64 { return float64(r.Successes) / r.Elapsed.Seconds() }

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// Report is a run of every strategy on one world and seed.
type Report struct {
	Config  Config
	Results []Result
}

// ByName returns the result named name, or the zero Result.
func (r Report) ByName(name string) Result {
	for _, res := range r.Results {
		if res.Name == name {
			return res
		}
	}
	return Result{}
}

// simStart is the fake clock's starting time; any fixed instant will do.
var simStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// LeftAfter is how many jobs in a row a strategy must give to other
// resources for a resource to count as left (Result.TurnedBadBeforeLeft).
const LeftAfter = 100

// retryAfter is how long a worker that found no resource waits before it
// asks again.
const retryAfter = 100 * time.Millisecond

// Simulate runs every strategy on cfg. It is deterministic for a given
// cfg.
func Simulate(cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	cfg = cfg.withDefaults()
	js := draws(cfg)
	rep := Report{Config: cfg}
	for i, k := range kinds() {
		clk := clock.NewFake(simStart)
		s, err := k.build(cfg, clk, cfg.Seed*0x9e3779b97f4a7c15+uint64(i))
		if err != nil {
			return Report{}, fmt.Errorf("%s: %w", k.name, err)
		}
		res, err := run(cfg, js, s, clk)
		if err != nil {
			return Report{}, fmt.Errorf("%s: %w", k.name, err)
		}
		res.Name = k.name
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// worker is one worker's state: when it is next free and what it ran.
type worker struct {
	at   time.Duration // since simStart
	prev *Done
	busy bool // a job is running, ending at at
}

// run drives one strategy: Workers workers, each ending its job and
// starting the next at the job's end, the earliest first (ties by worker
// number), until Jobs jobs have run.
func run(cfg Config, js []job, s Strategy, clk *clock.Fake) (Result, error) {
	res := Result{PerResource: make([]int, len(cfg.Resources))}
	ws := make([]worker, cfg.Workers)
	now := time.Duration(0)
	started := 0
	lastBad, left := -1, false // the last job on a turned resource; whether a stretch of LeftAfter followed
	for {
		w := -1
		for i := range ws {
			if (ws[i].busy || started < cfg.Jobs) && (w < 0 || ws[i].at < ws[w].at) {
				w = i
			}
		}
		if w < 0 {
			break
		}
		wk := &ws[w]
		if wk.at > now {
			clk.Advance(wk.at - now)
			now = wk.at
		}
		wk.busy = false
		if started == cfg.Jobs {
			// No job left: end this one (a strategy frees the resource
			// when asked for the next, so count it only).
			wk.at = time.Duration(1<<62 - 1)
			continue
		}
		r, err := s.Next(w, wk.prev, started)
		if errors.Is(err, errNoResource) {
			wk.at = now + retryAfter
			continue
		}
		if err != nil {
			return Result{}, fmt.Errorf("job %d: %w", started, err)
		}
		if r < 0 || r >= len(cfg.Resources) {
			return Result{}, fmt.Errorf("job %d: resource %d out of range", started, r)
		}
		if wk.prev != nil && !wk.prev.Success {
			res.Failures++
			if wk.prev.Res == r {
				res.SameAfterFailure++
			}
		}
		i := started
		started++
		j := js[i]
		ok := j.u < cfg.p(r, i)
		lat := time.Duration(float64(cfg.Resources[r].Latency) * j.f)
		res.Jobs++
		res.PerResource[r]++
		if ok {
			res.Successes++
		}
		if i >= cfg.SwitchAt {
			res.AfterJobs++
			if ok {
				res.AfterSuccesses++
			}
			if !left && lastBad >= 0 && i-lastBad > LeftAfter {
				left = true
			}
			if cfg.Resources[r].TurnsTo > 0 {
				res.TurnedBadJobs++
				if !left {
					res.TurnedBadBeforeLeft++
				}
				lastBad = i
			} else if lastBad < 0 && !left && i-cfg.SwitchAt >= LeftAfter {
				left = true // never given one after the switch
			}
		}
		if cfg.slow(r) {
			res.SlowJobs++
		}
		wk.prev = &Done{Res: r, Success: ok, Latency: lat}
		wk.at = now + lat
		wk.busy = true
		res.Elapsed = max(res.Elapsed, wk.at)
	}
	return res, nil
}
