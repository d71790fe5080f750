// Package world is the hidden truth of the selection-quality simulation: a
// set of resources whose success probability per context drifts, breaks and
// recovers, and a stream of requests, each carrying the uniform number that
// decides its outcome.
//
// A World is a pure function of its Config: two worlds built from the same
// Config evolve identically and draw the same requests whatever is done with
// them, which is what lets the simulation give every strategy its own copy
// and still compare them on common random numbers. A World is not safe for
// concurrent use.
package world

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Config describes a world. The zero value of every field means its default;
// defaults are applied by New. Fields for which zero is a meaningful value
// take a negative number to mean zero.
type Config struct {
	// Seed selects the world. Every seed, including 0, is a valid world.
	Seed uint64
	// Resources is the number of resources. Default 200.
	Resources int
	// Contexts is the number of contexts (target sites); requests are spread
	// evenly over them. Default 3.
	Contexts int
	// Step is the simulated time between two requests. Default 100ms.
	Step time.Duration

	// BaseAlpha and BaseBeta shape the Beta distribution each resource's
	// base success probability is drawn from. Default Beta(4, 2): mean 0.67,
	// about 8% of resources above 0.9 and 26% above 0.8, so good resources
	// are rarer than mediocre ones.
	BaseAlpha, BaseBeta float64
	// ContextSpread is the standard deviation of a per-(resource, context)
	// offset added to the base logit, so that a resource's rank differs
	// between contexts. Default 0.5; negative means 0.
	ContextSpread float64

	// DriftSD is the stationary standard deviation, in logit units, of the
	// drift of each (resource, context): an Ornstein-Uhlenbeck process (a
	// random walk of the logit pulled back towards the base). Default 0.6;
	// negative means no drift.
	DriftSD float64
	// DriftTau is the drift's mean-reversion time. Default 2h.
	DriftTau time.Duration
	// Tick is how often drift and breakage are applied. Default 1s.
	Tick time.Duration

	// BreakEvery is the mean time between breakages of one healthy
	// resource. Default 6h; negative disables breakage.
	BreakEvery time.Duration
	// BreakFor is the mean (exponentially distributed) length of a
	// breakage, after which the resource recovers to its drifting
	// probability. Default 15m.
	BreakFor time.Duration
	// BreakOneContext is the chance that a breakage hits one context only
	// (the target banned the resource) rather than all of them (the
	// resource is down). Default 0.5; negative means 0.
	BreakOneContext float64
	// BrokenP is the success probability of a broken resource. Default 0.05.
	BrokenP float64

	// BadFraction is the share of resources that are always bad: they
	// neither drift nor break. Default 0.05; negative means none.
	BadFraction float64
	// BadP is the success probability of an always-bad resource. Default 0.02.
	BadP float64
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(v *float64, d float64) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	if c.Resources == 0 {
		c.Resources = 200
	}
	if c.Contexts == 0 {
		c.Contexts = 3
	}
	if c.Step == 0 {
		c.Step = 100 * time.Millisecond
	}
	if c.BaseAlpha == 0 {
		c.BaseAlpha = 4
	}
	if c.BaseBeta == 0 {
		c.BaseBeta = 2
	}
	def(&c.ContextSpread, 0.5)
	def(&c.DriftSD, 0.6)
	if c.DriftTau == 0 {
		c.DriftTau = 2 * time.Hour
	}
	if c.Tick == 0 {
		c.Tick = time.Second
	}
	if c.BreakEvery == 0 {
		c.BreakEvery = 6 * time.Hour
	}
	if c.BreakFor == 0 {
		c.BreakFor = 15 * time.Minute
	}
	def(&c.BreakOneContext, 0.5)
	if c.BrokenP == 0 {
		c.BrokenP = 0.05
	}
	def(&c.BadFraction, 0.05)
	if c.BadP == 0 {
		c.BadP = 0.02
	}
	return c
}

// Validate reports the first field that is out of range, after defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Resources < 1:
		return fmt.Errorf("world: Resources %d is below 1", c.Resources)
	case c.Contexts < 1:
		return fmt.Errorf("world: Contexts %d is below 1", c.Contexts)
	case c.Step <= 0:
		return fmt.Errorf("world: Step %v is not positive", c.Step)
	case c.BaseAlpha <= 0 || c.BaseBeta <= 0:
		return fmt.Errorf("world: BaseAlpha %v / BaseBeta %v must be positive", c.BaseAlpha, c.BaseBeta)
	case c.DriftTau <= 0:
		return fmt.Errorf("world: DriftTau %v is not positive", c.DriftTau)
	case c.Tick < c.Step:
		return fmt.Errorf("world: Tick %v is shorter than Step %v", c.Tick, c.Step)
	case c.BreakFor <= 0:
		return fmt.Errorf("world: BreakFor %v is not positive", c.BreakFor)
	case c.BreakOneContext > 1:
		return fmt.Errorf("world: BreakOneContext %v is above 1", c.BreakOneContext)
	case c.BrokenP <= 0 || c.BrokenP >= 1:
		return fmt.Errorf("world: BrokenP %v is outside (0, 1)", c.BrokenP)
	case c.BadFraction > 1:
		return fmt.Errorf("world: BadFraction %v is above 1", c.BadFraction)
	case c.BadP <= 0 || c.BadP >= 1:
		return fmt.Errorf("world: BadP %v is outside (0, 1)", c.BadP)
	}
	return nil
}

// Request is one request of the stream: at step Step, for context Context;
// it succeeds on resource r iff U < P(r, Context) at that step.
type Request struct {
	Step    int
	Context int
	U       float64
}

