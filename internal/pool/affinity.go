package pool

import (
	"fmt"
	"strings"
	"time"
)

// Affinity bounds and default.
const (
	// DefaultAffinityTTL is how long a binding lasts after its last use
	// when the call does not say.
	DefaultAffinityTTL = 30 * time.Minute
	// MinAffinityTTL and MaxAffinityTTL bound Affinity.TTL.
	MinAffinityTTL = time.Second
	MaxAffinityTTL = 24 * time.Hour
	// BindingCells is what one binding costs in the tenant's cell budget
	// (Gate.Reserve(0, BindingCells)): a binding holds up to MaxIDLen
	// bytes of key and of context of its own, about twice what the
	// worst-case cell holds (TestMemoryOfATenantsShare: 125,000 such
	// bindings hold about 86 MiB, 125,000 such cells about 42 MiB).
	BindingCells = 2
	// bindingSaveSlack: a use that extends a binding's expiry marks the
	// binding changed (for the next checkpoint) only once the expiry has
	// moved more than a quarter of its TTL beyond the one last saved, so
	// that a busy key is not written again every flush. A restored binding
	// may end that much early.
	bindingSaveSlack = 4
)

// Affinity pins the work of one key to one resource: AcquireAffine leases
// the resource the key is bound to while that resource is healthy for the
// context and has free capacity, and binds the key to another one
// otherwise.
type Affinity struct {
	// Key names the work (a session, an account): 1 to MaxIDLen bytes of
	// UTF-8 without NUL. Empty means no affinity.
	Key string
	// TTL is how long the binding lasts after its last use, in
	// [MinAffinityTTL, MaxAffinityTTL]; 0 means DefaultAffinityTTL. A use
	// extends the binding to now + TTL if that is later; it never shortens
	// it.
	TTL time.Duration
}

// check validates the affinity of a call (field names the request field).
func (a Affinity) check(field string) error {
	if a.Key == "" {
		if a.TTL != 0 {
			return fmt.Errorf("%w: %s_ttl without %s", ErrInvalidArgument, field, field)
		}
		return nil
	}
	if pr := idProblem(a.Key); pr != "" {
		return fmt.Errorf("%w: %s key %s", ErrInvalidArgument, field, pr)
	}
	if a.TTL != 0 && (a.TTL < MinAffinityTTL || a.TTL > MaxAffinityTTL) {
		return fmt.Errorf("%w: %s_ttl %v is outside [%v, %v]", ErrInvalidArgument, field, a.TTL, MinAffinityTTL, MaxAffinityTTL)
	}
	return nil
}

// bindKey names a binding: the context and the caller's key.
type bindKey struct{ context, key string }

// binding binds a key to a resource slot (of generation gen).
type binding struct {
	k       bindKey
	res     int32
	gen     uint32 // the resource slot's generation when bound
	bgen    uint32 // bumped when the binding slot is reused
	live    bool
	dirty   bool  // listed in bindings.dirty (see Pool.markResource)
	failed  bool  // the last release of a lease under the key reported FAILURE or BLOCKED
	expires int64 // unix ns
	ttl     int64 // ns
	saved   int64 // the expiry last handed to a checkpoint
}

// bindRef names a binding slot in the expiry heap and in a lease.
type bindRef struct {
	slot int32
	bgen uint32
}

// bindings is a pool's affinity bindings: a map from key to slot, the
// slots, and a heap of expiries with one entry per binding (an entry whose
// binding was extended since is pushed again at the new expiry when it
// comes due; extensions never shorten, so an entry is never late).
type bindings struct {
	idx    map[bindKey]int32
	list   []binding
	free   []int32
	expiry minHeap[bindRef]
	// The change set since the last Snapshot or TakeChanges: slots made,
	// moved or extended, and keys dropped.
	dirty   []int32
	removed []bindKey
}

// mark adds a binding slot to the change set.
func (b *bindings) mark(slot int32) {
	if bb := &b.list[slot]; !bb.dirty {
		bb.dirty = true
		b.dirty = append(b.dirty, slot)
	}
}

func (b *bindings) reset() {
	*b = bindings{idx: map[bindKey]int32{}}
}

