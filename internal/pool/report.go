package pool

import (
	"fmt"
	"time"
)

// Report is one observed outcome of using a resource for a context. LeaseID
// and Token are optional, but go together: when set they must name a live
// lease of this resource and context.
type Report struct {
	Resource string
	Context  string
	Outcome  Outcome
	LeaseID  uint64
	Token    uint64
	// Latency is how long the use took, 0 if not measured (ReleaseTimed).
	Latency time.Duration
}

// Report records an outcome. It creates the cell for the resource and
// context if there is none (the only call besides Register that creates
// state). It may quarantine the resource for the context or as a whole, or
// recover a probed one.
//
// Errors: ErrInvalidArgument for a bad id, context or outcome, a lease id
// without a token or a token without a lease id, or a lease of another
// resource or context; ErrNotFound for an unknown resource or lease;
// ErrStaleToken for a token that is not the lease's; ErrOverBudget when the
// cell it would create is refused by the Gate. created reports whether the
// call created the cell. Report does not allocate when the cell exists and
// nothing changes state.
func (p *Pool) Report(rep Report) (created bool, err error) {
	if err := rep.check(); err != nil {
		return false, err
	}
	// At 100,000 resources the index entry, the lease, the resource and the
	// cell are each a cache miss. Start the first two loads together before
	// taking the lock, and start the cell's as soon as the index names the
	// resource, so that it overlaps the resource's. A lease's hint names the
	// resource sooner, before the lock, so that all four loads overlap.
	tag := p.ids.tag(rep.Resource)
	p.ids.prefetch(tag)
	hinted := int32(-1)
	if rep.LeaseID != 0 {
		p.leases.prefetch(rep.LeaseID)
		if hinted = p.hints.slot(rep.LeaseID & p.mask()); hinted >= 0 {
			p.prefetchResource(hinted)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return false, err
	}
	now := p.clock.Now().UnixNano()
	ctx, known := p.findContext(rep.Context)
	warm := func(slot int32) {
		if known && ctx < p.stride && int(slot) < len(p.res) {
			prefetchCell(&p.dense[p.denseSlot(slot, ctx)])
		}
	}
	if hinted >= 0 {
		warm(hinted)
	}
	idx := p.ids.find(rep.Resource, tag, p.res, func(slot int32) {
		if slot != hinted {
			warm(slot)
		}
	})
	if idx < 0 {
		return false, fmt.Errorf("%w: resource %q", ErrNotFound, rep.Resource)
	}
	var leased leaseRec
	if rep.LeaseID != 0 {
		l, err := p.lookupLease(rep.LeaseID, rep.Token, now)
		if err != nil {
			return false, err
		}
		if err := rep.subjectOf(l, idx); err != nil {
			return false, err
		}
		leased = l
	}
	if p.gate != nil && (!known || p.findCell(idx, ctx) < 0) {
		if err := p.reserve(0, 1); err != nil { // the report creates the cell
			return false, err
		}
	}
	if !known {
		ctx = p.contextID(rep.Context)
	}
	created = p.record(idx, ctx, rep.Outcome, now)
	p.recordLatency(idx, ctx, rep.Latency, now)
	// A report that names its lease tells the lease's affinity key how the
	// resource did, as the lease's release would: after a FAILURE or
	// BLOCKED the key is re-bound at its next acquire.
	p.releasedBound(leased, rep.Outcome)
	return created, nil
}

// subjectOf returns an ErrInvalidArgument unless the lease l, which rep
// names, is of rep's resource (at slot idx) and context.
func (rep Report) subjectOf(l leaseRec, idx int32) error {
	if l.res != idx || l.context != rep.Context {
		return fmt.Errorf("%w: lease %d is for another resource or context", ErrInvalidArgument, rep.LeaseID)
	}
	return nil
}

// check returns the ErrInvalidArgument that Pool.Report would return for
// rep's id, context, outcome or lease fields, or nil; it reads no pool, so
// Report runs it before the lock.
func (rep Report) check() error {
	if err := validID("resource_id", rep.Resource); err != nil {
		return err
	}
	if err := validID("context", rep.Context); err != nil {
		return err
	}
	if (rep.LeaseID == 0) != (rep.Token == 0) {
		return fmt.Errorf("%w: lease_id and fencing_token go together: give both or neither", ErrInvalidArgument)
	}
	if err := checkOutcome(rep.Outcome, false); err != nil {
		return err
	}
	return checkLatency(rep.Latency, rep.Outcome)
}

// record applies one outcome for the interned context ctx and reports
// whether it created the cell; the caller holds the write lock and has
// validated everything.
func (p *Pool) record(idx, ctx int32, o Outcome, now int64) (created bool) {
	context := p.ctxs[ctx].name
	r := &p.res[idx]
	slot := p.findCell(idx, ctx)
	if slot < 0 {
		a, b := prior(r.agg, now, p.hl, p.cfg.PriorWeight)
		slot = p.newCell(idx, ctx, cell{c: counts{a: a, b: b, upd: now}})
		created = true
	}
	c := p.cellAt(slot)
	success := o == Success
	c.c.add(now, p.hl, success)
	r.agg.add(now, p.hl, success)
	c.recent.add(success)
	r.recent.add(success)
	p.counters.Reports++
	p.counters.Outcomes[o]++
	if success {
		c.consecFail, r.consecFail = 0, 0
	} else {
		c.consecFail++
		r.consecFail++
	}

	switch c.q.state {
	case qProbation, qProbing:
		if success {
			c.q.state = qNone
			p.ctxs[ctx].nquar--
			if c.q.level > 0 {
				c.q.level--
			}
			// The history that got it quarantined stays, decayed (this
			// success is in it already): one lucky probe does not make a
			// resource that failed most of its calls look new, and a relapse
			// is quarantined again at its next failure, not after
			// FailuresToQuarantine more.
			p.counters.Recovered++
			p.emit(Event{Kind: EventRecovered, Resource: r.id, Context: context, At: time.Unix(0, now)})
		} else {
			p.quarantineCell(c, idx, ctx, now, "probe failed")
		}
	case qNone:
		a, b := c.c.at(now, p.hl)
		switch {
		case o == Blocked:
			p.quarantineCell(c, idx, ctx, now, "blocked")
		case int(c.consecFail) >= p.cfg.FailuresToQuarantine:
			p.quarantineCell(c, idx, ctx, now, "consecutive failures")
		case p.cfg.QuarantineBelow > 0 && a+b >= p.cfg.QuarantineMinEvidence && mean(a, b) < p.cfg.QuarantineBelow:
			p.quarantineCell(c, idx, ctx, now, "low success rate")
		}
	}

	switch r.q.state {
	case qProbation, qProbing:
		if success {
			r.q.state = qNone
			p.nblocked--
			if r.q.level > 0 {
				r.q.level--
			}
			p.updateAvail(idx) // its aggregate history stays, as a cell's does
			p.counters.Recovered++
			p.emit(Event{Kind: EventRecovered, Resource: r.id, At: time.Unix(0, now)})
		} else {
			p.quarantineWhole(idx, now, "probe failed")
		}
	case qNone:
		if int(r.consecFail) >= p.cfg.FailuresToQuarantineWhole {
			p.quarantineWhole(idx, now, "consecutive failures across contexts")
		}
	}

	p.markCell(slot)
	p.markResource(idx)
	p.updateLeader(ctx, idx, c)
	return created
}

// cooldown returns the next quarantine length for level, with jitter. It
// is at least 1ns, so that every cooldown of a cell or resource ends later
// than the one before (leaseRec.probeOf relies on that), and at most twice
// CooldownMax, which Validate bounds so that nothing overflows.
func (p *Pool) cooldown(level uint8) time.Duration {
	d := p.cfg.CooldownBase
	for i := uint8(0); i < level && d < p.cfg.CooldownMax; i++ {
		d = min(2*d, p.cfg.CooldownMax) // CooldownMax <= maxCooldown: no overflow
	}
	if j := p.cfg.CooldownJitter; j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*p.rng.Float64()-1)))
	}
	return max(d, 1)
}

