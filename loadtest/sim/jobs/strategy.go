package jobs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/pool"
)

// Strategy hands resources to workers. Next ends the worker's previous job
// (nil before its first) and returns the resource for its next one, or
// errNoResource when none can serve now. A Strategy is used by one
// goroutine.
type Strategy interface {
	Next(worker int, prev *Done, job int) (int, error)
}

// Done is a finished job: where it ran, whether it succeeded and how long
// it took.
type Done struct {
	Res     int
	Success bool
	Latency time.Duration
}

var errNoResource = errors.New("no resource can serve")

// kind names a strategy and builds it.
type kind struct {
	name  string
	build func(c Config, clk *clock.Fake, seed uint64) (Strategy, error)
}

func kinds() []kind {
	return []kind{
		{"oracle", newOracle},
		{"repool success", func(c Config, clk *clock.Fake, seed uint64) (Strategy, error) {
			return newRepool(c, clk, seed, pool.ObjectiveSuccess)
		}},
		{"repool success_per_time", func(c Config, clk *clock.Fake, seed uint64) (Strategy, error) {
			return newRepool(c, clk, seed, pool.ObjectiveSuccessPerTime)
		}},
		{"round robin", newRoundRobin},
		{"random", newRandom},
	}
}

// repool drives a real pool.Pool as a client of the server would: a
// worker's first lease by Acquire, every later one by ReleaseNextTimed,
// which releases the finished job's lease with its outcome and latency and
// leases the next resource in the same call (the released resource is
// excluded after a failure, the default).
type repool struct {
	p      *pool.Pool
	ids    []string
	index  map[string]int
	leases []pool.Lease // per worker; ID 0: none
}

const (
	repoolContext = "job"
	repoolTTL     = time.Minute
)

func newRepool(c Config, clk *clock.Fake, seed uint64, objective pool.Objective) (Strategy, error) {
	p, err := pool.New(pool.Config{Clock: clk, Rand: rand.NewPCG(seed, 0x7265706f6f6c), Objective: objective})
	if err != nil {
		return nil, err
	}
	s := &repool{p: p, index: map[string]int{}, leases: make([]pool.Lease, c.Workers)}
	specs := make([]pool.Spec, len(c.Resources))
	for i, r := range c.Resources {
		specs[i] = pool.Spec{ID: r.Name, Capacity: r.Capacity}
		s.ids = append(s.ids, r.Name)
		s.index[r.Name] = i
	}
	if _, _, err := p.Register(specs); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *repool) Next(w int, prev *Done, _ int) (int, error) {
	var l pool.Lease
	var err error
	if held := s.leases[w]; prev != nil && held.ID != 0 {
		o := pool.Failure
		if prev.Success {
			o = pool.Success
		}
		var rerr error
		_, l, err, rerr = s.p.ReleaseNextTimed(held.ID, held.Token, o, prev.Latency, pool.Next{Context: repoolContext, TTL: repoolTTL})
		if rerr != nil {
			return 0, fmt.Errorf("ReleaseNextTimed: %w", rerr)
		}
		s.leases[w] = pool.Lease{}
	} else {
		l, err = s.p.Acquire(repoolContext, repoolTTL, nil)
	}
	if errors.Is(err, pool.ErrExhausted) {
		return 0, errNoResource
	}
	if err != nil {
		return 0, err
	}
	s.leases[w] = l
	return s.index[l.Resource], nil
}

// slots counts the jobs each resource carries, for the strategies that
// keep their own books.
type slots struct {
	c    Config
	busy []int
	held []int // per worker: its resource, or -1
}

func newSlots(c Config) slots {
	held := make([]int, c.Workers)
	for i := range held {
		held[i] = -1
	}
	return slots{c: c, busy: make([]int, len(c.Resources)), held: held}
}

func (s *slots) free(r int) bool { return s.busy[r] < s.c.Resources[r].Capacity }

func (s *slots) end(w int) {
	if r := s.held[w]; r >= 0 {
		s.busy[r]--
		s.held[w] = -1
	}
}

func (s *slots) take(w, r int) int {
	s.busy[r]++
	s.held[w] = r
	return r
}

// oracle knows every resource's success probability at every job: it
// takes the free resource most likely to succeed, the fastest among equals.
type oracle struct{ slots }

func newOracle(c Config, _ *clock.Fake, _ uint64) (Strategy, error) {
	return &oracle{newSlots(c)}, nil
}

func (s *oracle) Next(w int, _ *Done, job int) (int, error) {
	s.end(w)
	best := -1
	for r := range s.busy {
		if !s.free(r) {
			continue
		}
		if best < 0 || s.c.p(r, job) > s.c.p(best, job) ||
			(s.c.p(r, job) == s.c.p(best, job) && s.c.Resources[r].Latency < s.c.Resources[best].Latency) {
			best = r
		}
	}
	if best < 0 {
		return 0, errNoResource
	}
	return s.take(w, best), nil
}

// roundRobin hands out the next resource with free capacity after the last
// one handed out.
type roundRobin struct {
	slots
	next int
}

func newRoundRobin(c Config, _ *clock.Fake, _ uint64) (Strategy, error) {
	return &roundRobin{slots: newSlots(c)}, nil
}

func (s *roundRobin) Next(w int, _ *Done, _ int) (int, error) {
	s.end(w)
	n := len(s.busy)
	for i := range n {
		if r := (s.next + i) % n; s.free(r) {
			s.next = (r + 1) % n
			return s.take(w, r), nil
		}
	}
	return 0, errNoResource
}

// random hands out a uniformly random resource with free capacity.
type random struct {
	slots
	rng *rand.Rand
	buf []int
}

func newRandom(c Config, _ *clock.Fake, seed uint64) (Strategy, error) {
	return &random{slots: newSlots(c), rng: rand.New(rand.NewPCG(seed, 0x72616e64))}, nil
}

func (s *random) Next(w int, _ *Done, _ int) (int, error) {
	s.end(w)
	s.buf = s.buf[:0]
	for r := range s.busy {
		if s.free(r) {
			s.buf = append(s.buf, r)
		}
	}
	if len(s.buf) == 0 {
		return 0, errNoResource
	}
	return s.take(w, s.buf[s.rng.IntN(len(s.buf))]), nil
}
