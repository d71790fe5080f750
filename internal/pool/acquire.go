package pool

import (
	"fmt"
	"math"
	"time"
	"unsafe"
)

// dueBudget bounds the expired leases and ended cooldowns that one Acquire
// processes, so that a burst of expiries cannot make one call slow; Tick
// processes the rest.
const dueBudget = 64

// maxRounds bounds how many rounds of random candidates Acquire draws when
// none of the earlier candidates could take a lease.
const maxRounds = 4

// Acquire leases, for the context, the resource most likely to succeed now
// (under ObjectiveSuccessPerTime: expected to bring the most successes per
// unit of time) among those with free capacity that are not quarantined and carry every
// label of selector (nil selects all).
//
// A resource whose quarantine cooldown has ended is handed out first, as a
// single probe lease. Otherwise Acquire draws a success probability from the
// posterior of each candidate (the context's leader board plus a few
// resources with free capacity drawn at random) and leases the best draw; a
// resource with no statistics for the context is scored from its aggregate
// over all contexts, without storing anything for the context.
//
// Errors: ErrInvalidArgument for an empty or oversize context, a TTL outside
// [MinTTL, MaxTTL] or a bad selector; ErrExhausted when no candidate can
// take a lease, the pool's lease limit (SetMaxLeases) is reached, or the
// epoch's 2^40 fencing tokens are used up (until SetEpoch): an
// *ExhaustedError that says which, and when a resource frees up if known. Acquire
// does not allocate on success, apart from the events of leases it expires
// on the way.
func (p *Pool) Acquire(context string, ttl time.Duration, selector map[string]string) (Lease, error) {
	if err := validAcquire(context, ttl, selector); err != nil {
		return Lease{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return Lease{}, err
	}
	return p.acquireLocked(context, ttl, selector, p.clock.Now().UnixNano())
}

// validAcquire checks Acquire's arguments.
func validAcquire(context string, ttl time.Duration, selector map[string]string) error {
	if err := validID("context", context); err != nil {
		return err
	}
	if err := validTTL(ttl); err != nil {
		return err
	}
	if len(selector) > 0 {
		return validLabels("labels", selector)
	}
	return nil
}

// acquireLocked is Acquire once its input is checked, under the write lock
// of an open pool.
func (p *Pool) acquireLocked(context string, ttl time.Duration, selector map[string]string, now int64) (Lease, error) {
	p.processDue(now, dueBudget)

	if p.counter >= p.mask() || p.leaseSeq >= p.mask() {
		// Another token would carry into the epoch's bits, and tokens
		// would no longer grow. A new epoch (SetEpoch, on the next restart
		// or leader change) starts the counters again.
		p.counters.Exhausted++
		return Lease{}, &ExhaustedError{Why: WhyTokensUsedUp, msg: fmt.Sprintf("the fencing tokens of epoch %d are used up; a new epoch (restart or leader change) is needed", p.epoch)}
	}
	l, err := p.acquire(context, ttl, selector, now)
	if err != nil && (p.expiries.due(now) || p.cooldowns.due(now) || p.ageouts.due(now)) {
		// Expired leases and ended cooldowns beyond this call's budget may
		// free what it needs: finish them before answering that nothing is
		// free. Each heap entry is popped once, so this work is amortized
		// over the pushes that made it.
		p.processDue(now, -1)
		l, err = p.acquire(context, ttl, selector, now)
	}
	if err != nil {
		p.counters.Exhausted++
	}
	return l, err
}

// acquire is Acquire once its input is checked and due work is done, under
// the write lock; its only error is an *ExhaustedError.
func (p *Pool) acquire(context string, ttl time.Duration, selector map[string]string, now int64) (Lease, error) {
	if p.maxLeases > 0 && p.leases.len() >= p.maxLeases {
		return Lease{}, &ExhaustedError{Why: WhyLeaseLimit, msg: fmt.Sprintf("the tenant's limit of %d outstanding leases is reached", p.maxLeases)}
	}
	ctx, known := p.findContext(context)
	if known {
		// Leases keep the pool's copy of a known context's name, not the
		// caller's: comparing it later reads a hot string, and a lease does
		// not keep the request's string alive.
		context = p.ctxs[ctx].name
	} else {
		ctx = -1
	}
	if l, ok := p.acquireProbe(ctx, context, ttl, selector, now); ok {
		return l, nil
	}
	s := picker{best: -1, bestScore: -1}
	if ctx >= 0 {
		cs := p.ctxs[ctx]
		// The board is sorted best first; score the best Leaders that can
		// take a lease now, so that busy leaders do not crowd out the next
		// best ones.
		var b batch
		for i := 0; i < cs.nlead && b.n < p.cfg.Leaders; i++ {
			if r := &p.res[cs.leaders[i].res]; r.availPos >= 0 {
				b.add(cs.leaders[i].res)
			}
		}
		p.score(&s, &b, ctx, now, selector)
	}
	if len(selector) > 0 {
		p.considerSelected(&s, ctx, now, selector)
	} else {
		res := &p.explore
		if ctx >= 0 {
			res = &p.ctxs[ctx].explore
		}
		p.considerExplore(&s, res, ctx, now)
		if s.best < 0 {
			p.considerRandom(&s, ctx, now)
		}
	}
	if s.best < 0 {
		return Lease{}, p.shortage(context, ctx, selector, now)
	}
	return p.grant(s.best, context, ttl, probeNone, 0, now), nil
}

// picker keeps the best Thompson draw seen so far (scaled by the
// candidate's rate under ObjectiveSuccessPerTime).
type picker struct {
	best      int32
	bestScore float64
}

// maxBatch bounds the candidates scored together: Config.Leaders and
// Config.Candidates are at most maxLeaders.
const maxBatch = maxLeaders

// batch is a set of candidate resources scored together.
type batch struct {
	idx [maxBatch]int32
	n   int
}

func (b *batch) add(idx int32) {
	b.idx[b.n] = idx
	b.n++
}

// score draws from each candidate's posterior and keeps the best draw. It
// works in passes (resources, then cells, then sampling) so that the cache
// misses of different candidates overlap instead of queueing one behind the
// other: at 100,000 resources those misses are most of Acquire's cost.
func (p *Pool) score(s *picker, b *batch, ctx int32, now int64, selector map[string]string) {
	var slot [maxBatch]int32
	var ok [maxBatch]bool
	for i := 0; i < b.n; i++ {
		r := &p.res[b.idx[i]]
		ok[i] = r.availPos >= 0 // live, not full, not quarantined as a whole
		slot[i] = -1
		if ok[i] && ctx >= 0 {
			slot[i] = p.findCell(b.idx[i], ctx)
		}
	}
	if len(selector) > 0 {
		for i := 0; i < b.n; i++ {
			ok[i] = ok[i] && matches(p.res[b.idx[i]].labels, selector)
		}
	}
	if p.avoid.n > 0 {
		for i := 0; i < b.n; i++ {
			ok[i] = ok[i] && !p.avoid.has(b.idx[i])
		}
	}
	var alpha, beta [maxBatch]float64
	var rate [maxBatch]float64 // under ObjectiveSuccessPerTime: 1 / expected latency
	for i := 0; i < b.n; i++ {
		if !ok[i] {
			continue
		}
		var c *cell
		if slot[i] >= 0 {
			c = p.cellAt(slot[i])
			ok[i] = c.q.state == qNone
			alpha[i], beta[i] = c.c.at(now, p.hl)
		} else {
			alpha[i], beta[i] = prior(p.res[b.idx[i]].agg, now, p.hl, p.cfg.PriorWeight)
		}
		if p.perTime {
			rate[i] = 1 / p.expectedLatency(c, ctx)
		}
	}
	// Draw first from the candidate with the best mean, then only from
	// candidates whose posterior could still beat the best draw: skipping
	// the draw of a candidate whose mean plus three standard deviations is
	// below it saves most of the sampling work. Such a candidate would have
	// won with probability under 0.14% when both its counts exceed 12 (its
	// draw is then normal), and under 1.9% otherwise: the most skewed
	// posteriors, Beta(1, n) as n grows, have a tail beyond 3 sd that tends
	// to e⁻⁴ ≈ 1.83%. Under ObjectiveSuccessPerTime every draw, mean and
	// bound is scaled by the candidate's rate (1 / expected latency) before
	// it is compared, which leaves the argument unchanged.
	var ub [maxBatch]float64
	first, bestMean := -1, -1.0
	for i := 0; i < b.n; i++ {
		if !ok[i] {
			continue
		}
		a, bb := 1+alpha[i], 1+beta[i]
		n := a + bb
		m := a / n
		ub[i] = m + 3*math.Sqrt(a*bb/(n*n*(n+1)))
		if p.perTime {
			m, ub[i] = m*rate[i], ub[i]*rate[i]
		}
		if m > bestMean {
			first, bestMean = i, m
		}
	}
	if first < 0 {
		return
	}
	for k := -1; k < b.n; k++ {
		i := k
		if k < 0 {
			i = first
		} else if k == first || !ok[k] || ub[k] <= s.bestScore {
			continue
		}
		x := sampleBeta(p.rng, 1+alpha[i], 1+beta[i])
		if p.perTime {
			x *= rate[i]
		}
		if x > s.bestScore {
			s.best, s.bestScore = b.idx[i], x
		}
	}
}

// considerExplore tops up and rotates the reservoir, then scores it.
func (p *Pool) considerExplore(s *picker, res *reservoir, ctx int32, now int64) {
	n := len(p.avail)
	if n == 0 {
		return
	}
	k := p.cfg.Candidates
	for res.n < k {
		res.idx[res.n] = p.nextCandidate(res, n)
		res.n++
	}
	if p.rng.Uint32()%4 == 0 {
		res.rot = (res.rot + 1) % k
		res.idx[res.rot] = p.nextCandidate(res, n)
	}
	var b batch
	for i := 0; i < k; i++ {
		b.add(res.idx[i])
	}
	p.score(s, &b, ctx, now, nil)
	// Replace the winner (it is about to be leased) and whatever could not
	// take a lease, so the reservoir keeps offering live candidates.
	for i := 0; i < k; i++ {
		if r := &p.res[res.idx[i]]; res.idx[i] == s.best || !r.live || r.availPos < 0 {
			res.idx[i] = p.nextCandidate(res, n)
		}
	}
	p.warmCandidates(res, ctx, n)
}

// nextCandidate returns a replacement for a reservoir: a warm one that can
// still take a lease, or else a fresh uniform draw from the available set
// (every warm one was such a draw).
func (p *Pool) nextCandidate(res *reservoir, n int) int32 {
	for res.nwarm > 0 {
		res.nwarm--
		if c := res.warm[res.nwarm]; p.res[c].availPos >= 0 {
			return c
		}
	}
	return p.avail[p.rng.IntN(n)]
}

// warmCandidates moves a reservoir's replacements one stage on: drawn ones
// become warm, and fresh draws take their place, with their resource's hot
// fields and their dense cell for ctx prefetched: the first resourceHot
// bytes lie on one cache line or straddle two, so both ends are prefetched.
// A sparse cell can only be found once the draw is warm, through the sparse
// index. Nothing waits for memory here.
//
// Reservoir entries always index p.res: it only shrinks in reset, which
// empties every reservoir.
func (p *Pool) warmCandidates(res *reservoir, ctx int32, n int) {
	for res.ndrawn > 0 && res.nwarm < warmAhead {
		res.ndrawn--
		c := res.drawn[res.ndrawn]
		if ctx >= maxDense && p.res[c].live {
			if slot := p.findCell(c, ctx); slot >= 0 {
				prefetchCell(p.cellAt(slot))
			}
		}
		res.warm[res.nwarm] = c
		res.nwarm++
	}
	for res.ndrawn < warmAhead {
		c := p.avail[p.rng.IntN(n)]
		r := unsafe.Pointer(&p.res[c])
		prefetch(r)
		prefetch(unsafe.Add(r, resourceHot-1))
		if ctx >= 0 && ctx < p.stride {
			prefetchCell(&p.dense[p.denseSlot(c, ctx)])
		}
		res.drawn[res.ndrawn] = c
		res.ndrawn++
	}
}

// considerRandom draws candidates from the resources with free capacity. A
// small set is scanned whole.
func (p *Pool) considerRandom(s *picker, ctx int32, now int64) {
	n := len(p.avail)
	k := p.cfg.Candidates
	if n <= k*maxRounds {
		for i := 0; i < n; i += maxBatch {
			var b batch
			for j := i; j < n && j < i+maxBatch; j++ {
				b.add(p.avail[j])
			}
			p.score(s, &b, ctx, now, nil)
		}
		return
	}
	for round := 0; round < maxRounds && (round == 0 || s.best < 0); round++ {
		var b batch
		for i := 0; i < k; i++ {
			b.add(p.avail[p.rng.IntN(n)])
		}
		p.score(s, &b, ctx, now, nil)
	}
}

// considerSelected draws candidates from the shortest label posting list of
// the selector; a short list is scanned whole.
func (p *Pool) considerSelected(s *picker, ctx int32, now int64, selector map[string]string) {
	var list []int32
	first := true
	for k, v := range selector {
		l := p.labelIdx[k][v]
		if len(l) == 0 {
			return
		}
		if first || len(l) < len(list) {
			list, first = l, false
		}
	}
	k := p.cfg.Candidates
	if len(list) <= k*maxRounds*2 {
		for i := 0; i < len(list); i += maxBatch {
			var b batch
			for j := i; j < len(list) && j < i+maxBatch; j++ {
				b.add(list[j])
			}
			p.score(s, &b, ctx, now, selector)
		}
		return
	}
	for round := 0; round < maxRounds*2 && (round == 0 || s.best < 0); round++ {
		var b batch
		for i := 0; i < k; i++ {
			b.add(list[p.rng.IntN(len(list))])
		}
		p.score(s, &b, ctx, now, selector)
	}
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// acquireProbe hands out a probe lease to a resource whose cooldown ended,
// for this context or as a whole, if one is waiting and fits.
func (p *Pool) acquireProbe(ctx int32, context string, ttl time.Duration, selector map[string]string, now int64) (Lease, bool) {
	if ctx >= 0 {
		cs := p.ctxs[ctx]
		var pick int32 = -1
		var of int64
		cs.probes = p.scanProbes(cs.probes, func(idx int32) probeState {
			r := &p.res[idx]
			slot := p.findCell(idx, ctx)
			switch {
			case !r.live || r.retired || slot < 0 || p.cellAt(slot).q.state != qProbation:
				return probeStale
			case r.active >= r.capacity || r.q.state != qNone || !matches(r.labels, selector) || p.avoid.has(idx):
				return probeWait
			}
			p.cellAt(slot).q.state = qProbing
			pick, of = idx, p.cellAt(slot).q.until
			return probeTaken
		})
		if pick >= 0 {
			p.counters.Probes++
			return p.grant(pick, context, ttl, probeCell, of, now), true
		}
	}
	var pick int32 = -1
	var of int64
	p.probeRes = p.scanProbes(p.probeRes, func(idx int32) probeState {
		r := &p.res[idx]
		switch {
		case !r.live || r.retired || r.q.state != qProbation:
			return probeStale
		case r.active >= r.capacity || !matches(r.labels, selector) || p.blockedFor(idx, ctx) || p.avoid.has(idx):
			return probeWait
		}
		r.q.state = qProbing
		pick, of = idx, r.q.until
		return probeTaken
	})
	if pick >= 0 {
		p.counters.Probes++
		return p.grant(pick, context, ttl, probeWhole, of, now), true
	}
	return Lease{}, false
}

// blockedFor reports whether the resource is quarantined for context ctx
// (-1: a context without cells) with its cell's cooldown running or its
// cell's own probe out. A cell on probation is not: the whole resource's
// probe may serve as its probe too, as its outcome is recorded for both.
func (p *Pool) blockedFor(idx, ctx int32) bool {
	if ctx < 0 {
		return false
	}
	slot := p.findCell(idx, ctx)
	if slot < 0 {
		return false
	}
	st := p.cellAt(slot).q.state
	return st == qBlocked || st == qProbing
}

type probeState uint8

const (
	probeWait  probeState = iota // keep: it cannot be leased right now
	probeStale                   // drop: no longer waiting for a probe
	probeTaken                   // drop: leased as the probe
)

// maxProbeScan bounds the probe-queue entries one Acquire looks at.
const maxProbeScan = 8

// scanProbes looks at up to maxProbeScan entries of a probe queue in order,
// dropping stale ones and stopping at the first one check takes; entries
// that must wait stay, in order, so that one resource that cannot be leased
// now never holds up the probes queued behind it.
func (p *Pool) scanProbes(q []int32, check func(int32) probeState) []int32 {
	keep := 0
	i := 0
	for ; i < len(q) && i < maxProbeScan; i++ {
		switch check(q[i]) {
		case probeWait:
			q[keep] = q[i]
			keep++
		case probeTaken:
			i++
			return append(q[:keep], q[i:]...)
		}
	}
	return append(q[:keep], q[i:]...)
}

// grant records a lease on resource idx, a probe of the cooldown that
// ended at probeOf unless probe is probeNone; the caller holds the write
// lock.
func (p *Pool) grant(idx int32, context string, ttl time.Duration, probe uint8, probeOf int64, now int64) Lease {
	r := &p.res[idx]
	r.active++
	p.updateAvail(idx)
	p.counter++
	p.leaseSeq++
	token := p.withEpoch(p.counter)
	id := p.withEpoch(p.leaseSeq)
	expires := now + int64(ttl)
	p.leases.put(id, leaseRec{res: idx, gen: r.gen, context: context, probe: probe, probeOf: probeOf, token: token, expires: expires})
	p.hints.put(p.leaseSeq, idx, p.leases.len())
	// The next lease's id is known: start loading its table entry now, so
	// that the next grant does not wait for it.
	p.leases.prefetch(p.withEpoch(p.leaseSeq + 1))
	p.expiries.push(expires, id)
	p.compactExpiries()
	p.counters.Acquired++
	p.countUse(idx, now)
	return Lease{ID: id, Resource: r.id, Context: context, Token: token, ExpiresAt: time.Unix(0, expires)}
}