// AcquireAffine is AcquireExcluding with an affinity key: the lease goes to
// the resource the key is bound to (for this context) while that resource
// is live, not retired, not quarantined as a whole or for the context,
// carries the selector's labels, is not excluded and has free capacity, and
// the last release under the key did not report FAILURE or BLOCKED.
// Otherwise the lease is made as AcquireExcluding makes it (after a
// failure the bound resource is excluded unless it is the only one that
// can serve) and the key is bound to the resource leased: Lease.Rebound
// says it moved. A new key costs BindingCells of the Gate's cells; when
// the Gate refuses, the binding that expires soonest is evicted to make
// room, and if there is none the call fails with ErrOverBudget and leases
// nothing. With an empty key it is AcquireExcluding.
func (p *Pool) AcquireAffine(context string, ttl time.Duration, selector map[string]string, exclude []string, aff Affinity) (Lease, error) {
	if aff.Key == "" && aff.TTL == 0 {
		return p.AcquireExcluding(context, ttl, selector, exclude)
	}
	if err := aff.check("affinity"); err != nil {
		return Lease{}, err
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
	return p.acquireBound(context, ttl, selector, exclude, -1, aff, p.clock.Now().UnixNano())
}

// acquireBound is acquireAvoiding with the affinity aff (none when its key
// is empty); the caller holds the write lock of an open pool.
func (p *Pool) acquireBound(context string, ttl time.Duration, selector map[string]string, exclude []string, failed int32, aff Affinity, now int64) (Lease, error) {
	if aff.Key == "" {
		return p.acquireAvoiding(context, ttl, selector, exclude, failed, now)
	}
	p.processDue(now, dueBudget)
	bttl := int64(aff.TTL)
	if bttl == 0 {
		bttl = int64(DefaultAffinityTTL)
	}
	slot, ok := p.binds.idx[bindKey{context, aff.Key}]
	if ok && p.binds.list[slot].expires <= now {
		p.dropBinding(slot)
		ok = false
	}
	prev := int32(-1)
	if ok {
		b := &p.binds.list[slot]
		if b.res != failed && p.boundServes(b, context, selector, exclude, now) {
			l, err := p.acquireAt(b.res, context, ttl, now)
			if err != nil {
				return l, err
			}
			p.touchBinding(slot, bttl, now)
			p.tagLease(l.ID, slot)
			return l, nil
		}
		if r := &p.res[b.res]; r.live && r.gen == b.gen {
			prev = b.res
			if b.failed && failed < 0 {
				failed = b.res // excluded by default, as a release's next is after a failure
			}
		}
	} else {
		if err := p.reserveBinding(); err != nil {
			return Lease{}, err
		}
	}
	l, err := p.acquireAvoiding(context, ttl, selector, exclude, failed, now)
	if err != nil {
		if !ok && p.gate != nil {
			p.gate.Release(0, BindingCells)
		}
		return l, err
	}
	idx, _ := p.lookup(l.Resource)
	if !ok {
		slot = p.newBinding(bindKey{l.Context, strings.Clone(aff.Key)}, now)
	} else if idx != prev {
		l.Rebound = true
		p.counters.Rebound++
	}
	b := &p.binds.list[slot]
	b.res, b.gen, b.failed = idx, p.res[idx].gen, false
	p.binds.mark(slot)
	p.touchBinding(slot, bttl, now)
	p.tagLease(l.ID, slot)
	return l, nil
}

// boundServes reports whether the binding's resource can take the lease
// now: the same resource (not a reused slot), live, not retired, not
// quarantined as a whole or for the context (in any state), carrying the
// selector's labels, not excluded, with free capacity, and its last
// release under the key was not a failure.
func (p *Pool) boundServes(b *binding, context string, selector map[string]string, exclude []string, now int64) bool {
	r := &p.res[b.res]
	if b.failed || !r.live || r.gen != b.gen || r.retired || r.q.state != qNone || r.active >= r.capacity {
		return false
	}
	if len(selector) > 0 && !matches(r.labels, selector) {
		return false
	}
	for _, id := range exclude {
		if r.hasID(id) {
			return false
		}
	}
	if ctx, known := p.findContext(context); known {
		if slot := p.findCell(b.res, ctx); slot >= 0 && p.cellAt(slot).q.state != qNone {
			return false
		}
	}
	return true
}

// acquireAt leases resource idx, which boundServes approved (after the due
// work), within the pool-wide limits acquireLocked checks.
func (p *Pool) acquireAt(idx int32, context string, ttl time.Duration, now int64) (Lease, error) {
	if p.counter >= p.mask() || p.leaseSeq >= p.mask() {
		p.counters.Exhausted++
		return Lease{}, &ExhaustedError{Why: WhyTokensUsedUp, msg: fmt.Sprintf("the fencing tokens of epoch %d are used up; a new epoch (restart or leader change) is needed", p.epoch)}
	}
	if p.maxLeases > 0 && p.leases.len() >= p.maxLeases {
		p.counters.Exhausted++
		return Lease{}, &ExhaustedError{Why: WhyLeaseLimit, msg: fmt.Sprintf("the tenant's limit of %d outstanding leases is reached", p.maxLeases)}
	}
	if ctx, known := p.findContext(context); known {
		context = p.ctxs[ctx].name
	}
	return p.grant(idx, context, ttl, probeNone, 0, now), nil
}

// tagLease records in lease id the binding it was made under, so that its
// release's outcome reaches the binding.
func (p *Pool) tagLease(id uint64, slot int32) {
	if rec, ok := p.leases.get(id); ok {
		rec.bind = slot + 1
		p.leases.put(id, rec)
	}
}

// releasedBound marks the binding a released lease was made under failed
// or not, by the release's outcome (or a report's that names the lease);
// the zero leaseRec (no lease) and the zero outcome change nothing.
func (p *Pool) releasedBound(l leaseRec, outcome Outcome) {
	if l.bind == 0 || outcome == 0 {
		return
	}
	slot := l.bind - 1
	if int(slot) >= len(p.binds.list) {
		return
	}
	b := &p.binds.list[slot]
	if !b.live || b.res != l.res || b.gen != l.gen {
		return // rebound or dropped since
	}
	if f := outcome != Success; f != b.failed {
		b.failed = f
		p.binds.mark(slot)
	}
}

// reserveBinding charges the Gate for a new binding, evicting the binding
// that expires soonest while the Gate refuses and there is one to evict.
func (p *Pool) reserveBinding() error {
	if p.gate == nil {
		return nil
	}
	for {
		err := p.gate.Reserve(0, BindingCells)
		if err == nil {
			return nil
		}
		if !p.evictBinding() {
			return fmt.Errorf("%w: %w", ErrOverBudget, err)
		}
	}
}

// evictBinding drops the binding that expires soonest, or reports that
// there is none. Heap entries behind their binding's expiry are moved to it
// first (a bounded number; then the top one goes).
func (p *Pool) evictBinding() bool {
	for n := 0; len(p.binds.expiry) > 0; n++ {
		at, ref := p.binds.expiry[0].key, p.binds.expiry[0].val
		b := p.bindingAt(ref)
		if b == nil {
			p.binds.expiry.pop()
			continue
		}
		if b.expires != at && n < dueBudget {
			p.binds.expiry.pop()
			p.binds.expiry.push(b.expires, ref)
			continue
		}
		p.binds.expiry.pop()
		p.dropBinding(ref.slot)
		p.counters.BindingsEvicted++
		return true
	}
	return false
}

// bindingAt returns the live binding ref names, or nil.
func (p *Pool) bindingAt(ref bindRef) *binding {
	if int(ref.slot) >= len(p.binds.list) {
		return nil
	}
	b := &p.binds.list[ref.slot]
	if !b.live || b.bgen != ref.bgen {
		return nil
	}
	return b
}

// newBinding creates a binding for k, its cells already charged; the
// caller sets its resource and expiry.
func (p *Pool) newBinding(k bindKey, now int64) int32 {
	var slot int32
	if n := len(p.binds.free); n > 0 {
		slot = p.binds.free[n-1]
		p.binds.free = p.binds.free[:n-1]
	} else {
		p.binds.list = append(p.binds.list, binding{})
		slot = int32(len(p.binds.list) - 1)
	}
	b := &p.binds.list[slot]
	// dirty stays set while the slot is listed in the change set.
	*b = binding{k: k, bgen: b.bgen + 1, live: true, expires: now, dirty: b.dirty}
	p.binds.idx[k] = slot
	p.binds.expiry.push(now, bindRef{slot, b.bgen}) // moved to the real expiry when due
	p.binds.mark(slot)
	return slot
}

// touchBinding extends the binding to now + ttl unless it lasts longer
// already.
func (p *Pool) touchBinding(slot int32, ttl, now int64) {
	b := &p.binds.list[slot]
	if exp := now + ttl; exp > b.expires {
		b.expires, b.ttl = exp, ttl
		if exp-b.saved > ttl/bindingSaveSlack {
			p.binds.mark(slot)
		}
	}
}

// dropBinding forgets a binding and gives its cells back.
func (p *Pool) dropBinding(slot int32) {
	b := &p.binds.list[slot]
	delete(p.binds.idx, b.k)
	p.binds.removed = append(p.binds.removed, b.k)
	*b = binding{bgen: b.bgen, dirty: b.dirty}
	p.binds.free = append(p.binds.free, slot)
	if p.gate != nil {
		p.gate.Release(0, BindingCells)
	}
}

// expireBindings drops bindings past their expiry, at most budget of them
// (all when budget < 0).
func (p *Pool) expireBindings(now int64, budget int) {
	for n := 0; p.binds.expiry.due(now) && n != budget; n++ {
		at, ref := p.binds.expiry.pop()
		b := p.bindingAt(ref)
		switch {
		case b == nil:
		case b.expires > at:
			p.binds.expiry.push(b.expires, ref)
		default:
			p.dropBinding(ref.slot)
			p.counters.BindingsExpired++
		}
	}
}

// Bindings returns how many affinity bindings the pool holds.
func (p *Pool) Bindings() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.binds.idx)
}

