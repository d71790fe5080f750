package pool

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Stats are the discounted counts of a resource (aggregate) or a cell,
// without the Beta(1, 1) base.
type Stats struct {
	Alpha, Beta         float64
	UpdatedAt           time.Time
	ConsecutiveFailures int
	// Recent is the record of the latest outcomes behind
	// ContextStats.RecentSuccesses and RecentFailures, as the pool keeps
	// it: one bit per outcome below a marker bit; 0 holds none.
	Recent uint64
}

// Quarantine is a resource's or cell's quarantine state. A zero Until means
// not quarantined. Level is the number of cooldowns in a row, which sets the
// next cooldown's length.
type Quarantine struct {
	Until time.Time
	Level int
}

// ResourceState is a resource in a Snapshot.
type ResourceState struct {
	ID         string
	Capacity   int
	Labels     map[string]string
	Aggregate  Stats
	Quarantine Quarantine
	// RegisteredAt is when the resource was registered (zero: when it is
	// restored); Uses the leases granted on it; MaxUses and MaxAge its own
	// limits (Spec; 0: the pool's); Retired why it was retired ("" while it
	// is not); Imposed whether its whole quarantine was imposed
	// (Pool.Quarantine).
	RegisteredAt time.Time
	Uses         int
	MaxUses      int
	MaxAge       time.Duration
	Retired      string
	Imposed      bool
}

// CellState is a cell in a Snapshot.
type CellState struct {
	Resource, Context string
	Stats             Stats
	Quarantine        Quarantine
}

// LeaseState is a live lease in a Snapshot.
type LeaseState struct {
	ID                uint64
	Resource, Context string
	Token             uint64
	ExpiresAt         time.Time
}

// Snapshot is a pool's durable state: what a checkpoint writes and Restore
// reads. Tokens and lease ids carry the epoch in their upper bits.
type Snapshot struct {
	Epoch     uint32
	LastToken uint64 // highest fencing token issued
	LastLease uint64 // highest lease id issued
	Resources []ResourceState
	Cells     []CellState
	Leases    []LeaseState
	Bindings  []BindingState
}

// Changes is what changed since the previous Snapshot or TakeChanges: the
// resources and cells written (in full) and the ids removed. A resource id
// can be both removed and written (removed, then registered again); apply
// removals first.
type Changes struct {
	Epoch     uint32
	LastToken uint64
	LastLease uint64
	Resources []ResourceState
	Cells     []CellState
	Removed   []string
	// Bindings are the affinity bindings made, moved or extended, and
	// Unbound the keys dropped (expired, evicted, or whose resource is
	// gone); a key can be in both (dropped, then bound again): apply
	// Unbound first.
	Bindings []BindingState
	Unbound  []BindingKey
}

func statsOf(c counts, w recent, consec int32) Stats {
	return Stats{Alpha: c.a, Beta: c.b, UpdatedAt: time.Unix(0, c.upd), ConsecutiveFailures: int(consec), Recent: uint64(w)}
}

func quarantineOf(q quarantine) Quarantine {
	if q.state == qNone {
		return Quarantine{Level: int(q.level)}
	}
	// Probation and probing are kept as a cooldown that has just ended, so
	// that a restored pool probes the resource again.
	return Quarantine{Until: time.Unix(0, q.until), Level: int(q.level)}
}

func (p *Pool) resourceState(idx int32) ResourceState {
	r := &p.res[idx]
	l := &p.life[idx]
	s := ResourceState{
		ID: r.id, Capacity: int(r.capacity), Aggregate: statsOf(r.agg, r.recent, r.consecFail), Quarantine: quarantineOf(r.q),
		RegisteredAt: time.Unix(0, l.born), Uses: int(r.uses), MaxUses: int(l.maxUses), MaxAge: time.Duration(l.maxAge),
		Retired: p.retiredWhy[idx], Imposed: l.imposed && r.q.state == qBlocked,
	}
	if len(r.labels) > 0 {
		s.Labels = maps.Clone(r.labels)
	}
	return s
}

