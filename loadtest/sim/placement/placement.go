// Package placement simulates how the store places tenants on groups and
// how many tenant moves bring the groups back into balance, for the
// figures of docs/scaling.md.
//
// Tenants of a seeded, skewed size mix (Mix) arrive one by one and are
// placed as CreateTenant places a tenant the operator did not place: on
// the group with the fewest live tenants, the first by name on a tie
// (sqlstore's pickGroup, with every group able to take tenants). The rule counts tenants, not resources, so the
// groups' resources differ as much as the sizes of the tenants that happen
// to land on them. Rebalance then moves tenants, largest first, from the
// largest group to the smallest, as an operator would with
// POST /api/v1/tenants/{id}/move, until the largest group is within a
// given fraction of the mean.
package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Class is one band of a size mix: Share of the tenants have between Min
// and Max resources, log-uniformly.
type Class struct {
	Name     string
	Share    float64
	Min, Max int
}

// Mix is the size distribution docs/scaling.md states: most tenants small,
// a few large ones holding much of the total.
var Mix = []Class{
	{"small", 0.70, 100, 1_000},
	{"medium", 0.25, 1_000, 10_000},
	{"large", 0.05, 10_000, 100_000},
}

// Config is one simulation.
type Config struct {
	Seed    uint64
	Tenants int
	Groups  int
	// Within is the balance goal of Rebalance: the largest group's
	// resources at most (1+Within) times the mean.
	Within float64
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Tenants < 1:
		return fmt.Errorf("placement: Tenants %d: want at least 1", c.Tenants)
	case c.Groups < 1 || c.Groups > 999:
		return fmt.Errorf("placement: Groups %d: want 1 to 999", c.Groups)
	case c.Within <= 0 || c.Within > 1:
		return fmt.Errorf("placement: Within %v: want a fraction in (0, 1]", c.Within)
	}
	return nil
}

// Tenant is one simulated tenant.
type Tenant struct {
	ID        int
	Resources int
}

// Result is what one simulation found.
type Result struct {
	Config
	// Total is every tenant's resources; Largest the largest tenant's.
	Total, Largest int
	// Before and After are each group's resources after placement and
	// after Rebalance, in group-name order.
	Before, After []int
	// Moves is how many moves Rebalance made; Moved their resources.
	Moves, Moved int
	// Reached says whether Rebalance met the goal; Alone, when it did
	// not, that the largest group is one tenant alone, larger than the
	// goal, which no move can help.
	Reached, Alone bool
}

// Mean is the mean resources per group.
func (r Result) Mean() float64 { return float64(r.Total) / float64(r.Groups) }

// MaxOverMean is the largest group's resources over the mean.
func MaxOverMean(loads []int, mean float64) float64 {
	m := 0
	for _, l := range loads {
		m = max(m, l)
	}
	return float64(m) / mean
}

// MinOverMean is the smallest group's resources over the mean.
func MinOverMean(loads []int, mean float64) float64 {
	m := math.MaxInt
	for _, l := range loads {
		m = min(m, l)
	}
	return float64(m) / mean
}

// Sizes draws n tenant sizes from Mix with seed.
func Sizes(seed uint64, n int) []Tenant {
	rng := rand.New(rand.NewPCG(seed, 0x706c6163))
	out := make([]Tenant, n)
	for i := range out {
		u := rng.Float64()
		c := Mix[len(Mix)-1]
		for _, k := range Mix {
			if u < k.Share {
				c = k
				break
			}
			u -= k.Share
		}
		lo, hi := math.Log(float64(c.Min)), math.Log(float64(c.Max))
		out[i] = Tenant{ID: i, Resources: int(math.Exp(lo + rng.Float64()*(hi-lo)))}
	}
	return out
}

// Place places tenants in order by the store's rule and returns each
// group's tenants, groups in name order.
func Place(tenants []Tenant, groups int) [][]Tenant {
	placed := make([][]Tenant, groups)
	for _, t := range tenants {
		best := 0
		for g := range placed {
			if len(placed[g]) < len(placed[best]) {
				best = g
			}
		}
		placed[best] = append(placed[best], t)
	}
	return placed
}

func loads(placed [][]Tenant) []int {
	out := make([]int, len(placed))
	for g, ts := range placed {
		for _, t := range ts {
			out[g] += t.Resources
		}
	}
	return out
}

