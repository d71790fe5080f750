package quality

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/loadtest/sim/world"
)

// Strategy selects resources. The runner calls Pick once per request and,
// InFlight requests later, Observe with the outcome of that lease; Observe
// also ends the lease, so the resource is free again. Every resource has
// capacity 1: Pick must not return a resource whose lease is still open.
// A Strategy is used by one goroutine.
type Strategy interface {
	// Pick leases a resource for context ctx. It returns errNoResource when
	// nothing can be leased; any other error aborts the simulation.
	Pick(ctx int) (lease, error)
	// Observe ends l, whose use in context ctx succeeded or not.
	Observe(l lease, ctx int, success bool) error
}

// lease is what a strategy hands out: the resource index and whatever the
// strategy needs to end the lease.
type lease struct {
	res       int
	id, token uint64
}

// errNoResource: the strategy had no resource to lease.
var errNoResource = errors.New("no resource to lease")

// env is what a strategy is built from: its own copy of the world (only the
// oracle may look at it), a fake clock the runner advances, and its own
// seeded random stream.
type env struct {
	world *world.World
	clock *clock.Fake
	rng   *rand.Rand
	seed  uint64
	cfg   Config
}

// strategyKind names a strategy and builds it.
type strategyKind struct {
	name string
	// heuristic strategies compete for best_heuristic.
	heuristic bool
	build     func(env) (Strategy, error)
}

func strategyKinds(cfg Config) []strategyKind {
	return []strategyKind{
		{name: "oracle", build: newOracle},
		{name: "ours", build: newOurs},
		{name: "exact", build: newExact},
		{name: "uniform", heuristic: true, build: func(e env) (Strategy, error) { return newFiltered(e, nil), nil }},
		{name: "round-robin", heuristic: true, build: newRoundRobin},
		{name: fmt.Sprintf("fail-counter(%d)", cfg.FailLimit), heuristic: true, build: newFailCounter},
		{name: fmt.Sprintf("error-score(%g)", cfg.ScoreLimit), heuristic: true, build: newErrorScore},
	}
}

// ---- ours: the real internal/pool ----

// ours drives a real pool.Pool: Acquire, then Release with the outcome.
// It also follows the pool's blocked and recovered events, to tell how many
// cells sit in probation (see probation).
type ours struct {
	p     *pool.Pool
	ttl   time.Duration
	ctxs  []string
	index map[string]int
	sub   *pool.Subscription
	last  map[cellName]pool.EventKind // last blocked/recovered event per cell
}

// cellName names a cell; context "" is the whole resource.
type cellName struct{ res, ctx string }

var _ Strategy = (*ours)(nil)

func newOurs(e env) (Strategy, error) {
	pc := e.cfg.poolConfig()
	pc.Clock = e.clock
	pc.Rand = rand.NewPCG(e.seed, 0x6f757273) // "ours"
	p, err := pool.New(pc)
	if err != nil {
		return nil, fmt.Errorf("pool.New: %w", err)
	}
	n := e.world.Resources()
	specs := make([]pool.Spec, n)
	s := &ours{p: p, ttl: e.cfg.leaseTTL(), index: make(map[string]int, n), last: map[cellName]pool.EventKind{}}
	for r := range n {
		id := resourceID(r)
		specs[r] = pool.Spec{ID: id, Capacity: 1}
		s.index[id] = r
	}
	if _, _, err := p.Register(specs); err != nil {
		return nil, fmt.Errorf("Register: %w", err)
	}
	for c := range e.world.Contexts() {
		s.ctxs = append(s.ctxs, "ctx"+strconv.Itoa(c))
	}
	s.sub = p.Subscribe(pool.KindsOf(pool.EventBlocked, pool.EventRecovered), 0)
	return s, nil
}

// drain takes the events published so far; the pool publishes them before
// its call returns.
func (s *ours) drain() {
	for {
		select {
		case e, ok := <-s.sub.C:
			if !ok {
				return
			}
			s.last[cellName{e.Resource, e.Context}] = e.Kind
		default:
			return
		}
	}
}

// probation counts the cells (resource, context) whose quarantine cooldown
// is over but that have not been probed back to health: their last event
// is "blocked" and they are no longer blocked, so they wait in probation
// (or are being probed, at most one per lease in flight). Such a cell is
// not scored by Acquire until its probe succeeds. It returns an error if the
// event subscription ended early.
func (s *ours) probation() (waiting, cells int, err error) {
	s.drain()
	if err := s.sub.Err(); err != nil {
		return 0, 0, fmt.Errorf("event subscription: %w", err)
	}
	infos, _ := s.p.List("", len(s.index))
	for _, in := range infos {
		for _, c := range in.Contexts {
			cells++
			if s.last[cellName{in.ID, c.Context}] == pool.EventBlocked && c.BlockedUntil.IsZero() {
				waiting++
			}
		}
	}
	return waiting, cells, nil
}