func (p *Pool) cellState(slot int32) CellState {
	c, k := p.cellAt(slot), p.keyOf(slot)
	return CellState{Resource: p.res[k.res].id, Context: p.ctxs[k.ctx].name, Stats: statsOf(c.c, c.recent, c.consecFail), Quarantine: quarantineOf(c.q)}
}

func (p *Pool) mask() uint64 { return 1<<tokenBits - 1 }

// Snapshot copies the pool's whole state and clears the change set, so that
// the next TakeChanges is relative to it. It is for checkpoints, not for the
// hot path: use HasResource and HasCell to test presence.
func (p *Pool) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.snapshotLocked()
	p.clearChangesLocked()
	return s
}

// snapshotLocked copies the pool's whole state; the caller holds the lock.
func (p *Pool) snapshotLocked() Snapshot {
	s := Snapshot{
		Epoch:     p.epoch,
		LastToken: p.withEpoch(p.counter),
		LastLease: p.withEpoch(p.leaseSeq),
		Resources: make([]ResourceState, 0, p.nresource),
		Cells:     make([]CellState, 0, p.ncells),
		Leases:    make([]LeaseState, 0, p.leases.len()),
	}
	for idx := range p.res {
		if p.res[idx].live {
			s.Resources = append(s.Resources, p.resourceState(int32(idx)))
		}
	}
	for i := range p.dense {
		if p.dense[i].live {
			s.Cells = append(s.Cells, p.cellState(int32(i)))
		}
	}
	for i := range p.sparse {
		if p.sparse[i].live {
			s.Cells = append(s.Cells, p.cellState(sparseBase+int32(i)))
		}
	}
	p.leases.each(func(id uint64, l leaseRec) {
		s.Leases = append(s.Leases, LeaseState{ID: id, Resource: p.res[l.res].id, Context: l.context, Token: l.token, ExpiresAt: time.Unix(0, l.expires)})
	})
	s.Bindings = p.bindingStates()
	return s
}

// TakeChanges returns what changed since the last Snapshot or TakeChanges
// and starts a new change set. If writing the changes fails, the caller must
// fall back to a full Snapshot: the changes are not kept.
func (p *Pool) TakeChanges() Changes {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := Changes{
		Epoch:     p.epoch,
		LastToken: p.withEpoch(p.counter),
		LastLease: p.withEpoch(p.leaseSeq),
		Removed:   p.removed,
	}
	for _, idx := range p.dirtyRes {
		if p.res[idx].live && p.res[idx].dirty {
			ch.Resources = append(ch.Resources, p.resourceState(idx))
		}
	}
	for _, slot := range p.dirtyCells {
		if c := p.cellAt(slot); c.live && c.dirty {
			ch.Cells = append(ch.Cells, p.cellState(slot))
		}
	}
	ch.Bindings, ch.Unbound = p.bindingChanges()
	p.clearChangesLocked()
	return ch
}

func (p *Pool) clearChangesLocked() {
	for _, idx := range p.dirtyRes {
		p.res[idx].dirty = false
	}
	for _, slot := range p.dirtyCells {
		p.cellAt(slot).dirty = false
	}
	p.dirtyRes, p.dirtyCells, p.removed = p.dirtyRes[:0], p.dirtyCells[:0], nil
	p.clearBindingChanges()
}

// validLifetime checks a resource state's retirement fields.
func validLifetime(what string, r ResourceState) error {
	switch {
	case r.Uses < 0 || r.Uses > MaxMaxUses:
		return fmt.Errorf("%w: %s uses %d is outside [0, %d]", ErrInvalidArgument, what, r.Uses, MaxMaxUses)
	case r.MaxUses < 0 || r.MaxUses > MaxMaxUses:
		return fmt.Errorf("%w: %s max_uses %d is outside [0, %d]", ErrInvalidArgument, what, r.MaxUses, MaxMaxUses)
	case r.MaxAge < 0 || r.MaxAge > MaxMaxAge:
		return fmt.Errorf("%w: %s max_age %v is outside [0, %v]", ErrInvalidArgument, what, r.MaxAge, MaxMaxAge)
	}
	if pr := valueProblem(r.Retired); pr != "" {
		return fmt.Errorf("%w: %s retired reason %s", ErrInvalidArgument, what, pr)
	}
	return nil
}

