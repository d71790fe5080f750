package budget

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Kind is a kind of per-tenant state with its own budget.
type Kind uint8

// The kinds of state. They are the only valid Kind values.
const (
	// Resources counts registered resources.
	Resources Kind = iota
	// Cells counts (resource, context) cells.
	Cells

	numKinds = 2
)

// String returns "resources" or "cells".
func (k Kind) String() string {
	switch k {
	case Resources:
		return "resources"
	case Cells:
		return "cells"
	default:
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
}

// Defaults and bounds of the budgets.
const (
	// DefaultResources is the default global budget of resources.
	DefaultResources = 100_000
	// DefaultCells is the default global budget of cells.
	DefaultCells = 500_000
	// MaxBudget is the largest global budget, reservation or ceiling: a
	// tenant's usage and reservation of a kind share one atomic word.
	MaxBudget = 1<<31 - 1
	// MaxUsage is the most units a tenant may hold of one kind, reached only
	// through Account (Reserve stops at the ceiling, at most MaxBudget).
	MaxUsage = 1<<32 - 1
)

// Config sets the global budgets and the default ceilings. The zero value
// of every field means its default; defaults are applied by New.
type Config struct {
	// Resources is the global budget of resources. Default
	// DefaultResources; at most MaxBudget.
	Resources int64
	// Cells is the global budget of cells. Default DefaultCells; at most
	// MaxBudget.
	Cells int64
	// DefaultMaxResources is the ceiling of resources of a tenant whose
	// Limits set none. A share of the budget keeps a tenant that nobody
	// configured from taking all of it. Default (and at most) Resources.
	DefaultMaxResources int64
	// DefaultMaxCells is the ceiling of cells of a tenant whose Limits set
	// none. Default (and at most) Cells.
	DefaultMaxCells int64
}

func (c Config) withDefaults() Config {
	if c.Resources == 0 {
		c.Resources = DefaultResources
	}
	if c.Cells == 0 {
		c.Cells = DefaultCells
	}
	if c.DefaultMaxResources == 0 {
		c.DefaultMaxResources = c.Resources
	}
	if c.DefaultMaxCells == 0 {
		c.DefaultMaxCells = c.Cells
	}
	return c
}

// Validate reports the first field that is out of range, after defaults,
// as an error wrapping ErrInvalidArgument.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Resources < 0 || c.Resources > MaxBudget:
		return fmt.Errorf("%w: Resources %d is outside [1, %d]", ErrInvalidArgument, c.Resources, MaxBudget)
	case c.Cells < 0 || c.Cells > MaxBudget:
		return fmt.Errorf("%w: Cells %d is outside [1, %d]", ErrInvalidArgument, c.Cells, MaxBudget)
	case c.DefaultMaxResources < 0 || c.DefaultMaxResources > c.Resources:
		return fmt.Errorf("%w: DefaultMaxResources %d is outside [1, Resources %d]", ErrInvalidArgument, c.DefaultMaxResources, c.Resources)
	case c.DefaultMaxCells < 0 || c.DefaultMaxCells > c.Cells:
		return fmt.Errorf("%w: DefaultMaxCells %d is outside [1, Cells %d]", ErrInvalidArgument, c.DefaultMaxCells, c.Cells)
	}
	return nil
}

// Limits are one tenant's reservations and ceilings. A zero reservation
// means none; a zero ceiling means the default ceiling
// (Config.DefaultMaxResources, Config.DefaultMaxCells).
type Limits struct {
	// ReservedResources is always available to the tenant.
	ReservedResources int64
	// MaxResources is never exceeded by Reserve.
	MaxResources int64
	// ReservedCells is always available to the tenant.
	ReservedCells int64
	// MaxCells is never exceeded by Reserve.
	MaxCells int64
}

func (l Limits) reserved(k Kind) int64 {
	if k == Resources {
		return l.ReservedResources
	}
	return l.ReservedCells
}

func (l Limits) max(k Kind) int64 {
	if k == Resources {
		return l.MaxResources
	}
	return l.MaxCells
}

// Usage is one tenant's usage of every kind, in units.
type Usage struct {
	// Resources is the number of resources held.
	Resources int64
	// Cells is the number of cells held.
	Cells int64
}

// Of returns the usage of kind k (0 for an unknown kind).
func (u Usage) Of(k Kind) int64 {
	switch k {
	case Resources:
		return u.Resources
	case Cells:
		return u.Cells
	}
	return 0
}

