package pool

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/defaults"
)

// Limits on request fields, enforced by every method. Resource ids,
// contexts and label keys must also be non-empty, and they and label values
// must be valid UTF-8 without NUL, so that every store can keep them as text.
const (
	// MaxIDLen is the longest resource id, context, or label key or value, in bytes.
	MaxIDLen = 256
	// MaxLabels is the most labels a resource or selector may carry.
	MaxLabels = 64
	// ResourceUnitBytes is what one unit of a tenant's resource budget
	// holds of a resource's id and labels: a resource costs one unit, and
	// one more for every whole ResourceUnitBytes of its id, label keys and
	// label values together (ResourceUnits). A resource with a short id
	// and a few labels costs 1; the largest one (a 256-byte id and 64
	// labels of 256-byte keys and values) costs 33.
	ResourceUnitBytes = 1024
	// MinTTL and MaxTTL bound a lease's lifetime.
	MinTTL = time.Second
	MaxTTL = time.Hour
	// MaxEpoch is the largest epoch SetEpoch accepts: tokens must fit in an
	// int64 so that every store can keep them.
	MaxEpoch = 1<<23 - 1
	// maxLeaders bounds Config.Leaders and Config.Candidates (and so
	// maxBatch, the candidates scored together).
	maxLeaders = 32
	// maxCooldown bounds Config.CooldownMax.
	maxCooldown = 1 << 61
)

// Config tunes a Pool. The zero value of every field means its default;
// defaults are applied by New.
type Config struct {
	// HalfLife is how long it takes an observation's weight to halve.
	// Default 1h.
	HalfLife time.Duration
	// PriorWeight caps the pseudo-observations a new cell inherits from its
	// resource's aggregate. Default 2.
	PriorWeight float64
	// Leaders is how many of the best-scoring resources of the context that
	// can take a lease Acquire always considers, from a per-context board of
	// the 32 best. Default 8, at most 32.
	Leaders int
	// Candidates is the size of the per-context reservoir of resources with
	// free capacity, drawn at random, that Acquire scores besides the
	// leaders (and of each fallback round of fresh random draws). Default 8,
	// at most 32.
	Candidates int
	// FailuresToQuarantine is the number of consecutive failures in one
	// context that quarantines the resource for that context. Default 5.
	FailuresToQuarantine int
	// FailuresToQuarantineWhole is the number of consecutive failures over
	// all contexts that quarantines the whole resource. Default 20.
	FailuresToQuarantineWhole int
	// QuarantineBelow quarantines a cell whose posterior mean falls below it
	// once it has QuarantineMinEvidence observations. Default 0.1; negative
	// disables.
	QuarantineBelow float64
	// QuarantineMinEvidence is the decayed observation count needed before
	// QuarantineBelow applies. Default 10.
	QuarantineMinEvidence float64
	// CooldownBase is the first quarantine's length; each relapse doubles
	// it. Default 30s.
	CooldownBase time.Duration
	// CooldownMax caps the cooldown. Default 1h, at most 1<<61ns (about 73
	// years), so that a cooldown with jitter, added to the time, fits.
	CooldownMax time.Duration
	// CooldownJitter spreads cooldowns by ± this fraction. Default 0.2;
	// negative disables.
	CooldownJitter float64
	// EventBuffer is each subscriber's buffer; a subscriber that lets it
	// fill is disconnected. Default 256.
	EventBuffer int
	// EventHistory is how many past events are kept for resuming
	// subscribers. Default 4096.
	EventHistory int
	// Clock tells the time. Default the wall clock, as clock.Anchored reads it.
	Clock clock.Clock
	// Rand is the source of randomness for sampling and jitter; it is used
	// under the pool's lock only. Default a PCG seeded from the runtime.
	Rand rand.Source
	// Objective is what Acquire maximises: ObjectiveSuccess (the success
	// probability) or ObjectiveSuccessPerTime (successes per unit of time,
	// from the latencies outcomes carry). Default ObjectiveSuccess.
	Objective Objective
	// MaxUses retires a resource once it has been leased this many times
	// (a Spec's own MaxUses overrides it). Default 0: no limit.
	MaxUses int
	// MaxAge retires a resource this long after its registration, on the
	// pool's clock (a Spec's own MaxAge overrides it). Default 0: no limit.
	MaxAge time.Duration
	// MaxQuarantinedShare caps the share of the pool's resources that are
	// quarantined at once, as a whole or for any one context: a quarantine
	// that would go beyond it takes the least bad of the quarantined
	// resources (the best posterior mean) out of quarantine instead, so
	// that it is served, and judged by its next outcomes, again. Default
	// 0.5; 1 turns the cap off.
	MaxQuarantinedShare float64
	// Gate, when set, is charged for every resource and cell the pool
	// creates and refunded for every one it removes, under the pool's lock
	// (see the package doc). Default none: nothing is charged.
	Gate Gate
}