// Stats count what happened to a world so far.
type Stats struct {
	Breakages int // breakage events (one context or whole resource)
}

// World is the simulated truth. Create it with New; call Next before every
// request.
type World struct {
	cfg Config
	n   int
	k   int

	base   []float64 // base logit per cell (resource*k + context)
	drift  []float64 // current drift per cell
	p      []float64 // current success probability per cell
	broken []int     // per cell: broken until this step index, exclusive
	bad    []bool    // per resource

	decay, shock float64 // OU step factors per tick
	breakProb    float64 // chance per tick that a healthy resource breaks
	tickSteps    int

	evo *rand.Rand // evolution: drift and breakage
	req *rand.Rand // requests: context and outcome uniform

	step  int // index of the current request; -1 before the first Next
	stats Stats
}

// New builds the world described by cfg, at the moment before its first
// request.
func New(cfg Config) (*World, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	n, k := cfg.Resources, cfg.Contexts
	w := &World{
		cfg: cfg, n: n, k: k,
		base:      make([]float64, n*k),
		drift:     make([]float64, n*k),
		p:         make([]float64, n*k),
		broken:    make([]int, n*k),
		bad:       make([]bool, n),
		tickSteps: int(cfg.Tick / cfg.Step),
		evo:       rand.New(rand.NewPCG(cfg.Seed, 0x776f726c64)),     // "world"
		req:       rand.New(rand.NewPCG(cfg.Seed, 0x72657175657374)), // "request"
		step:      -1,
	}
	dt := float64(w.tickSteps) * float64(cfg.Step)
	w.decay = math.Exp(-dt / float64(cfg.DriftTau))
	w.shock = cfg.DriftSD * math.Sqrt(1-w.decay*w.decay)
	if cfg.BreakEvery > 0 {
		w.breakProb = -math.Expm1(-dt / float64(cfg.BreakEvery))
	}

	for r := range n {
		b := logit(BetaSample(w.evo, cfg.BaseAlpha, cfg.BaseBeta))
		for c := range k {
			w.base[r*k+c] = b + cfg.ContextSpread*w.evo.NormFloat64()
		}
	}
	nbad := int(math.Round(cfg.BadFraction * float64(n)))
	for _, r := range w.evo.Perm(n)[:nbad] {
		w.bad[r] = true
	}
	w.refresh()
	return w, nil
}

// Config returns the world's configuration with defaults applied.
func (w *World) Config() Config { return w.cfg }

// Resources returns the number of resources.
func (w *World) Resources() int { return w.n }

// Contexts returns the number of contexts.
func (w *World) Contexts() int { return w.k }

// Stats returns what happened so far.
func (w *World) Stats() Stats { return w.stats }

// Bad reports whether resource r is one of the always-bad ones.
func (w *World) Bad(r int) bool { return w.bad[r] }

// P returns resource r's success probability in context c now.
func (w *World) P(r, c int) float64 { return w.p[r*w.k+c] }

// Next moves the world to the next request and returns it. Drift and
// breakage are applied every Tick, before the first request of the tick.
func (w *World) Next() Request {
	w.step++
	if w.step > 0 && w.step%w.tickSteps == 0 {
		w.evolve()
	}
	return Request{Step: w.step, Context: w.req.IntN(w.k), U: w.req.Float64()}
}

func (w *World) evolve() {
	for r := range w.n {
		if w.bad[r] {
			continue
		}
		cells := w.drift[r*w.k : (r+1)*w.k]
		for c := range cells {
			cells[c] = cells[c]*w.decay + w.shock*w.evo.NormFloat64()
		}
		if w.breakProb == 0 || w.evo.Float64() >= w.breakProb {
			continue
		}
		until := w.step + 1 + int(w.evo.ExpFloat64()*float64(w.cfg.BreakFor)/float64(w.cfg.Step))
		lo, hi := r*w.k, (r+1)*w.k
		if w.evo.Float64() < w.cfg.BreakOneContext {
			lo += w.evo.IntN(w.k)
			hi = lo + 1
		}
		for i := lo; i < hi; i++ {
			w.broken[i] = max(w.broken[i], until)
		}
		w.stats.Breakages++
	}
	w.refresh()
}

// refresh recomputes every cell's probability for the current step (step 0
// before the first request).
func (w *World) refresh() {
	now := max(w.step, 0)
	for r := range w.n {
		for c := range w.k {
			i := r*w.k + c
			switch {
			case w.bad[r]:
				w.p[i] = w.cfg.BadP
			case w.broken[i] > now:
				w.p[i] = w.cfg.BrokenP
			default:
				w.p[i] = sigmoid(w.base[i] + w.drift[i])
			}
		}
	}
}

func logit(p float64) float64 {
	p = math.Min(math.Max(p, 1e-6), 1-1e-6)
	return math.Log(p / (1 - p))
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// BetaSample draws exactly (no approximation) from Beta(a, b) for a, b > 0,
// as a ratio of gamma draws. The world uses it for base probabilities; the
// simulation's exact Thompson sampler uses it too.
func BetaSample(r *rand.Rand, a, b float64) float64 {
	x := gammaSample(r, a)
	y := gammaSample(r, b)
	return x / (x + y)
}

// gammaSample draws from Gamma(k, 1) for k > 0 (Marsaglia and Tsang, with
// the usual boost for k < 1).
func gammaSample(r *rand.Rand, k float64) float64 {
	if k < 1 {
		u := r.Float64()
		for u == 0 {
			u = r.Float64()
		}
		return gammaSample(r, k+1) * math.Pow(u, 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