func (p *Pool) quarantineCell(c *cell, idx, ctx int32, now int64, why string) {
	if c.q.state == qNone {
		p.ctxs[ctx].nquar++
	}
	d := p.cooldown(c.q.level)
	c.q = quarantine{state: qBlocked, until: now + int64(d), level: min(c.q.level+1, 30)}
	p.cooldowns.push(c.q.until, cooldown{res: idx, ctx: ctx, gen: p.res[idx].gen})
	p.counters.Quarantined++
	p.emit(Event{
		Kind: EventBlocked, Resource: p.res[idx].id, Context: p.ctxs[ctx].name, At: time.Unix(0, now),
		Detail: fmt.Sprintf("%s; cooldown %v", why, d.Round(time.Millisecond)),
	})
	p.capContext(ctx, now)
}

func (p *Pool) quarantineWhole(idx int32, now int64, why string) {
	r := &p.res[idx]
	d := p.cooldown(r.q.level)
	p.blockWhole(idx, quarantine{state: qBlocked, until: now + int64(d), level: min(r.q.level+1, 30)})
	p.emit(Event{
		Kind: EventBlocked, Resource: r.id, At: time.Unix(0, now),
		Detail: fmt.Sprintf("%s; cooldown %v", why, d.Round(time.Millisecond)),
	})
	p.capWhole(now)
}