func validStats(what string, s Stats) error {
	if math.IsNaN(s.Alpha) || math.IsInf(s.Alpha, 0) || s.Alpha < 0 || math.IsNaN(s.Beta) || math.IsInf(s.Beta, 0) || s.Beta < 0 {
		return fmt.Errorf("%w: %s counts (%v, %v) are not finite and non-negative", ErrInvalidArgument, what, s.Alpha, s.Beta)
	}
	if s.ConsecutiveFailures < 0 || s.ConsecutiveFailures > math.MaxInt32 {
		return fmt.Errorf("%w: %s consecutive failures %d is outside [0, %d]", ErrInvalidArgument, what, s.ConsecutiveFailures, math.MaxInt32)
	}
	return nil
}

// Check returns the ErrInvalidArgument that Restore would return for s, or
// nil. It reads no pool, so that a caller can check a snapshot before it
// makes a pool for it.
//
// A store's snapshot (resources ordered by id, cells by resource and
// context) is checked without maps, and every snapshot without formatting
// a message until one is needed: a restore of 100,000 resources and
// 200,000 cells is on the path of a tenant's move.
func (s Snapshot) Check() error {
	if s.check(func(string, int) string { return "" }) == nil {
		return nil
	}
	return s.check(func(kind string, i int) string { return fmt.Sprintf("snapshot %s[%d]", kind, i) })
}

// check is Check with name naming the i-th entry of a kind in messages.
func (s Snapshot) check(name func(kind string, i int) string) error {
	if s.Epoch > MaxEpoch {
		return fmt.Errorf("%w: snapshot epoch %d above %d", ErrInvalidArgument, s.Epoch, MaxEpoch)
	}
	if s.LastToken>>tokenBits > MaxEpoch || s.LastLease>>tokenBits > MaxEpoch {
		return fmt.Errorf("%w: snapshot high-water marks (token %d, lease %d) carry an epoch above %d", ErrInvalidArgument, s.LastToken, s.LastLease, MaxEpoch)
	}
	sorted := slices.IsSortedFunc(s.Resources, func(a, b ResourceState) int { return strings.Compare(a.ID, b.ID) })
	var caps map[string]int
	if !sorted {
		caps = make(map[string]int, len(s.Resources))
	}
	known := func(id string) bool {
		if caps != nil {
			_, ok := caps[id]
			return ok
		}
		_, ok := slices.BinarySearchFunc(s.Resources, id, func(r ResourceState, id string) int { return strings.Compare(r.ID, id) })
		return ok
	}
	for i, r := range s.Resources {
		what := name("resources", i)
		if err := validID(what+".id", r.ID); err != nil {
			return err
		}
		dup := i > 0 && s.Resources[i-1].ID == r.ID
		if caps != nil {
			_, dup = caps[r.ID]
		}
		if dup {
			return fmt.Errorf("%w: %s id %q repeats", ErrInvalidArgument, name("resources", i), r.ID)
		}
		if r.Capacity < 1 || r.Capacity > 1<<20 {
			return fmt.Errorf("%w: %s capacity %d", ErrInvalidArgument, name("resources", i), r.Capacity)
		}
		if err := validLabels(what+".labels", r.Labels); err != nil {
			return err
		}
		if err := validStats(what, r.Aggregate); err != nil {
			return err
		}
		if err := validLifetime(what, r); err != nil {
			return err
		}
		if caps != nil {
			caps[r.ID] = r.Capacity
		}
	}
	cellOrder := func(a, b CellState) int {
		if c := strings.Compare(a.Resource, b.Resource); c != 0 {
			return c
		}
		return strings.Compare(a.Context, b.Context)
	}
	type ck struct{ r, c string }
	var seen map[ck]bool
	if !sorted || !slices.IsSortedFunc(s.Cells, cellOrder) {
		seen = make(map[ck]bool, len(s.Cells))
	}
	next := 0 // sorted: the first resource not below the last cell's
	for i, c := range s.Cells {
		what := name("cells", i)
		var ok bool
		if seen != nil {
			ok = known(c.Resource)
		} else {
			// Sorted cells and resources: one walk through both.
			for next < len(s.Resources) && s.Resources[next].ID < c.Resource {
				next++
			}
			ok = next < len(s.Resources) && s.Resources[next].ID == c.Resource
		}
		if !ok {
			return fmt.Errorf("%w: %s names unknown resource %q", ErrInvalidArgument, name("cells", i), c.Resource)
		}
		if err := validID(what+".context", c.Context); err != nil {
			return err
		}
		dup := i > 0 && cellOrder(s.Cells[i-1], c) == 0
		if seen != nil {
			dup = seen[ck{c.Resource, c.Context}]
			seen[ck{c.Resource, c.Context}] = true
		}
		if dup {
			return fmt.Errorf("%w: %s repeats (%q, %q)", ErrInvalidArgument, name("cells", i), c.Resource, c.Context)
		}
		if err := validStats(what, c.Stats); err != nil {
			return err
		}
	}
	ids := make(map[uint64]bool, len(s.Leases))
	for i, l := range s.Leases {
		what := name("leases", i)
		if l.ID == 0 || l.Token == 0 {
			return fmt.Errorf("%w: %s has id %d and token %d; neither may be 0", ErrInvalidArgument, name("leases", i), l.ID, l.Token)
		}
		if ids[l.ID] {
			return fmt.Errorf("%w: %s id %d repeats", ErrInvalidArgument, name("leases", i), l.ID)
		}
		ids[l.ID] = true
		if !known(l.Resource) {
			return fmt.Errorf("%w: %s names unknown resource %q", ErrInvalidArgument, name("leases", i), l.Resource)
		}
		if err := validID(what+".context", l.Context); err != nil {
			return err
		}
		if l.Token > s.LastToken || l.ID > s.LastLease {
			return fmt.Errorf("%w: %s token or id above the snapshot's high-water marks", ErrInvalidArgument, name("leases", i))
		}
	}
	return checkBindings(s.Bindings, known, name)
}

