package pool

import (
	"fmt"
	"time"
)

// Objective is what Acquire maximises: a tenant's choice (Config.Objective,
// Policy.Objective).
type Objective string

// Objectives. The empty Objective means ObjectiveSuccess.
const (
	// ObjectiveSuccess leases the resource most likely to succeed: the best
	// draw from each candidate's success posterior.
	ObjectiveSuccess Objective = "success"
	// ObjectiveSuccessPerTime leases the resource expected to bring the
	// most successes per unit of time: the draw from each candidate's
	// success posterior divided by its expected latency (the decayed mean
	// of the latencies outcomes carried for the resource and context, or
	// the context's mean where the cell has none).
	ObjectiveSuccessPerTime Objective = "success_per_time"
)

// MaxLatency is the longest latency an outcome may carry.
const MaxLatency = 24 * time.Hour

// checkObjective returns an ErrInvalidArgument unless o is an objective.
func checkObjective(o Objective) error {
	switch o {
	case "", ObjectiveSuccess, ObjectiveSuccessPerTime:
		return nil
	}
	return fmt.Errorf("%w: objective %q is not %q or %q", ErrInvalidArgument, o, ObjectiveSuccess, ObjectiveSuccessPerTime)
}

// checkLatency returns an ErrInvalidArgument unless d is a latency an
// outcome o may carry: 0 (not measured), or up to MaxLatency with an
// outcome.
func checkLatency(d time.Duration, o Outcome) error {
	switch {
	case d < 0 || d > MaxLatency:
		return fmt.Errorf("%w: latency %v is outside [0, %v]", ErrInvalidArgument, d, MaxLatency)
	case d > 0 && o == 0:
		return fmt.Errorf("%w: a latency needs an outcome: it is recorded with it", ErrInvalidArgument)
	}
	return nil
}

// latency is a decayed mean of observed latencies, in seconds: each
// observation weighs 1 when made and decays with the pool's half-life, as
// the success counts do. w == 0 means none was observed. Fixed size, so
// that recording one does not allocate.
type latency struct {
	mean, w float32
	upd     int64 // unix nanoseconds of the last observation
}

// add decays l to now and folds in one observation of sec seconds.
func (l *latency) add(now, hl int64, sec float64) {
	w := float64(l.w)*decayFactor(now-l.upd, hl) + 1
	l.mean += float32((sec - float64(l.mean)) / w)
	l.w = float32(w)
	if now > l.upd {
		l.upd = now
	}
}

// known reports whether l holds an observation.
func (l latency) known() bool { return l.w > 0 }

// recordLatency folds a latency into the cell in slot and its context's
// mean; the caller holds the write lock and has just recorded the outcome
// it came with (record). Under ObjectiveSuccessPerTime the cell's place on
// the leader board follows its new latency.
func (p *Pool) recordLatency(idx, ctx int32, d time.Duration, now int64) {
	if d <= 0 {
		return
	}
	slot := p.findCell(idx, ctx)
	if slot < 0 {
		return
	}
	c := p.cellAt(slot)
	sec := d.Seconds()
	c.lat.add(now, p.hl, sec)
	p.ctxs[ctx].lat.add(now, p.hl, sec)
	if p.perTime {
		p.updateLeader(ctx, idx, c)
	}
}

// expectedLatency is the latency, in seconds, that ObjectiveSuccessPerTime
// divides a candidate's draw by: its cell's mean, or the context's where
// the cell (nil: none) has none (so that a resource not yet timed is neither favoured
// nor shunned), or 1 when the context has none either (every candidate
// alike: the draws rank as under ObjectiveSuccess).
func (p *Pool) expectedLatency(c *cell, ctx int32) float64 {
	if c != nil {
		if l := c.lat; l.known() && l.mean > 0 {
			return float64(l.mean)
		}
	}
	if ctx >= 0 {
		if l := p.ctxs[ctx].lat; l.known() && l.mean > 0 {
			return float64(l.mean)
		}
	}
	return 1
}

// leaderScore is what the leader board ranks a cell by: its posterior mean
// as of its last report, divided by its expected latency under
// ObjectiveSuccessPerTime.
func (p *Pool) leaderScore(c *cell, ctx int32) float64 {
	m := mean(c.c.a, c.c.b)
	if p.perTime {
		m /= p.expectedLatency(c, ctx)
	}
	return m
}

// rescoreLeaders ranks every leader board again after the objective
// changed: O(contexts × 32), under the write lock.
func (p *Pool) rescoreLeaders() {
	for ci, cs := range p.ctxs {
		for i := 0; i < cs.nlead; i++ {
			if slot := p.findCell(cs.leaders[i].res, int32(ci)); slot >= 0 {
				cs.leaders[i].score = p.leaderScore(p.cellAt(slot), int32(ci))
			}
		}
		b := cs.leaders[:cs.nlead]
		for i := 1; i < len(b); i++ { // insertion sort, best first
			for j := i; j > 0 && b[j-1].score < b[j].score; j-- {
				b[j-1], b[j] = b[j], b[j-1]
			}
		}
	}
}

// ReleaseTimed is Release with the latency of the lease's use: how long
// the job took, 0 if not measured. A latency needs an outcome and is
// recorded with it; it steers Acquire under ObjectiveSuccessPerTime.
// Errors as for Release, plus ErrInvalidArgument for a latency outside
// [0, MaxLatency] or one without an outcome.
func (p *Pool) ReleaseTimed(id, token uint64, outcome Outcome, latency time.Duration) (created bool, err error) {
	if err := checkOutcome(outcome, true); err != nil {
		return false, err
	}
	if err := checkLatency(latency, outcome); err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return false, err
	}
	_, created, err = p.releaseLocked(id, token, outcome, latency, p.clock.Now().UnixNano())
	return created, err
}
