package pool

import (
	"fmt"
	"time"
)

// Quarantine control: the share cap (Config.MaxQuarantinedShare) and the
// quarantines an operator imposes or lifts (Quarantine, Lift).

// quarantineAllowed returns how many resources may be quarantined at once,
// as a whole or for one context: MaxQuarantinedShare of the pool, rounded
// down, and at least one, so that a pool of one or two resources still
// quarantines a bad one. -1 means no cap.
func (p *Pool) quarantineAllowed() int {
	if p.cfg.MaxQuarantinedShare >= 1 {
		return -1
	}
	return max(1, int(p.cfg.MaxQuarantinedShare*float64(p.nresource)))
}

// capContext holds context ctx's quarantined cells to the cap: when there
// are more, the least bad of them (the best posterior mean) leaves
// quarantine. The scan is over the pool's resources, and runs only when a
// quarantine starts beyond the cap.
func (p *Pool) capContext(ctx int32, now int64) {
	cs := p.ctxs[ctx]
	allowed := p.quarantineAllowed()
	if allowed < 0 || cs.nquar <= allowed {
		return
	}
	best, bestSlot, bestMean := int32(-1), int32(-1), -1.0
	for i := range p.res {
		if !p.res[i].live {
			continue
		}
		slot := p.findCell(int32(i), ctx)
		if slot < 0 {
			continue
		}
		c := p.cellAt(slot)
		if c.q.state == qNone {
			continue
		}
		if m := mean(c.c.at(now, p.hl)); m > bestMean {
			best, bestSlot, bestMean = int32(i), slot, m
		}
	}
	if best < 0 {
		return
	}
	quarantined := cs.nquar
	p.liftCell(best, ctx, bestSlot, false)
	p.counters.Capped++
	p.emit(Event{Kind: EventCapped, Resource: p.res[best].id, Context: cs.name, At: time.Unix(0, now),
		Detail: fmt.Sprintf("%d of %d resources quarantined for the context, above max_quarantined_share %v: the least bad (success rate %.3f) is served again",
			quarantined, p.nresource, p.cfg.MaxQuarantinedShare, bestMean)})
}

// capWhole holds the resources quarantined as a whole to the cap, as
// capContext does for a context's cells, by their aggregate; imposed
// quarantines are left alone.
func (p *Pool) capWhole(now int64) {
	allowed := p.quarantineAllowed()
	if allowed < 0 || p.nblocked <= allowed {
		return
	}
	best, bestMean := int32(-1), -1.0
	for i := range p.res {
		r := &p.res[i]
		if !r.live || r.q.state == qNone || p.life[i].imposed {
			continue
		}
		if m := mean(r.agg.at(now, p.hl)); m > bestMean {
			best, bestMean = int32(i), m
		}
	}
	if best < 0 {
		return
	}
	quarantined := p.nblocked
	p.liftWhole(best)
	p.counters.Capped++
	p.emit(Event{Kind: EventCapped, Resource: p.res[best].id, At: time.Unix(0, now),
		Detail: fmt.Sprintf("%d of %d resources quarantined as a whole, above max_quarantined_share %v: the least bad (success rate %.3f) is served again",
			quarantined, p.nresource, p.cfg.MaxQuarantinedShare, bestMean)})
}

// liftCell ends the quarantine of resource idx's cell in slot for ctx. Its
// cooldown level and history stay; fresh also forgets its consecutive
// failures, so that the thresholds count anew (a lift), where otherwise
// its next failure quarantines it again (the cap).
func (p *Pool) liftCell(idx, ctx, slot int32, fresh bool) {
	c := p.cellAt(slot)
	c.q.state = qNone
	if fresh {
		c.consecFail = 0
	}
	p.ctxs[ctx].nquar--
	p.updateLeader(ctx, idx, c)
	p.markCell(slot)
}

// liftWhole ends resource idx's whole quarantine; its cooldown level and
// history stay.
func (p *Pool) liftWhole(idx int32) {
	r := &p.res[idx]
	r.q.state = qNone
	p.life[idx].imposed = false
	p.nblocked--
	p.updateAvail(idx)
	p.markResource(idx)
}

// Quarantine quarantines resource id as a whole for d (at least MinTTL,
// at most the pool's CooldownMax), whatever its statistics: an operator's
// decision. Like any quarantine it ends in a probe when d is over; until
// then MaxQuarantinedShare does not end it. A quarantine running already
// is replaced. why goes into the EventBlocked. It returns the resource's
// state after the change.
//
// Errors: ErrInvalidArgument for a bad id or d, ErrNotFound for an
// unknown resource.
func (p *Pool) Quarantine(id string, d time.Duration, why string) (ResourceInfo, error) {
	if err := validID("resource_id", id); err != nil {
		return ResourceInfo{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return ResourceInfo{}, err
	}
	if d < MinTTL || d > p.cfg.CooldownMax {
		return ResourceInfo{}, fmt.Errorf("%w: quarantine of %v is outside [%v, %v] (the pool's cooldown_max)", ErrInvalidArgument, d, MinTTL, p.cfg.CooldownMax)
	}
	idx, ok := p.lookup(id)
	if !ok {
		return ResourceInfo{}, fmt.Errorf("%w: resource %q", ErrNotFound, id)
	}
	now := p.clock.Now().UnixNano()
	r := &p.res[idx]
	p.blockWhole(idx, quarantine{state: qBlocked, until: now + int64(d), level: r.q.level})
	p.life[idx].imposed = true
	p.markResource(idx)
	p.emit(Event{Kind: EventBlocked, Resource: id, At: time.Unix(0, now), Detail: fmt.Sprintf("imposed: %s; cooldown %v", why, d)})
	return p.infoLocked(idx, now), nil
}

// Lift ends every quarantine of resource id, as a whole and for each
// context, whatever its statistics: an operator's decision. Its history and
// cooldown levels stay, its consecutive failures are forgotten, and it is
// served again at once; a later quarantine follows the usual rules. It
// emits an EventRecovered for each quarantine it ends, with why, and
// returns the resource's state after the change. Lifting a resource that
// is not quarantined changes nothing. A retired resource stays retired.
//
// Errors: ErrInvalidArgument for a bad id, ErrNotFound for an unknown
// resource.
func (p *Pool) Lift(id, why string) (ResourceInfo, error) {
	if err := validID("resource_id", id); err != nil {
		return ResourceInfo{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return ResourceInfo{}, err
	}
	idx, ok := p.lookup(id)
	if !ok {
		return ResourceInfo{}, fmt.Errorf("%w: resource %q", ErrNotFound, id)
	}
	now := p.clock.Now().UnixNano()
	at := time.Unix(0, now)
	for ctx := range int32(len(p.ctxs)) {
		slot := p.findCell(idx, ctx)
		if slot < 0 || p.cellAt(slot).q.state == qNone {
			continue
		}
		p.liftCell(idx, ctx, slot, true)
		p.counters.Recovered++
		p.emit(Event{Kind: EventRecovered, Resource: id, Context: p.ctxs[ctx].name, At: at, Detail: "lifted: " + why})
	}
	if r := &p.res[idx]; r.q.state != qNone {
		r.consecFail = 0
		p.liftWhole(idx)
		p.counters.Recovered++
		p.emit(Event{Kind: EventRecovered, Resource: id, At: at, Detail: "lifted: " + why})
	}
	return p.infoLocked(idx, now), nil
}
