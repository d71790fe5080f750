package pool

import (
	"fmt"
	"strconv"
	"time"
)

// lookupLease returns the live lease id, checking the token; an expired lease
// is expired on the spot and reported as not found. The caller holds the
// write lock.
func (p *Pool) lookupLease(id, token uint64, now int64) (leaseRec, error) {
	l, ok := p.leases.get(id)
	switch {
	case !ok:
		return leaseRec{}, fmt.Errorf("%w: lease %d", ErrNotFound, id)
	case l.expires <= now:
		p.expireLease(id, l, now)
		return leaseRec{}, fmt.Errorf("%w: lease %d expired", ErrNotFound, id)
	case l.token != token:
		return leaseRec{}, fmt.Errorf("%w: lease %d", ErrStaleToken, id)
	}
	return l, nil
}

// Renew extends lease id to ttl from now. Errors: ErrInvalidArgument for a
// TTL out of range, ErrNotFound for an unknown or expired lease,
// ErrStaleToken when token is not the lease's.
func (p *Pool) Renew(id, token uint64, ttl time.Duration) (Lease, error) {
	if err := validTTL(ttl); err != nil {
		return Lease{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return Lease{}, err
	}
	now := p.clock.Now().UnixNano()
	l, err := p.lookupLease(id, token, now)
	if err != nil {
		return Lease{}, err
	}
	if expires := now + int64(ttl); expires != l.expires {
		l.expires = expires
		p.leases.put(id, l)
		p.expiries.push(l.expires, id)
		p.compactExpiries()
	}
	return Lease{ID: id, Resource: p.res[l.res].id, Context: l.context, Token: l.token, ExpiresAt: time.Unix(0, l.expires)}, nil
}

// Release ends lease id. A non-zero outcome is also recorded for the lease's
// resource and context, as Report would; created reports whether that
// created the cell. Errors as for Renew, plus ErrInvalidArgument for an
// unknown outcome and ErrOverBudget when the outcome would create a cell
// the Gate refuses (the lease is then not released).
func (p *Pool) Release(id, token uint64, outcome Outcome) (created bool, err error) {
	return p.ReleaseTimed(id, token, outcome, 0)
}

// releaseLocked is ReleaseTimed once the outcome and latency are checked,
// under the write lock of an open pool. It also returns the released
// resource's slot.
func (p *Pool) releaseLocked(id, token uint64, outcome Outcome, latency time.Duration, now int64) (res int32, created bool, err error) {
	l, err := p.lookupLease(id, token, now)
	if err != nil {
		return -1, false, err
	}
	if outcome != 0 {
		// An outcome that creates the cell is charged first; if the budget
		// says no, the whole release is refused (the lease stays).
		if p.gate != nil && !p.hasCell(l.res, l.context) {
			if err := p.reserve(0, 1); err != nil {
				return -1, false, err
			}
		}
		ctx := p.contextID(l.context)
		created = p.record(l.res, ctx, outcome, now)
		p.recordLatency(l.res, ctx, latency, now)
		p.releasedBound(l, outcome)
	}
	p.endLease(id, l)
	return l.res, created, nil
}

// Next asks ReleaseNext for the next lease: AcquireExcluding's arguments,
// and whether to keep the released resource among the candidates after a
// failure.
type Next struct {
	Context string
	TTL     time.Duration
	Labels  map[string]string
	// Exclude names resources not to lease (AcquireExcluding).
	Exclude []string
	// KeepFailed keeps the released resource among the candidates after a
	// Failure or Blocked outcome; by default it is excluded, unless it is
	// the only resource that can serve now.
	KeepFailed bool
	// Affinity binds the next lease to a key (AcquireAffine).
	Affinity Affinity
}

// ReleaseNext releases lease id as Release does and, under the same lock,
// leases the next resource for next as AcquireExcluding does: one call per
// use. After a Failure or Blocked outcome the released resource is excluded
// from the next lease too (unless next.KeepFailed), so that a backend moves
// on from the resource that just failed; when it is the only one that can
// serve now, it is leased again.
//
// next is checked before anything changes: a bad field fails the call with
// ErrInvalidArgument and nothing is released. Once the release has
// succeeded it stands whatever becomes of the next lease: nextErr is then
// Acquire's error for it (an *ExhaustedError when nothing is free), and err
// is nil. When err is set (Release's errors), nothing was done.
func (p *Pool) ReleaseNext(id, token uint64, outcome Outcome, next Next) (created bool, l Lease, nextErr, err error) {
	return p.ReleaseNextTimed(id, token, outcome, 0, next)
}

// ReleaseNextTimed is ReleaseNext with the latency of the released lease's
// use, recorded with its outcome as ReleaseTimed records it.
func (p *Pool) ReleaseNextTimed(id, token uint64, outcome Outcome, latency time.Duration, next Next) (created bool, l Lease, nextErr, err error) {
	if err := checkOutcome(outcome, true); err != nil {
		return false, Lease{}, nil, err
	}
	if err := checkLatency(latency, outcome); err != nil {
		return false, Lease{}, nil, err
	}
	if err := validID("next.context", next.Context); err != nil {
		return false, Lease{}, nil, err
	}
	if err := validTTL(next.TTL); err != nil {
		return false, Lease{}, nil, err
	}
	if len(next.Labels) > 0 {
		if err := validLabels("next.labels", next.Labels); err != nil {
			return false, Lease{}, nil, err
		}
	}
	if err := validExclude("next.exclude", next.Exclude); err != nil {
		return false, Lease{}, nil, err
	}
	if err := next.Affinity.check("next.affinity"); err != nil {
		return false, Lease{}, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return false, Lease{}, nil, err
	}
	now := p.clock.Now().UnixNano()
	res, created, err := p.releaseLocked(id, token, outcome, latency, now)
	if err != nil {
		return false, Lease{}, nil, err
	}
	failed := int32(-1) // the released resource, if its outcome excludes it
	if (outcome == Failure || outcome == Blocked) && !next.KeepFailed {
		failed = res
	}
	l, nextErr = p.acquireBound(next.Context, next.TTL, next.Labels, next.Exclude, failed, next.Affinity, now)
	return created, l, nextErr, nil
}

// endLease removes a lease and frees its capacity; the probe that is out,
// ended without an outcome, goes back to waiting for the next probe. A probe
// lease of an earlier round (its outcome quarantined the cell or resource
// again, and a new probe may be out) changes nothing.
func (p *Pool) endLease(id uint64, l leaseRec) {
	p.leases.del(id)
	r := &p.res[l.res]
	if !r.live || r.gen != l.gen {
		return
	}
	r.active--
	p.updateAvail(l.res)
	switch l.probe {
	case probeWhole:
		if r.q.state == qProbing && r.q.until == l.probeOf {
			r.q.state = qProbation
			p.probeRes = append(p.probeRes, l.res)
		}
	case probeCell:
		ctx, ok := p.findContext(l.context)
		if !ok {
			return
		}
		if slot := p.findCell(l.res, ctx); slot >= 0 {
			if c := p.cellAt(slot); c.q.state == qProbing && c.q.until == l.probeOf {
				c.q.state = qProbation
				p.ctxs[ctx].probes = append(p.ctxs[ctx].probes, l.res)
			}
		}
	}
}

func (p *Pool) expireLease(id uint64, l leaseRec, now int64) {
	p.endLease(id, l)
	p.counters.Expired++
	p.emit(Event{
		Kind: EventLeaseExpired, Resource: p.res[l.res].id, Context: l.context,
		At: time.Unix(0, now), Detail: "lease " + strconv.FormatUint(id, 10),
	})
}

// Tick expires every lease past its expiry, ends every cooldown that is
// over and retires every resource past its MaxAge, emitting their events. Acquire does some of this work as it goes;
// call Tick periodically (every second, say) so that expiry events are
// timely in an idle pool.
func (p *Pool) Tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.processDue(p.clock.Now().UnixNano(), -1)
}

// processDue expires leases, ends cooldowns and retires resources by age
// due by now, at most budget of each (all when budget < 0).
func (p *Pool) processDue(now int64, budget int) {
	for n := 0; p.expiries.due(now) && n != budget; n++ {
		at, id := p.expiries.pop()
		if l, ok := p.leases.get(id); ok && l.expires == at {
			p.expireLease(id, l, now)
		}
	}
	for n := 0; p.cooldowns.due(now) && n != budget; n++ {
		p.endCooldown(p.cooldowns.pop())
	}
	for n := 0; p.ageouts.due(now) && n != budget; n++ {
		at, e := p.ageouts.pop()
		p.endAge(at, e, now)
	}
	p.expireBindings(now, budget)
}