func (u *Usage) set(k Kind, v int64) {
	if k == Resources {
		u.Resources = v
	} else {
		u.Cells = v
	}
}

// Total describes the budget of one kind.
type Total struct {
	// Budget is the global budget.
	Budget int64
	// Reserved is the sum of all tenants' reservations.
	Reserved int64
	// Used is the sum of all tenants' usage.
	Used int64
	// Shared is the usage beyond reservations, drawn from the shared pool.
	Shared int64
	// Free is what Reserve can still hand out beyond reservations:
	// Budget − Reserved − Shared. It is negative when Account restored more
	// than the budget holds.
	Free int64
	// OverReleased counts units that Release was asked to return but that
	// were not held: a bookkeeping bug somewhere.
	OverReleased int64
	// Tenants is the number of tenants with limits or usage.
	Tenants int
}

// Totals describes the budgets of every kind.
type Totals struct {
	// Resources describes the budget of resources.
	Resources Total
	// Cells describes the budget of cells.
	Cells Total
}

// Of returns the totals of kind k (zero for an unknown kind).
func (t Totals) Of(k Kind) Total {
	switch k {
	case Resources:
		return t.Resources
	case Cells:
		return t.Cells
	}
	return Total{}
}

// A tenant's word of one kind: usage in the low 32 bits, reservation in the
// next 31, and the top bit set once the tenant has been forgotten.
const (
	usedMask = 1<<32 - 1
	resShift = 32
	resMask  = 1<<31 - 1
	deadBit  = uint64(1) << 63
)

func pack(used, res int64) uint64 { return uint64(used) | uint64(res)<<resShift }

func unpack(w uint64) (used, res int64) {
	return int64(w & usedMask), int64(w >> resShift & resMask)
}

// over is the part of used beyond the reservation res.
func over(used, res int64) int64 {
	if used > res {
		return used - res
	}
	return 0
}

// tenant is one tenant's state. words and ceil are read and written
// atomically; limits is guarded by Budget.mu.
type tenant struct {
	words  [numKinds]atomic.Uint64
	ceil   [numKinds]atomic.Int64 // effective ceiling: never 0
	limits Limits
}

// global is the budget of one kind.
type global struct {
	// budget is the global budget; constant.
	budget int64
	// defaultCeil is the ceiling of a tenant without one; constant.
	defaultCeil int64
	// committed is the sum of all reservations plus every unit drawn from
	// the shared pool, plus units briefly held by calls in flight. It is
	// raised before a tenant's word and lowered after it, so it never reads
	// lower than the truth.
	committed atomic.Int64
	// reserved is the sum of all reservations; written under Budget.mu.
	reserved     atomic.Int64
	overReleased atomic.Int64
}

// take commits d > 0 more units if they fit in the budget.
func (g *global) take(d int64) bool {
	for {
		c := g.committed.Load()
		if c > g.budget-d {
			return false
		}
		if g.committed.CompareAndSwap(c, c+d) {
			return true
		}
	}
}

// Budget holds the global budgets and every tenant's limits and usage. The
// zero value is not usable; create one with New. Safe for concurrent use;
// it owns no goroutine and needs no cleanup.
type Budget struct {
	kinds   [numKinds]global
	tenants sync.Map // string → *tenant

	// mu serialises SetLimits and Forget. Reserve, Release and Account
	// never take it.
	mu sync.Mutex
}

// New returns a Budget with cfg's budgets and no tenants. It fails with an
// error wrapping ErrInvalidArgument if cfg is invalid.
func New(cfg Config) (*Budget, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	b := &Budget{}
	b.kinds[Resources].budget, b.kinds[Resources].defaultCeil = cfg.Resources, cfg.DefaultMaxResources
	b.kinds[Cells].budget, b.kinds[Cells].defaultCeil = cfg.Cells, cfg.DefaultMaxCells
	return b, nil
}

// newTenant returns a tenant with default limits: no reservation and the
// default ceiling.
func (b *Budget) newTenant() *tenant {
	t := &tenant{}
	for k := range Kind(numKinds) {
		t.ceil[k].Store(b.kinds[k].defaultCeil)
	}
	return t
}

// lookup returns tenant id's state, creating it with default limits.
func (b *Budget) lookup(id string) *tenant {
	if v, ok := b.tenants.Load(id); ok {
		return v.(*tenant)
	}
	v, _ := b.tenants.LoadOrStore(id, b.newTenant())
	return v.(*tenant)
}

