package pool

import (
	"fmt"
	"time"
)

// MaxExclude bounds the resources one acquire may exclude.
const MaxExclude = 32

// WhyAllExcluded: every resource that could serve now is one the call
// excluded.
const WhyAllExcluded = "all_excluded"

// avoidSet is the resources the acquire under way must not lease, as slots:
// a fixed array, so that an acquire that excludes allocates nothing. It is
// set and cleared under the write lock, around one acquire.
type avoidSet struct {
	idx [MaxExclude + 1]int32 // + the released resource of a ReleaseNext
	n   int
}

// has reports whether slot idx is excluded.
func (a *avoidSet) has(idx int32) bool {
	for i := 0; i < a.n; i++ {
		if a.idx[i] == idx {
			return true
		}
	}
	return false
}

// add excludes slot idx.
func (a *avoidSet) add(idx int32) {
	if a.n < len(a.idx) && !a.has(idx) {
		a.idx[a.n] = idx
		a.n++
	}
}

// validExclude checks an exclude list: at most MaxExclude ids, each a valid
// resource id.
func validExclude(field string, ids []string) error {
	if len(ids) > MaxExclude {
		return fmt.Errorf("%w: %s names %d resources; at most %d", ErrInvalidArgument, field, len(ids), MaxExclude)
	}
	for i, id := range ids {
		if validID(field, id) != nil { // named only when bad: no allocation on the way
			return validID(fmt.Sprintf("%s[%d]", field, i), id)
		}
	}
	return nil
}

// AcquireExcluding is Acquire, except that the resources named in exclude
// (at most MaxExclude; ids the pool does not hold are ignored) are not
// leased: a backend that just saw one fail asks for another. When every
// resource that could serve now is excluded, the error is an
// *ExhaustedError with Why WhyAllExcluded. It allocates no more than
// Acquire.
func (p *Pool) AcquireExcluding(context string, ttl time.Duration, selector map[string]string, exclude []string) (Lease, error) {
	if len(exclude) == 0 {
		return p.Acquire(context, ttl, selector)
	}
	if err := validExclude("exclude", exclude); err != nil {
		return Lease{}, err
	}
	if err := validAcquire(context, ttl, selector); err != nil {
		return Lease{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.closedErr(); err != nil {
		return Lease{}, err
	}
	return p.acquireAvoiding(context, ttl, selector, exclude, -1, p.clock.Now().UnixNano())
}

// acquireAvoiding is acquireLocked with the resources of exclude, and slot
// also (-1: none), excluded. An acquire that only the exclusion of slot
// left without a lease leases again with slot allowed: slot is the resource
// just released after a failure, excluded by default, and the only one that
// can serve is better than none.
func (p *Pool) acquireAvoiding(context string, ttl time.Duration, selector map[string]string, exclude []string, slot int32, now int64) (Lease, error) {
	p.avoid.n = 0
	for _, id := range exclude {
		if idx, ok := p.lookup(id); ok {
			p.avoid.add(idx)
		}
	}
	explicit := p.avoid.n
	if slot >= 0 {
		p.avoid.add(slot)
	}
	defer func() { p.avoid.n = 0 }()
	if p.avoid.n == 0 {
		return p.acquireLocked(context, ttl, selector, now)
	}
	l, err := p.acquireLocked(context, ttl, selector, now)
	if err == nil || !p.couldServeExcluded(context, selector) {
		return l, err
	}
	if p.avoid.n > explicit { // the released resource was excluded by default
		p.avoid.n = explicit
		p.counters.Exhausted-- // counted once, by the acquire that answers
		if l, err = p.acquireLocked(context, ttl, selector, now); err == nil || !p.couldServeExcluded(context, selector) {
			return l, err
		}
	}
	return Lease{}, &ExhaustedError{Why: WhyAllExcluded,
		msg: fmt.Sprintf("every resource that could serve context %q now is one the call excluded (%d excluded)", context, p.avoid.n)}
}

// couldServeExcluded reports whether an excluded resource could take the
// lease now: live, with free capacity, not quarantined for the context and
// carrying the selector's labels.
func (p *Pool) couldServeExcluded(context string, selector map[string]string) bool {
	ctx, known := p.findContext(context)
	if !known {
		ctx = -1
	}
	for i := 0; i < p.avoid.n; i++ {
		idx := p.avoid.idx[i]
		r := &p.res[idx]
		if r.live && !r.retired && r.active < r.capacity && r.q.state == qNone && !p.blockedFor(idx, ctx) &&
			(len(selector) == 0 || matches(r.labels, selector)) {
			return true
		}
	}
	return false
}