// Gate charges a pool's state to an outside budget. The pool calls it under
// its lock, so it must be quick and must not call back into the pool.
//
// Resources are charged in units (ResourceUnits): a resource whose id and
// labels are long costs more than one, so that the budget bounds the
// bytes a tenant holds as well as the count.
type Gate interface {
	// Reserve takes resource units and cells from the budget, or returns why
	// it cannot and takes nothing; the call that asked then creates
	// nothing and fails with ErrOverBudget.
	Reserve(resources, cells int) error
	// Release gives back resource units and cells the pool no longer
	// holds.
	Release(resources, cells int)
}

// ResourceUnits is what a resource with id and labels costs in a tenant's
// resource budget: 1, plus 1 for every whole ResourceUnitBytes of its id,
// label keys and label values together.
func ResourceUnits(id string, labels map[string]string) int {
	n := len(id)
	for k, v := range labels {
		n += len(k) + len(v)
	}
	return 1 + n/ResourceUnitBytes
}

// WithDefaults returns c with every zero field set to its default, as New
// applies them (a nil Rand becomes a new, randomly seeded source); a caller
// that mirrors the pool's model, such as a simulation, reads the defaults
// here rather than repeating them.
func (c Config) WithDefaults() Config {
	c = defaults.Fill(c, Config{
		HalfLife:                  time.Hour,
		PriorWeight:               2,
		Leaders:                   8,
		Candidates:                8,
		FailuresToQuarantine:      5,
		FailuresToQuarantineWhole: 20,
		QuarantineBelow:           0.1,
		QuarantineMinEvidence:     10,
		CooldownBase:              30 * time.Second,
		CooldownMax:               time.Hour,
		CooldownJitter:            0.2,
		EventBuffer:               256,
		EventHistory:              4096,
		Objective:                 ObjectiveSuccess,
		MaxQuarantinedShare:       0.5,
	})
	if c.Clock == nil {
		c.Clock = clock.NewAnchored(0)
	}
	if c.Rand == nil {
		c.Rand = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	return c
}

// Validate reports the first field that is out of range, after defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.HalfLife < 0:
		return fmt.Errorf("%w: HalfLife %v is negative", ErrInvalidArgument, c.HalfLife)
	case c.PriorWeight < 0:
		return fmt.Errorf("%w: PriorWeight %v is negative", ErrInvalidArgument, c.PriorWeight)
	case c.Leaders < 1 || c.Leaders > maxLeaders:
		return fmt.Errorf("%w: Leaders %d is outside [1, %d]", ErrInvalidArgument, c.Leaders, maxLeaders)
	case c.Candidates < 1 || c.Candidates > maxLeaders:
		return fmt.Errorf("%w: Candidates %d is outside [1, %d]", ErrInvalidArgument, c.Candidates, maxLeaders)
	case c.FailuresToQuarantine < 1:
		return fmt.Errorf("%w: FailuresToQuarantine %d is below 1", ErrInvalidArgument, c.FailuresToQuarantine)
	case c.FailuresToQuarantineWhole < 1:
		return fmt.Errorf("%w: FailuresToQuarantineWhole %d is below 1", ErrInvalidArgument, c.FailuresToQuarantineWhole)
	case c.QuarantineBelow >= 1:
		return fmt.Errorf("%w: QuarantineBelow %v is not below 1", ErrInvalidArgument, c.QuarantineBelow)
	case c.CooldownBase < 0 || c.CooldownMax < c.CooldownBase:
		return fmt.Errorf("%w: CooldownBase %v / CooldownMax %v out of order", ErrInvalidArgument, c.CooldownBase, c.CooldownMax)
	case c.CooldownMax > maxCooldown:
		return fmt.Errorf("%w: CooldownMax %v is above %v", ErrInvalidArgument, c.CooldownMax, time.Duration(maxCooldown))
	case c.CooldownJitter >= 1:
		return fmt.Errorf("%w: CooldownJitter %v is not below 1", ErrInvalidArgument, c.CooldownJitter)
	case c.EventBuffer < 1:
		return fmt.Errorf("%w: EventBuffer %d is below 1", ErrInvalidArgument, c.EventBuffer)
	case c.EventHistory < 1:
		return fmt.Errorf("%w: EventHistory %d is below 1", ErrInvalidArgument, c.EventHistory)
	case c.MaxUses < 0 || c.MaxUses > MaxMaxUses:
		return fmt.Errorf("%w: MaxUses %d is outside [0, %d]", ErrInvalidArgument, c.MaxUses, MaxMaxUses)
	case c.MaxAge < 0 || c.MaxAge > MaxMaxAge:
		return fmt.Errorf("%w: MaxAge %v is outside [0, %v]", ErrInvalidArgument, c.MaxAge, MaxMaxAge)
	case !(c.MaxQuarantinedShare > 0 && c.MaxQuarantinedShare <= 1):
		return fmt.Errorf("%w: MaxQuarantinedShare %v is outside (0, 1]", ErrInvalidArgument, c.MaxQuarantinedShare)
	}
	return checkObjective(c.Objective)
}

