package pool

import (
	"fmt"
	"time"
)

// Retirement. A resource that has been leased MaxUses times, or that was
// registered MaxAge ago (its own limits, or else the pool's), is retired:
// it is never leased again (a lease already out runs its course, and its
// outcomes are still recorded), it stays in GetResource and List with
// State StateRetired and the reason, and an EventRetired says why. A
// retired resource leaves only by Deregister; registering its id again
// while it is held changes nothing. Uses count leases granted, probes
// included; age runs on the pool's clock from Register (a restored
// resource keeps its registration time and uses).

// Resource states, as ResourceInfo.State says them.
const (
	StateActive  = "active"
	StateRetired = "retired"
)

// Pool.ageouts holds retirements by age: the key is the moment the
// resource reaches its MaxAge. An entry whose resource is gone or retired,
// or whose moment is no longer the resource's (SetPolicy changed the
// pool's MaxAge), is skipped.
type ageout struct {
	res int32
	gen uint32
}

// usesLimit returns the uses that retire resource idx, 0 for none.
func (p *Pool) usesLimit(idx int32) uint32 {
	if p.res[idx].ownUses {
		return p.life[idx].maxUses
	}
	return uint32(p.cfg.MaxUses)
}

// ageLimit returns the age in nanoseconds that retires resource idx, 0 for
// none.
func (p *Pool) ageLimit(idx int32) int64 {
	if a := p.life[idx].maxAge; a > 0 {
		return a
	}
	return int64(p.cfg.MaxAge)
}

// scheduleAgeout queues resource idx's retirement by age, if it has a
// limit.
func (p *Pool) scheduleAgeout(idx int32) {
	if a := p.ageLimit(idx); a > 0 && !p.res[idx].retired {
		p.ageouts.push(p.life[idx].born+a, ageout{res: idx, gen: p.res[idx].gen})
	}
}

// endAge retires the resource of a due ageout entry, unless it is stale.
func (p *Pool) endAge(at int64, e ageout, now int64) {
	r := &p.res[e.res]
	if !r.live || r.gen != e.gen || r.retired {
		return
	}
	if a := p.ageLimit(e.res); a > 0 && p.life[e.res].born+a == at {
		p.retire(e.res, fmt.Sprintf("max_age %v reached", time.Duration(a)), now)
	}
}

// countUse counts a lease granted on resource idx and retires it when that
// use was its last.
func (p *Pool) countUse(idx int32, now int64) {
	r := &p.res[idx]
	if r.uses < MaxMaxUses {
		r.uses++
		p.markResource(idx) // uses are durable, as the count that retires it
	}
	if lim := p.usesLimit(idx); lim > 0 && r.uses >= lim {
		p.retire(idx, fmt.Sprintf("max_uses %d reached", lim), now)
	}
}

// retire retires resource idx for why; the caller holds the write lock.
func (p *Pool) retire(idx int32, why string, now int64) {
	r := &p.res[idx]
	if r.retired {
		return
	}
	r.retired = true
	p.retiredWhy[idx] = why
	p.updateAvail(idx)
	p.markResource(idx)
	p.counters.Retired++
	p.emit(Event{Kind: EventRetired, Resource: r.id, At: time.Unix(0, now), Detail: why})
}

// applyLifetimes retires what the pool's limits, just changed by
// SetPolicy, retire now, and queues the new age limits; the caller holds
// the write lock.
func (p *Pool) applyLifetimes(now int64) {
	for i := range p.res {
		idx := int32(i)
		r := &p.res[idx]
		if !r.live || r.retired {
			continue
		}
		if lim := p.usesLimit(idx); lim > 0 && r.uses >= lim {
			p.retire(idx, fmt.Sprintf("max_uses %d reached", lim), now)
			continue
		}
		if p.life[idx].maxAge == 0 && p.cfg.MaxAge > 0 {
			if p.life[idx].born+int64(p.cfg.MaxAge) <= now {
				p.retire(idx, fmt.Sprintf("max_age %v reached", p.cfg.MaxAge), now)
			} else {
				p.scheduleAgeout(idx)
			}
		}
	}
}