// blockWhole puts resource idx in the whole quarantine q (qBlocked), out of
// the set Acquire draws from, with its cooldown scheduled.
func (p *Pool) blockWhole(idx int32, q quarantine) {
	r := &p.res[idx]
	if r.q.state == qNone {
		p.nblocked++
	}
	r.q = q
	r.consecFail = 0
	p.life[idx].imposed = false
	p.updateAvail(idx)
	p.cooldowns.push(r.q.until, cooldown{res: idx, ctx: -1, gen: r.gen})
	p.counters.Quarantined++
}

// endCooldown moves a quarantine whose cooldown ended at until to
// probation, unless the entry is stale.
func (p *Pool) endCooldown(until int64, e cooldown) {
	r := &p.res[e.res]
	if !r.live || r.gen != e.gen {
		return
	}
	if e.ctx < 0 {
		if r.q.state == qBlocked && r.q.until == until {
			r.q.state = qProbation
			if p.life[e.res].imposed {
				p.life[e.res].imposed = false
				p.markResource(e.res) // its state no longer says imposed
			}
			p.probeRes = append(p.probeRes, e.res)
		}
		return
	}
	if slot := p.findCell(e.res, e.ctx); slot >= 0 && p.cellAt(slot).q.state == qBlocked && p.cellAt(slot).q.until == until {
		p.cellAt(slot).q.state = qProbation
		p.ctxs[e.ctx].probes = append(p.ctxs[e.ctx].probes, e.res)
	}
}

// updateLeader keeps the context's leader board: up to maxLeaders resources
// with the best score (leaderScore) seen at their last report, sorted best
// first. A quarantined cell leaves it. c.lead says whether the cell's
// resource is on the board, so that the common report, on a resource that
// is not and does not join, reads no more than the board's last entry.
func (p *Pool) updateLeader(ctx, idx int32, c *cell) {
	cs := p.ctxs[ctx]
	if c.lead {
		for i := 0; i < cs.nlead; i++ {
			if cs.leaders[i].res == idx {
				copy(cs.leaders[i:cs.nlead], cs.leaders[i+1:cs.nlead])
				cs.nlead--
				break
			}
		}
		c.lead = false
	}
	if c.q.state != qNone {
		return
	}
	score := p.leaderScore(c, ctx)
	if cs.nlead == maxLeaders {
		if score <= cs.leaders[maxLeaders-1].score {
			return
		}
		cs.nlead--
		if slot := p.findCell(cs.leaders[maxLeaders-1].res, ctx); slot >= 0 {
			p.cellAt(slot).lead = false
		}
	}
	i := cs.nlead
	for i > 0 && cs.leaders[i-1].score < score {
		cs.leaders[i] = cs.leaders[i-1]
		i--
	}
	cs.leaders[i] = leader{res: idx, score: score}
	cs.nlead++
	c.lead = true
}