// Binding returns the resource the key is bound to for the context and
// when the binding expires, or ok false if there is none (or it expired).
func (p *Pool) Binding(context, key string) (resource string, expires time.Time, ok bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	slot, found := p.binds.idx[bindKey{context, key}]
	if !found {
		return "", time.Time{}, false
	}
	b := &p.binds.list[slot]
	r := &p.res[b.res]
	if b.expires <= p.clock.Now().UnixNano() || !r.live || r.gen != b.gen {
		return "", time.Time{}, false
	}
	return r.id, time.Unix(0, b.expires), true
}

// BindingState is an affinity binding in a Snapshot.
type BindingState struct {
	Context, Key, Resource string
	ExpiresAt              time.Time
	// Failed: the last release under the key reported FAILURE or BLOCKED,
	// so the next acquire binds the key to another resource.
	Failed bool
}

// BindingKey names a binding: its context and key.
type BindingKey struct{ Context, Key string }

// bindingState returns binding slot's state and marks it saved, or false
// if its resource is gone (the key is rebound at its next use, or the
// binding expires); the caller holds the write lock.
func (p *Pool) bindingState(slot int32) (BindingState, bool) {
	b := &p.binds.list[slot]
	r := &p.res[b.res]
	if !b.live || !r.live || r.gen != b.gen {
		return BindingState{}, false
	}
	b.saved = b.expires
	return BindingState{Context: b.k.context, Key: b.k.key, Resource: r.id, ExpiresAt: time.Unix(0, b.expires), Failed: b.failed}, true
}