// Policy is the part of Config that a running pool can change
// (SetPolicy): quarantine, decay, the objective and retirement. The zero
// value of a field means its default, as in Config.
type Policy struct {
	HalfLife                  time.Duration
	FailuresToQuarantine      int
	FailuresToQuarantineWhole int
	QuarantineBelow           float64
	QuarantineMinEvidence     float64
	CooldownBase              time.Duration
	CooldownMax               time.Duration
	Objective                 Objective
	MaxUses                   int
	MaxAge                    time.Duration
	MaxQuarantinedShare       float64
}

// The ranges of a policy that a server takes from its flags and from a
// tenant (the control plane), narrower than what a pool itself accepts:
// one place for both.
const (
	MinHalfLife                  = time.Minute
	MaxHalfLife                  = 30 * 24 * time.Hour
	MaxFailuresToQuarantine      = 1000
	MaxFailuresToQuarantineWhole = 100_000
	MaxQuarantineMinEvidence     = 1e6
	MinCooldown                  = time.Second
	MaxCooldownBase              = 24 * time.Hour
	MaxCooldownMax               = 30 * 24 * time.Hour
	// MaxMaxUses and MaxMaxAge bound MaxUses and MaxAge, here and in a
	// Spec.
	MaxMaxUses = 1_000_000_000
	MaxMaxAge  = 365 * 24 * time.Hour
)

// Policy returns c's quarantine, decay, objective and retirement fields.
func (c Config) Policy() Policy {
	return Policy{
		HalfLife: c.HalfLife, FailuresToQuarantine: c.FailuresToQuarantine, FailuresToQuarantineWhole: c.FailuresToQuarantineWhole,
		QuarantineBelow: c.QuarantineBelow, QuarantineMinEvidence: c.QuarantineMinEvidence,
		CooldownBase: c.CooldownBase, CooldownMax: c.CooldownMax, Objective: c.Objective,
		MaxUses: c.MaxUses, MaxAge: c.MaxAge, MaxQuarantinedShare: c.MaxQuarantinedShare,
	}
}

// WithPolicy returns c with pol's fields.
func (c Config) WithPolicy(pol Policy) Config {
	c.HalfLife, c.FailuresToQuarantine, c.FailuresToQuarantineWhole = pol.HalfLife, pol.FailuresToQuarantine, pol.FailuresToQuarantineWhole
	c.QuarantineBelow, c.QuarantineMinEvidence = pol.QuarantineBelow, pol.QuarantineMinEvidence
	c.CooldownBase, c.CooldownMax = pol.CooldownBase, pol.CooldownMax
	c.Objective = pol.Objective
	c.MaxUses, c.MaxAge, c.MaxQuarantinedShare = pol.MaxUses, pol.MaxAge, pol.MaxQuarantinedShare
	return c
}