func checkCall(tenantID string, k Kind, n int64) error {
	switch {
	case tenantID == "":
		return fmt.Errorf("%w: empty tenant", ErrInvalidArgument)
	case k >= numKinds:
		return fmt.Errorf("%w: unknown kind %d", ErrInvalidArgument, uint8(k))
	case n < 0:
		return fmt.Errorf("%w: negative count %d of %s", ErrInvalidArgument, n, k)
	}
	return nil
}

// Reserve takes n units of kind for tenantID, from its unused reservation
// first and from the shared pool beyond it. It succeeds if and only if the
// tenant's usage plus n stays within its ceiling and the units beyond its
// reservation fit in what is free of the shared pool; a request that fits
// in the tenant's unused reservation is therefore never refused because of
// other tenants. A tenant without limits has no reservation and the
// default ceiling.
//
// A refusal returns an *ExhaustedError (wrapping ErrExhausted) naming the
// kind and the limit; bad input returns an error wrapping
// ErrInvalidArgument. Either way nothing changed. Reserve is lock-free,
// allocates nothing once the tenant is known, and is safe for concurrent
// use.
func (b *Budget) Reserve(tenantID string, kind Kind, n int64) error {
	if err := checkCall(tenantID, kind, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	g := &b.kinds[kind]
	for {
		v, ok := b.tenants.Load(tenantID)
		if !ok {
			// An unknown tenant has default limits: all it takes comes
			// from the shared pool. It is stored only if that succeeds,
			// so that a refusal changes nothing.
			if n > g.defaultCeil {
				return &ExhaustedError{Kind: kind, Bound: TenantCeiling, Requested: n, Max: g.defaultCeil}
			}
			if !g.take(n) {
				return &ExhaustedError{Kind: kind, Bound: GlobalBudget, Requested: n, Max: g.defaultCeil}
			}
			t := b.newTenant()
			t.words[kind].Store(pack(n, 0))
			if _, loaded := b.tenants.LoadOrStore(tenantID, t); !loaded {
				return nil
			}
			g.committed.Add(-n) // created meanwhile: go through it
			continue
		}
		t := v.(*tenant)
		w := &t.words[kind]
		for {
			old := w.Load()
			if old&deadBit != 0 {
				break // forgotten meanwhile: start again with a new life
			}
			used, res := unpack(old)
			ceil := t.ceil[kind].Load()
			if n > ceil || used > ceil-n {
				return &ExhaustedError{Kind: kind, Bound: TenantCeiling, Requested: n, Used: used, Reserved: res, Max: ceil}
			}
			d := over(used+n, res) - over(used, res)
			if d > 0 && !g.take(d) {
				return &ExhaustedError{Kind: kind, Bound: GlobalBudget, Requested: n, Used: used, Reserved: res, Max: ceil}
			}
			if w.CompareAndSwap(old, pack(used+n, res)) {
				return nil
			}
			if d > 0 {
				g.committed.Add(-d)
			}
		}
	}
}

// Release returns n units of kind held by tenantID: shared units first,
// then reserved ones. Returning more than the tenant holds is a bug in the
// caller's bookkeeping: the usage is clamped at zero, the excess is counted
// in Total.OverReleased and the call returns an error wrapping
// ErrOverRelease (the clamped release is nevertheless applied). Bad input
// returns an error wrapping ErrInvalidArgument and changes nothing. Release
// is lock-free, allocates nothing unless it fails, and is safe for
// concurrent use.
func (b *Budget) Release(tenantID string, kind Kind, n int64) error {
	if err := checkCall(tenantID, kind, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	g := &b.kinds[kind]
	for {
		v, ok := b.tenants.Load(tenantID)
		if !ok {
			g.overReleased.Add(n)
			return fmt.Errorf("%w: tenant %q released %d %s but holds none", ErrOverRelease, tenantID, n, kind)
		}
		w := &v.(*tenant).words[kind]
		for {
			old := w.Load()
			if old&deadBit != 0 {
				break
			}
			used, res := unpack(old)
			m := min(n, used)
			d := over(used, res) - over(used-m, res)
			if !w.CompareAndSwap(old, pack(used-m, res)) {
				continue
			}
			if d > 0 {
				g.committed.Add(-d)
			}
			if m < n {
				g.overReleased.Add(n - m)
				return fmt.Errorf("%w: tenant %q released %d %s but held %d", ErrOverRelease, tenantID, n, kind, m)
			}
			return nil
		}
	}
}

// Account adds n units of kind to tenantID's usage unconditionally, even
// beyond its ceiling or the global budget: it is for state restored from
// disk, which is never dropped, and is meant to be called before the
// server serves traffic. Units beyond the budget make the shared pool
// overdrawn until they are released: meanwhile only requests within
// reservations succeed.
//
// It fails with an error wrapping ErrInvalidArgument, and changes nothing,
// on bad input or if the usage would exceed MaxUsage. Safe for concurrent
// use.
func (b *Budget) Account(tenantID string, kind Kind, n int64) error {
	if err := checkCall(tenantID, kind, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if n > MaxUsage {
		return fmt.Errorf("%w: %d %s for tenant %q exceed %d", ErrInvalidArgument, n, kind, tenantID, int64(MaxUsage))
	}
	g := &b.kinds[kind]
	// Commit the most this can draw from the shared pool first and give
	// back the difference after, so that committed never reads too low.
	g.committed.Add(n)
	for {
		t := b.lookup(tenantID)
		w := &t.words[kind]
		for {
			old := w.Load()
			if old&deadBit != 0 {
				break
			}
			used, res := unpack(old)
			if used > MaxUsage-n {
				g.committed.Add(-n)
				return fmt.Errorf("%w: tenant %q would hold %d+%d %s, more than %d",
					ErrInvalidArgument, tenantID, used, n, kind, int64(MaxUsage))
			}
			if w.CompareAndSwap(old, pack(used+n, res)) {
				g.committed.Add(over(used+n, res) - over(used, res) - n)
				return nil
			}
		}
	}
}

// SetLimits replaces tenantID's reservations and ceilings, live. A zero
// reservation means none and a zero ceiling means the default ceiling.
// Lowering a ceiling below the tenant's usage is allowed: its state stays,
// and Reserve refuses until it is back under the ceiling.
//
// It fails with an error wrapping ErrInvalidArgument if a value is
// negative, a ceiling exceeds the global budget, a reservation exceeds its
// ceiling, or the sum of all tenants' reservations would exceed the global
// budget; with an error wrapping ErrExhausted if a raised reservation
// cannot be backed now because the shared pool it must come from is in use
// by other tenants (retry once they release). Either way nothing changed.
// Safe for concurrent use; calls to SetLimits and Forget are serialised.
func (b *Budget) SetLimits(tenantID string, l Limits) error {
	if tenantID == "" {
		return fmt.Errorf("%w: empty tenant", ErrInvalidArgument)
	}
	var res, ceil [numKinds]int64
	for k := range Kind(numKinds) {
		budget := b.kinds[k].budget
		res[k], ceil[k] = l.reserved(k), l.max(k)
		switch {
		case res[k] < 0:
			return fmt.Errorf("%w: %s reservation %d is negative", ErrInvalidArgument, k, res[k])
		case ceil[k] < 0:
			return fmt.Errorf("%w: %s ceiling %d is negative", ErrInvalidArgument, k, ceil[k])
		case ceil[k] > budget:
			return fmt.Errorf("%w: %s ceiling %d exceeds the global budget %d", ErrInvalidArgument, k, ceil[k], budget)
		case ceil[k] == 0:
			ceil[k] = b.kinds[k].defaultCeil
		}
		if res[k] > ceil[k] {
			return fmt.Errorf("%w: %s reservation %d exceeds the ceiling %d", ErrInvalidArgument, k, res[k], ceil[k])
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	// Reservations change only under mu, so they can be checked before the
	// tenant is created.
	var cur [numKinds]int64
	if v, ok := b.tenants.Load(tenantID); ok {
		for k := range Kind(numKinds) {
			_, cur[k] = unpack(v.(*tenant).words[k].Load())
		}
	}
	for k := range Kind(numKinds) {
		g := &b.kinds[k]
		if sum := g.reserved.Load() - cur[k] + res[k]; sum > g.budget {
			return fmt.Errorf("%w: %s reservations would total %d, more than the global budget %d",
				ErrInvalidArgument, k, sum, g.budget)
		}
	}
	t := b.lookup(tenantID) // cannot be forgotten meanwhile: Forget takes mu

	// Raises go first because they can fail, and are undone if one does;
	// the ceilings change only once no step can fail, so that a refused
	// call never lets a request through a ceiling it did not set.
	for k := range Kind(numKinds) {
		if res[k] <= cur[k] {
			continue
		}
		if err := b.raise(t, k, res[k]); err != nil {
			for j := range k {
				if res[j] > cur[j] {
					b.lower(t, j, cur[j])
				}
			}
			return err
		}
	}
	for k := range Kind(numKinds) {
		t.ceil[k].Store(ceil[k])
		if res[k] < cur[k] {
			b.lower(t, k, res[k])
		}
	}
	t.limits = l
	return nil
}

// raise raises t's reservation of k to res, taking from the shared pool
// what t's usage beyond its old reservation does not already cover.
// Caller holds b.mu.
func (b *Budget) raise(t *tenant, k Kind, res int64) error {
	g := &b.kinds[k]
	w := &t.words[k]
	for {
		old := w.Load()
		used, cur := unpack(old)
		need := (res - cur) - (over(used, cur) - over(used, res))
		if need > 0 && !g.take(need) {
			return fmt.Errorf("%w: raising the %s reservation from %d to %d needs %d units of the shared pool, which other tenants hold",
				ErrExhausted, k, cur, res, need)
		}
		if w.CompareAndSwap(old, pack(used, res)) {
			g.reserved.Add(res - cur)
			return nil
		}
		if need > 0 {
			g.committed.Add(-need)
		}
	}
}

// lower lowers t's reservation of k to res; its usage beyond res moves to
// the shared pool, which the freed reservation always covers. Caller holds
// b.mu.
func (b *Budget) lower(t *tenant, k Kind, res int64) {
	g := &b.kinds[k]
	w := &t.words[k]
	for {
		old := w.Load()
		used, cur := unpack(old)
		if w.CompareAndSwap(old, pack(used, res)) {
			g.reserved.Add(res - cur)
			g.committed.Add((over(used, res) - over(used, cur)) - (cur - res))
			return
		}
	}
}

// Limits returns tenantID's limits as last set by SetLimits (zero if none).
// Safe for concurrent use.
func (b *Budget) Limits(tenantID string) Limits {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.tenants.Load(tenantID); ok {
		return v.(*tenant).limits
	}
	return Limits{}
}

// Forget drops tenantID: all its units and reservations return to the
// budget and its limits are removed. Call it only once the tenant's delete
// has committed; a Reserve racing with Forget either is returned with the
// rest or starts the tenant afresh with default limits. It returns the
// usage it released (zero for an unknown tenant). Safe for concurrent use;
// calls to SetLimits and Forget are serialised.
func (b *Budget) Forget(tenantID string) Usage {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.tenants.LoadAndDelete(tenantID)
	if !ok {
		return Usage{}
	}
	t := v.(*tenant)
	var u Usage
	for k := range Kind(numKinds) {
		g := &b.kinds[k]
		used, res := unpack(t.words[k].Swap(deadBit))
		g.reserved.Add(-res)
		g.committed.Add(-(res + over(used, res)))
		u.set(k, used)
	}
	return u
}

// Usage returns tenantID's usage (zero for an unknown tenant). Safe for
// concurrent use.
func (b *Budget) Usage(tenantID string) Usage {
	var u Usage
	v, ok := b.tenants.Load(tenantID)
	if !ok {
		return u
	}
	t := v.(*tenant)
	for k := range Kind(numKinds) {
		if w := t.words[k].Load(); w&deadBit == 0 {
			used, _ := unpack(w)
			u.set(k, used)
		}
	}
	return u
}

// Totals returns the budgets' totals, for metrics and tests. It visits
// every tenant; under concurrent calls the figures are not one snapshot.
// Safe for concurrent use.
func (b *Budget) Totals() Totals {
	var used, shared [numKinds]int64
	n := 0
	b.tenants.Range(func(_, v any) bool {
		t := v.(*tenant)
		n++
		for k := range Kind(numKinds) {
			if w := t.words[k].Load(); w&deadBit == 0 {
				u, r := unpack(w)
				used[k] += u
				shared[k] += over(u, r)
			}
		}
		return true
	})
	var out [numKinds]Total
	for k := range Kind(numKinds) {
		g := &b.kinds[k]
		reserved := g.reserved.Load()
		out[k] = Total{
			Budget:       g.budget,
			Reserved:     reserved,
			Used:         used[k],
			Shared:       shared[k],
			Free:         g.budget - g.committed.Load(),
			OverReleased: g.overReleased.Load(),
			Tenants:      n,
		}
	}
	return Totals{Resources: out[Resources], Cells: out[Cells]}
}