func resourceID(r int) string { return fmt.Sprintf("r%05d", r) }

func (s *ours) Pick(ctx int) (lease, error) {
	l, err := s.p.Acquire(s.ctxs[ctx], s.ttl, nil)
	s.drain()
	if errors.Is(err, pool.ErrExhausted) {
		return lease{}, errNoResource
	}
	if err != nil {
		return lease{}, fmt.Errorf("Acquire(%q) = %w", s.ctxs[ctx], err)
	}
	return lease{res: s.index[l.Resource], id: l.ID, token: l.Token}, nil
}

func (s *ours) Observe(l lease, ctx int, success bool) error {
	o := pool.Failure
	if success {
		o = pool.Success
	}
	_, err := s.p.Release(l.id, l.token, o)
	s.drain()
	if err != nil {
		return fmt.Errorf("Release(%d, %d, %v) = %w", l.id, l.token, o, err)
	}
	return nil
}

// stats returns the pool's counters and probation census for the report,
// and ends the event subscription: call it once, after the run.
func (s *ours) stats() (PoolStats, error) {
	waiting, cells, err := s.probation()
	s.sub.Close()
	return PoolStats{Counters: s.p.Counters(), Probation: waiting, Cells: cells}, err
}

// ---- exact: Thompson sampling over every free resource ----

// exact is the gold standard: the pool's statistical model (per-context
// discounted Beta-Bernoulli cells with the same half-life, a new cell
// inheriting at most PriorWeight observations from the resource's aggregate)
// without its shortcuts: every free resource is scored on every request
// from an exact Beta draw, and nothing is quarantined.
type exact struct {
	clock  clock.Clock
	rng    *rand.Rand
	hl     float64 // half-life in nanoseconds
	weight float64 // prior weight
	k      int
	cells  []counts // resource*k + context
	agg    []counts
	busy   []bool
}

// counts are discounted success/failure counts as of upd.
type counts struct {
	a, b float64
	upd  int64
	used bool
}

func (c counts) at(now int64, hl float64) (a, b float64) {
	f := math.Exp2(-float64(now-c.upd) / hl)
	return c.a * f, c.b * f
}

func (c *counts) add(now int64, hl float64, success bool) {
	c.a, c.b = c.at(now, hl)
	c.upd, c.used = now, true
	if success {
		c.a++
	} else {
		c.b++
	}
}

// prior is the pool's rule: the aggregate's posterior mean carrying at most
// weight observations.
func (e *exact) prior(agg counts, now int64) (a, b float64) {
	aa, ab := agg.at(now, e.hl)
	w := math.Min(aa+ab, e.weight)
	m := (1 + aa) / (2 + aa + ab)
	return w * m, w * (1 - m)
}

var _ Strategy = (*exact)(nil)

func newExact(e env) (Strategy, error) {
	pc := e.cfg.poolConfig().WithDefaults() // the pool's own defaults, so they cannot drift apart
	n, k := e.world.Resources(), e.world.Contexts()
	return &exact{
		clock: e.clock, rng: e.rng, hl: float64(pc.HalfLife), weight: pc.PriorWeight, k: k,
		cells: make([]counts, n*k), agg: make([]counts, n), busy: make([]bool, n),
	}, nil
}

func (s *exact) Pick(ctx int) (lease, error) {
	now := s.clock.Now().UnixNano()
	best, bestX := -1, -1.0
	for r, busy := range s.busy {
		if busy {
			continue
		}
		var a, b float64
		if c := s.cells[r*s.k+ctx]; c.used {
			a, b = c.at(now, s.hl)
		} else {
			a, b = s.prior(s.agg[r], now)
		}
		if x := world.BetaSample(s.rng, 1+a, 1+b); x > bestX {
			best, bestX = r, x
		}
	}
	if best < 0 {
		return lease{}, errNoResource
	}
	s.busy[best] = true
	return lease{res: best}, nil
}

func (s *exact) Observe(l lease, ctx int, success bool) error {
	now := s.clock.Now().UnixNano()
	c := &s.cells[l.res*s.k+ctx]
	if !c.used {
		a, b := s.prior(s.agg[l.res], now)
		*c = counts{a: a, b: b, upd: now, used: true}
	}
	c.add(now, s.hl, success)
	s.agg[l.res].add(now, s.hl, success)
	s.busy[l.res] = false
	return nil
}

