package pool

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// RecentWindow is how many of a resource's or cell's latest outcomes its
// recent counts cover (ContextStats.RecentSuccesses): as many as one 64-bit
// word holds beside the bit that marks how many it holds.
const RecentWindow = 63

// recent holds the latest outcomes, up to RecentWindow, one bit each
// (1 for a success), the newest in bit 0; the highest set bit marks how
// many there are, and the zero value holds none. It is the plain record
// beside the decayed counts: no prior, no decay, no allocation.
type recent uint64

// add records one outcome, forgetting the oldest beyond RecentWindow.
func (w *recent) add(success bool) {
	v := uint64(*w)
	if v == 0 {
		v = 1
	}
	v <<= 1
	if success {
		v |= 1
	}
	if *w>>63 != 0 { // full: the marker shifted out; put it back over the oldest
		v |= 1 << 63
	}
	*w = recent(v)
}

// counts returns the successes and failures held.
func (w recent) counts() (successes, failures int) {
	if w == 0 {
		return 0, 0
	}
	n := bits.Len64(uint64(w)) - 1
	s := bits.OnesCount64(uint64(w)) - 1
	return s, n - s
}

// counts are discounted Beta-Bernoulli pseudo-counts: a successes and b
// failures as of upd (unix nanoseconds). The uniform Beta(1, 1) base is not
// stored; it is added when the posterior is read.
type counts struct {
	a, b float64
	upd  int64
}

// decayFactor is the weight left after dt nanoseconds with half-life hl.
func decayFactor(dt, hl int64) float64 {
	if dt <= 0 || hl <= 0 {
		return 1
	}
	return exp2neg(-float64(dt) / float64(hl))
}

// exp2neg is 2^x for x <= 0 to a relative error below 2e-7 (exact at
// whole numbers), several times cheaper than math.Exp2: Acquire decays every
// candidate's counts, so this is on its hot path. It splits x into the
// nearest whole power of two, applied to the exponent bits, and a fraction
// in [-0.5, 0.5], approximated by its Taylor polynomial.
func exp2neg(x float64) float64 {
	if x < -1000 {
		return 0
	}
	// i = floor(x + 0.5): truncation rounds a negative y up, so step down
	// when it did (cheaper than math.Floor, which is not inlined).
	y := x + 0.5
	i := float64(int64(y))
	if i > y {
		i--
	}
	f := x - i
	const (
		c1 = 0.6931471805599453   // ln 2
		c2 = 0.2402265069591007   // ln²2 / 2!
		c3 = 0.05550410866482158  // ln³2 / 3!
		c4 = 0.009618129107628477 // ...
		c5 = 0.0013333558146428443
		c6 = 0.00015403530393381606
	)
	p := 1 + f*(c1+f*(c2+f*(c3+f*(c4+f*(c5+f*c6)))))
	return math.Float64frombits(math.Float64bits(p) + uint64(int64(i))<<52)
}

// at returns the counts decayed to now, without changing c.
func (c counts) at(now, hl int64) (a, b float64) {
	f := decayFactor(now-c.upd, hl)
	return c.a * f, c.b * f
}

// add decays c to now and adds one observation.
func (c *counts) add(now, hl int64, success bool) {
	c.a, c.b = c.at(now, hl)
	if now > c.upd {
		c.upd = now
	}
	if success {
		c.a++
	} else {
		c.b++
	}
}

// mean is the posterior mean of Beta(1+a, 1+b).
func mean(a, b float64) float64 { return (1 + a) / (2 + a + b) }

// prior returns the pseudo-counts a new cell inherits from its resource's
// aggregate: the aggregate's posterior mean, carrying at most weight
// observations.
func prior(agg counts, now, hl int64, weight float64) (a, b float64) {
	aa, ab := agg.at(now, hl)
	w := math.Min(aa+ab, weight)
	m := mean(aa, ab)
	return w * m, w * (1 - m)
}

// sampleBeta draws from Beta(alpha, beta) for alpha, beta >= 1. Above a few
// dozen pseudo-observations the normal approximation is indistinguishable
// for ranking and costs a tenth of two gamma draws.
func sampleBeta(r *rand.Rand, alpha, beta float64) float64 {
	if alpha > 12 && beta > 12 {
		n := alpha + beta
		m := alpha / n
		sd := math.Sqrt(alpha * beta / (n * n * (n + 1)))
		x := m + sd*r.NormFloat64()
		return math.Min(math.Max(x, 0), 1)
	}
	x := sampleGamma(r, alpha)
	y := sampleGamma(r, beta)
	return x / (x + y)
}

// sampleGamma draws from Gamma(k, 1) for k >= 1 (Marsaglia and Tsang, 2000).
func sampleGamma(r *rand.Rand, k float64) float64 {
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
		x2 := x * x
		if u < 1-0.0331*x2*x2 {
			return d * v
		}
		if math.Log(u) < 0.5*x2+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