// Rebalance moves tenants until the largest group holds at most
// (1+within) times the mean resources: each move takes one tenant from the
// largest group to the smallest, the one that leaves the larger of the two
// smallest (among those smaller than the gap between them, so that the
// smallest does not become the new largest). It stops when the goal is
// met or no tenant fits — in the simulations, when the largest group is
// one tenant alone, larger than the goal — and returns the moves and the
// resources moved.
func Rebalance(placed [][]Tenant, within float64) (moves, moved int, reached bool) {
	ls := loads(placed)
	total := 0
	for _, l := range ls {
		total += l
	}
	goal := (1 + within) * float64(total) / float64(len(ls))
	for {
		hi, lo := 0, 0
		for g, l := range ls {
			if l > ls[hi] {
				hi = g
			}
			if l < ls[lo] {
				lo = g
			}
		}
		if float64(ls[hi]) <= goal {
			return moves, moved, true
		}
		gap := ls[hi] - ls[lo]
		pick := -1
		cost := func(size int) int { return max(ls[hi]-size, ls[lo]+size) }
		for i, t := range placed[hi] {
			if t.Resources < gap && (pick < 0 || cost(t.Resources) < cost(placed[hi][pick].Resources)) {
				pick = i
			}
		}
		if pick < 0 {
			return moves, moved, false
		}
		t := placed[hi][pick]
		placed[hi] = append(placed[hi][:pick], placed[hi][pick+1:]...)
		placed[lo] = append(placed[lo], t)
		ls[hi] -= t.Resources
		ls[lo] += t.Resources
		moves++
		moved += t.Resources
	}
}

// Run runs one simulation.
func Run(c Config) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	tenants := Sizes(c.Seed, c.Tenants)
	r := Result{Config: c}
	for _, t := range tenants {
		r.Total += t.Resources
		r.Largest = max(r.Largest, t.Resources)
	}
	placed := Place(tenants, c.Groups)
	r.Before = loads(placed)
	r.Moves, r.Moved, r.Reached = Rebalance(placed, c.Within)
	r.After = loads(placed)
	if !r.Reached {
		hi := 0
		for g, l := range r.After {
			if l > r.After[hi] {
				hi = g
			}
		}
		r.Alone = len(placed[hi]) == 1
	}
	return r, nil
}

func (r Result) note() string {
	switch {
	case r.Reached:
		return ""
	case r.Alone:
		return " — not reached: the largest group is one tenant alone"
	}
	return " — not reached: no tenant of the largest group fits the gap"
}

// Range is the spread of a sweep's results over its seeds.
type Range struct {
	// MaxOverMean and MinOverMean are the placed groups' extremes over
	// the mean; Moves the moves Rebalance made; Alone the seeds where it
	// stopped at one tenant alone; Stuck those where it stopped otherwise.
	MaxOverMean, MinOverMean [2]float64
	Moves                    [2]int
	Alone, Stuck             int
}

// Sweep runs c with seeds 1 to seeds and returns the spread.
func Sweep(c Config, seeds int) (Range, error) {
	rg := Range{MaxOverMean: [2]float64{math.Inf(1), 0}, MinOverMean: [2]float64{math.Inf(1), 0}, Moves: [2]int{math.MaxInt, 0}}
	for seed := 1; seed <= seeds; seed++ {
		c.Seed = uint64(seed)
		r, err := Run(c)
		if err != nil {
			return Range{}, err
		}
		hi, lo := MaxOverMean(r.Before, r.Mean()), MinOverMean(r.Before, r.Mean())
		rg.MaxOverMean = [2]float64{min(rg.MaxOverMean[0], hi), max(rg.MaxOverMean[1], hi)}
		rg.MinOverMean = [2]float64{min(rg.MinOverMean[0], lo), max(rg.MinOverMean[1], lo)}
		rg.Moves = [2]int{min(rg.Moves[0], r.Moves), max(rg.Moves[1], r.Moves)}
		switch {
		case r.Alone:
			rg.Alone++
		case !r.Reached:
			rg.Stuck++
		}
	}
	return rg, nil
}

// String is the spread as docs/scaling.md shows it.
func (rg Range) String() string {
	return fmt.Sprintf("largest group %.2f–%.2f× the mean, smallest %.2f–%.2f×; %d–%d moves; goal not reached: %d (one tenant alone), %d (other)",
		rg.MaxOverMean[0], rg.MaxOverMean[1], rg.MinOverMean[0], rg.MinOverMean[1], rg.Moves[0], rg.Moves[1], rg.Alone, rg.Stuck)
}

// String is the result as docs/scaling.md shows it.
func (r Result) String() string {
	sorted := append([]int(nil), r.Before...)
	sort.Ints(sorted)
	return fmt.Sprintf("seed %d: %d tenants (%d resources, largest %d) on %d groups: mean %.0f per group; "+
		"placed: largest group %.2f× the mean, smallest %.2f×; %d moves (%d resources, %.1f%% of the total) bring the largest within %.0f%% (%.2f×)%s",
		r.Seed, r.Tenants, r.Total, r.Largest, r.Groups, r.Mean(),
		MaxOverMean(r.Before, r.Mean()), MinOverMean(r.Before, r.Mean()),
		r.Moves, r.Moved, 100*float64(r.Moved)/float64(r.Total), 100*r.Within, MaxOverMean(r.After, r.Mean()),
		r.note())
}