// ---- oracle: knows the truth ----

// oracle leases the free resource with the highest true success probability
// for the context: an upper reference no learner can reach.
type oracle struct {
	w    *world.World
	busy []bool
}

var _ Strategy = (*oracle)(nil)

func newOracle(e env) (Strategy, error) {
	return &oracle{w: e.world, busy: make([]bool, e.world.Resources())}, nil
}

func (s *oracle) Pick(ctx int) (lease, error) {
	best, bestP := -1, -1.0
	for r, busy := range s.busy {
		if p := s.w.P(r, ctx); !busy && p > bestP {
			best, bestP = r, p
		}
	}
	if best < 0 {
		return lease{}, errNoResource
	}
	s.busy[best] = true
	return lease{res: best}, nil
}

func (s *oracle) Observe(l lease, _ int, _ bool) error {
	s.busy[l.res] = false
	return nil
}

// ---- heuristics ----

// filtered picks uniformly among free resources that its filter accepts,
// or, when it accepts none, uniformly among all free resources (the
// fallback proxy pools use when their list runs dry). With a nil filter it
// is plain uniform random. learn, when set, sees every outcome.
type filtered struct {
	rng    *rand.Rand
	busy   []bool
	accept func(r int) bool
	learn  func(r int, success bool)
	buf    []int
}

var _ Strategy = (*filtered)(nil)

func newFiltered(e env, accept func(int) bool) *filtered {
	n := e.world.Resources()
	return &filtered{rng: e.rng, busy: make([]bool, n), accept: accept, buf: make([]int, 0, n)}
}

func (s *filtered) Pick(int) (lease, error) {
	s.buf = s.buf[:0]
	if s.accept != nil {
		for r, busy := range s.busy {
			if !busy && s.accept(r) {
				s.buf = append(s.buf, r)
			}
		}
	}
	if len(s.buf) == 0 {
		for r, busy := range s.busy {
			if !busy {
				s.buf = append(s.buf, r)
			}
		}
	}
	if len(s.buf) == 0 {
		return lease{}, errNoResource
	}
	r := s.buf[s.rng.IntN(len(s.buf))]
	s.busy[r] = true
	return lease{res: r}, nil
}

func (s *filtered) Observe(l lease, _ int, success bool) error {
	if s.learn != nil {
		s.learn(l.res, success)
	}
	s.busy[l.res] = false
	return nil
}

// newFailCounter is modelled on popular proxy pools: a resource is removed
// for good after cfg.FailLimit failures in total (over all contexts).
func newFailCounter(e env) (Strategy, error) {
	fails := make([]int, e.world.Resources())
	limit := e.cfg.FailLimit
	s := newFiltered(e, func(r int) bool { return fails[r] < limit })
	s.learn = func(r int, success bool) {
		if !success {
			fails[r]++
		}
	}
	return s, nil
}

// newErrorScore is the other common scheme: a score that a failure raises by
// 1 and a success lowers by 0.5 (not below 0); a resource whose score
// reaches cfg.ScoreLimit is blocked for good.
func newErrorScore(e env) (Strategy, error) {
	n := e.world.Resources()
	score := make([]float64, n)
	blocked := make([]bool, n)
	limit := e.cfg.ScoreLimit
	s := newFiltered(e, func(r int) bool { return !blocked[r] })
	s.learn = func(r int, success bool) {
		if success {
			score[r] = math.Max(0, score[r]-0.5)
			return
		}
		score[r]++
		if score[r] >= limit {
			blocked[r] = true
		}
	}
	return s, nil
}

// roundRobin hands out the next free resource after the last one handed out.
type roundRobin struct {
	busy []bool
	next int
}

var _ Strategy = (*roundRobin)(nil)

func newRoundRobin(e env) (Strategy, error) {
	return &roundRobin{busy: make([]bool, e.world.Resources())}, nil
}

func (s *roundRobin) Pick(int) (lease, error) {
	n := len(s.busy)
	for i := range n {
		r := (s.next + i) % n
		if !s.busy[r] {
			s.busy[r] = true
			s.next = (r + 1) % n
			return lease{res: r}, nil
		}
	}
	return lease{}, errNoResource
}

func (s *roundRobin) Observe(l lease, _ int, _ bool) error {
	s.busy[l.res] = false
	return nil
}
