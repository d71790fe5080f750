package pool

import (
	"fmt"
	"slices"
	"time"
)

// Why Acquire found no resource, as ExhaustedError.Why says it.
const (
	// WhyNoneRegistered: the pool has no resources.
	WhyNoneRegistered = "none_registered"
	// WhyNoneMatch: no resource carries every label of the selector.
	WhyNoneMatch = "none_match"
	// WhyAllLeased: every resource that could serve is at its capacity.
	WhyAllLeased = "all_leased"
	// WhyAllQuarantined: every resource that could serve is quarantined
	// for the context (or as a whole).
	WhyAllQuarantined = "all_quarantined"
	// WhyLeasedOrQuarantined: every resource that could serve is either at
	// its capacity or quarantined, some of each.
	WhyLeasedOrQuarantined = "all_leased_or_quarantined"
	// WhyAllRetired: every resource that could serve is retired
	// (Config.MaxUses, Config.MaxAge).
	WhyAllRetired = "all_retired"
	// WhyLeaseLimit: the tenant's limit on outstanding leases is reached.
	WhyLeaseLimit = "lease_limit"
	// WhyTokensUsedUp: the epoch's fencing tokens are used up.
	WhyTokensUsedUp = "tokens_used_up"
)

// ExhaustedError is Acquire's ErrExhausted with why nothing could be
// leased and, when known, when a resource is expected to free up.
type ExhaustedError struct {
	// Why is one of the Why constants.
	Why string
	// FreesAt, when not zero, is the earliest moment a resource that could
	// serve the request frees up by itself: the end of a quarantine cooldown
	// or the expiry of a lease (a release may free one earlier).
	FreesAt time.Time
	msg     string
}

func (e *ExhaustedError) Error() string { return ErrExhausted.Error() + ": " + e.msg }

// Unwrap returns ErrExhausted.
func (e *ExhaustedError) Unwrap() error { return ErrExhausted }

// maxShortageScan bounds the resources (and leases) that shortage looks
// at, so that explaining a refusal never holds the lock for long; beyond
// it the answer is from the resources seen, without FreesAt.
const maxShortageScan = 1 << 14

// shortage explains why acquire found nothing for context (ctx its id, or
// -1) and selector. The caller holds the write lock.
func (p *Pool) shortage(context string, ctx int32, selector map[string]string, now int64) *ExhaustedError {
	if p.nresource == 0 {
		return &ExhaustedError{Why: WhyNoneRegistered, msg: "the pool has no resources; register some first"}
	}
	var matched, leased, quarantined, retired int
	var coolEnd int64 // earliest end of a running cooldown among matches
	complete := true
	for i := range p.res {
		if matched+retired >= maxShortageScan {
			complete = false
			break
		}
		r := &p.res[i]
		if !r.live || (len(selector) > 0 && !matches(r.labels, selector)) {
			continue
		}
		if r.retired {
			retired++
			continue
		}
		matched++
		until, blocked := int64(0), false
		if r.q.state != qNone {
			blocked = true
			if r.q.state == qBlocked {
				until = r.q.until
			}
		} else if ctx >= 0 {
			if slot := p.findCell(int32(i), ctx); slot >= 0 {
				if q := p.cellAt(slot).q; q.state != qNone {
					blocked = true
					if q.state == qBlocked {
						until = q.until
					}
				}
			}
		}
		switch {
		case blocked:
			quarantined++
			if until > now && (coolEnd == 0 || until < coolEnd) {
				coolEnd = until
			}
		case r.active >= r.capacity:
			leased++
		}
	}
	e := &ExhaustedError{}
	switch {
	case matched == 0 && retired > 0:
		e.Why = WhyAllRetired
		e.msg = fmt.Sprintf("all %d resources that could serve context %q are retired (max_uses or max_age reached); register new ones", retired, context)
		return e
	case matched == 0:
		e.Why = WhyNoneMatch
		e.msg = fmt.Sprintf("no resource carries all the labels %s", labelList(selector))
		return e
	case leased == 0 && quarantined > 0:
		e.Why = WhyAllQuarantined
		e.msg = fmt.Sprintf("all %d resources that could serve context %q are quarantined", quarantined, context)
	case quarantined == 0:
		e.Why = WhyAllLeased
		e.msg = fmt.Sprintf("all %d resources that could serve context %q are leased to capacity", matched, context)
	default:
		e.Why = WhyLeasedOrQuarantined
		e.msg = fmt.Sprintf("of the resources that could serve context %q, %d are leased to capacity and %d quarantined", context, leased, quarantined)
	}
	if !complete {
		return e
	}
	frees := coolEnd
	if leased > 0 && p.leases.len() <= maxShortageScan {
		p.leases.each(func(_ uint64, l leaseRec) {
			r := &p.res[l.res]
			if l.expires <= now || !r.live || r.gen != l.gen || r.q.state != qNone || (frees != 0 && l.expires >= frees) ||
				(len(selector) > 0 && !matches(r.labels, selector)) || p.blockedFor(l.res, ctx) {
				return
			}
			frees = l.expires
		})
	}
	if frees > 0 {
		e.FreesAt = time.Unix(0, frees)
		e.msg += fmt.Sprintf("; one frees up by %s at the latest", e.FreesAt.UTC().Format(time.RFC3339))
	}
	return e
}

// labelList writes a selector for a message, in key order.
func labelList(selector map[string]string) string {
	keys := make([]string, 0, len(selector))
	for k := range selector {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := "{"
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q: %q", k, selector[k])
	}
	return s + "}"
}