// Restore replaces the pool's state with s. The snapshot is checked
// completely first (Check); if it is invalid (ErrInvalidArgument) nothing
// changes. Fencing tokens and lease ids continue above the snapshot's
// high-water marks and above the pool's own, so that they keep increasing.
// Leases already past their expiry are expired by the next Acquire or Tick.
//
// A snapshot may hold more leases of a resource than its capacity: a
// failover restores every lease that may still be held, because which of
// them ended is not always known, and one held lease left out would let
// the resource be leased beyond its capacity. Such a resource takes no new
// lease until enough of them end. Restore does not consult the Gate (its
// caller accounts what it restored). Subscriptions stay open.
func (p *Pool) Restore(s Snapshot) error {
	if err := s.Check(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now().UnixNano()
	// Tokens and lease ids: keep the larger of ours and the snapshot's, and
	// go on in the latest epoch any of them names (or the snapshot's own),
	// so that neither ever goes back.
	lastToken := max(p.withEpoch(p.counter), s.LastToken)
	lastLease := max(p.withEpoch(p.leaseSeq), s.LastLease)
	p.reset()
	p.epoch = max(uint32(lastToken>>tokenBits), uint32(lastLease>>tokenBits), s.Epoch)
	p.counter, p.leaseSeq = 0, 0
	if uint32(lastToken>>tokenBits) == p.epoch {
		p.counter = lastToken & p.mask()
	}
	if uint32(lastLease>>tokenBits) == p.epoch {
		p.leaseSeq = lastLease & p.mask()
	}
	// Sized once: a large tenant moved in is restored without regrowing
	// (and copying) its resources again and again.
	p.res = make([]resource, 0, len(s.Resources))
	p.life = make([]lifetime, 0, len(s.Resources))
	res := p.res[:cap(p.res)]
	p.resView.Store(&res)
	for _, rs := range s.Resources {
		idx := p.addResource(Spec{ID: rs.ID, Capacity: rs.Capacity, Labels: rs.Labels, MaxUses: rs.MaxUses, MaxAge: rs.MaxAge}, now)
		r := &p.res[idx]
		r.agg = counts{a: rs.Aggregate.Alpha, b: rs.Aggregate.Beta, upd: rs.Aggregate.UpdatedAt.UnixNano()}
		r.recent = recent(rs.Aggregate.Recent)
		r.consecFail = int32(rs.Aggregate.ConsecutiveFailures)
		r.q = p.restoreQuarantine(rs.Quarantine, idx, -1)
		if r.q.state != qNone {
			p.nblocked++
			p.life[idx].imposed = rs.Imposed
		}
		r.uses = uint32(rs.Uses)
		if !rs.RegisteredAt.IsZero() {
			p.life[idx].born = rs.RegisteredAt.UnixNano() // the entry addResource queued is now stale
			p.scheduleAgeout(idx)
		}
		if rs.Retired != "" {
			r.retired = true
			p.retiredWhy[idx] = rs.Retired
		}
		p.updateAvail(idx)
	}
	for _, cs := range s.Cells {
		idx, _ := p.lookup(cs.Resource)
		ctx := p.contextID(cs.Context)
		c := cell{
			c:          counts{a: cs.Stats.Alpha, b: cs.Stats.Beta, upd: cs.Stats.UpdatedAt.UnixNano()},
			recent:     recent(cs.Stats.Recent),
			consecFail: int32(cs.Stats.ConsecutiveFailures),
			q:          p.restoreQuarantine(cs.Quarantine, idx, ctx),
		}
		slot := p.newCell(idx, ctx, c)
		p.updateLeader(ctx, idx, p.cellAt(slot))
	}
	for _, ls := range s.Leases {
		idx, _ := p.lookup(ls.Resource)
		r := &p.res[idx]
		r.active++
		p.overbooked = p.overbooked || r.active > r.capacity
		p.updateAvail(idx)
		expires := ls.ExpiresAt.UnixNano()
		context := ls.Context
		if ctx, ok := p.findContext(context); ok {
			context = p.ctxs[ctx].name // as Acquire keeps it: the pool's copy
		}
		p.leases.put(ls.ID, leaseRec{res: idx, gen: r.gen, context: context, token: ls.Token, expires: expires})
		p.expiries.push(expires, ls.ID)
		p.hints.put(ls.ID&p.mask(), idx, p.leases.len())
	}
	p.restoreBindings(s.Bindings, now)
	p.clearChangesLocked()
	return nil
}

// restoreQuarantine turns a saved quarantine back into a live one: a
// cooldown still running is scheduled; one that has ended goes through the
// heap too and becomes a probation at the next Acquire or Tick.
func (p *Pool) restoreQuarantine(q Quarantine, idx, ctx int32) quarantine {
	if q.Until.IsZero() {
		return quarantine{level: uint8(min(max(q.Level, 0), 30))}
	}
	until := q.Until.UnixNano()
	p.cooldowns.push(until, cooldown{res: idx, ctx: ctx, gen: p.res[idx].gen})
	return quarantine{state: qBlocked, until: until, level: uint8(min(max(q.Level, 0), 30))}
}

// SetEpoch raises the epoch that prefixes new fencing tokens and lease ids.
// Call it with a larger epoch on every restart and leader change; tokens
// issued after it are larger than every token issued before. Errors:
// ErrInvalidArgument if epoch is smaller than the current one or above
// MaxEpoch.
func (p *Pool) SetEpoch(epoch uint32) error {
	if epoch > MaxEpoch {
		return fmt.Errorf("%w: epoch %d above %d", ErrInvalidArgument, epoch, MaxEpoch)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch < p.epoch {
		return fmt.Errorf("%w: epoch %d is below the current %d", ErrInvalidArgument, epoch, p.epoch)
	}
	if epoch > p.epoch {
		p.epoch, p.counter, p.leaseSeq = epoch, 0, 0
	}
	return nil
}

// Epoch returns the current epoch and the last fencing token issued.
func (p *Pool) Epoch() (epoch uint32, lastToken uint64) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.epoch, p.withEpoch(p.counter)
}

// States returns the durable state of the named resources that exist, for
// callers that persist a change at once instead of at the next checkpoint.
func (p *Pool) States(ids []string) []ResourceState {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]ResourceState, 0, len(ids))
	for _, id := range ids {
		if idx, ok := p.lookup(id); ok {
			out = append(out, p.resourceState(idx))
		}
	}
	return out
}