// bindingStates lists the live bindings of live resources and marks them
// saved; the caller holds the write lock.
func (p *Pool) bindingStates() []BindingState {
	out := make([]BindingState, 0, len(p.binds.idx))
	for i := range p.binds.list {
		if s, ok := p.bindingState(int32(i)); ok {
			out = append(out, s)
		}
	}
	return out
}

// bindingChanges returns the change set's bindings: those made, moved or
// extended (their state) and the keys dropped; the caller holds the write
// lock. A key dropped and bound again is in both: apply the removals
// first. A binding whose resource is gone is listed as removed.
func (p *Pool) bindingChanges() (changed []BindingState, removed []BindingKey) {
	for _, k := range p.binds.removed {
		removed = append(removed, BindingKey{k.context, k.key})
	}
	for _, slot := range p.binds.dirty {
		b := &p.binds.list[slot]
		if !b.live || !b.dirty {
			continue
		}
		if s, ok := p.bindingState(slot); ok {
			changed = append(changed, s)
		} else {
			removed = append(removed, BindingKey{b.k.context, b.k.key})
		}
	}
	return changed, removed
}

// clearBindingChanges starts a new change set of bindings.
func (p *Pool) clearBindingChanges() {
	for _, slot := range p.binds.dirty {
		p.binds.list[slot].dirty = false
	}
	p.binds.dirty, p.binds.removed = p.binds.dirty[:0], nil
}

// checkBindings validates a snapshot's bindings; known says whether a
// resource id is in the snapshot.
func checkBindings(bs []BindingState, known func(string) bool, name func(kind string, i int) string) error {
	seen := make(map[bindKey]bool, len(bs))
	for i, b := range bs {
		what := name("bindings", i)
		if err := validID(what+".context", b.Context); err != nil {
			return err
		}
		if err := validID(what+".key", b.Key); err != nil {
			return err
		}
		if !known(b.Resource) {
			return fmt.Errorf("%w: %s names unknown resource %q", ErrInvalidArgument, what, b.Resource)
		}
		k := bindKey{b.Context, b.Key}
		if seen[k] {
			return fmt.Errorf("%w: %s repeats (%q, %q)", ErrInvalidArgument, what, b.Context, b.Key)
		}
		seen[k] = true
	}
	return nil
}

// restoreBindings adds a snapshot's bindings that have not expired by now;
// the caller holds the write lock and accounts their cells (Charge).
func (p *Pool) restoreBindings(bs []BindingState, now int64) {
	for _, bs := range bs {
		exp := bs.ExpiresAt.UnixNano()
		if exp <= now {
			continue
		}
		idx, ok := p.lookup(bs.Resource)
		if !ok {
			continue
		}
		context := bs.Context
		if ctx, known := p.findContext(context); known {
			context = p.ctxs[ctx].name
		}
		slot := p.newBinding(bindKey{context, bs.Key}, now)
		b := &p.binds.list[slot]
		b.res, b.gen, b.failed = idx, p.res[idx].gen, bs.Failed
		b.expires, b.saved = exp, exp
		b.ttl = int64(DefaultAffinityTTL)
	}
}
