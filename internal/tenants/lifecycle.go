package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/repool/repool/internal/budget"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/ratelimit"
	"github.com/repool/repool/internal/store"
)

// Errors of a Lifecycle.
var (
	// ErrSuspended ends a tenant's event streams when it is suspended.
	ErrSuspended = errors.New("tenant suspended")
	// ErrInvalidLimits: limits or a policy refused as the caller's fault
	// (out of the ranges, reservations beyond the budget); nothing was
	// applied. The control plane answers it 400.
	ErrInvalidLimits = errors.New("invalid limits")
)

// Rules are the server's side of tenants' limits (control.LimitRules):
// the limits in force for stored limits, and a check of their ranges.
type Rules interface {
	Effective(l store.Limits) store.Limits
	Check(l store.Limits) error
}

// Credentials drops what it caches of a tenant's credentials
// (auth.Authenticator does).
type Credentials interface{ Invalidate(tenant string) }

// Checkpoints holds tenants' state in the store (checkpoint.Checkpointer
// does): it restores a tenant's stored state into a new pool of the
// registry (Restore: checkpoint and journaled leases), writes a pool's
// whole state (Save), makes what a pool changed durable at once (Sync),
// and forgets what it tracks of a tenant whose pool is gone (Forget).
type Checkpoints interface {
	Restore(ctx context.Context, tenant string) error
	Save(ctx context.Context, tenant string) error
	Sync(ctx context.Context, tenant string) error
	Forget(tenant string)
}

// Watcher follows a new pool's events until ctx ends (audit.Writer does).
type Watcher interface {
	Watch(ctx context.Context, tenant string, p *pool.Pool)
}

// Store is what a lifecycle reads of tenants in the store: their records
// (placement and status) and stored limits.
type Store interface {
	ListTenants(ctx context.Context, f store.TenantFilter) ([]store.Tenant, error)
	GetTenant(ctx context.Context, id string) (store.Tenant, error)
	GetLimits(ctx context.Context, tenant string) (store.Limits, error)
}

// LifecycleConfig wires a Lifecycle. Every field but Handover, Group, Moves
// and Log is required.
type LifecycleConfig struct {
	// Pools is the registry the lifecycle's pools live in, made with
	// NewRegistry(nil): the lifecycle makes its pools (NewPool) and accounts
	// the state restored into them. The checkpointer restores into the same
	// registry, which is why it is made before the lifecycle.
	Pools *Registry
	// Store is where tenants' records and stored limits are read from.
	Store Store
	// Handover, for a server of a group of an HA deployment, is the store's
	// side of the tenants' placements and moves: the registry then serves
	// only the tenants placed on Group (TakeIn, SyncPlacements, MoveOut).
	// Nil for a single server, which serves every tenant.
	Handover Handover
	Group    string
	// Moves, if set, counts the moves out that began (MoveOut).
	Moves MoveMetrics
	// Rules are the bounds of tenants' limits, Defaults the limits of a
	// tenant that stored none (every field set), Policy the server-wide
	// quarantine and decay policy.
	Rules    Rules
	Defaults store.Limits
	Policy   Policy
	// Budget, Limiter: the per-tenant state budgets and request limits the
	// limits in force are applied to.
	Budget  *budget.Budget
	Limiter *ratelimit.Limiter
	// Credentials, Checkpoints, Watcher: the components that hold some of a
	// tenant's state beside its pool.
	Credentials Credentials
	Checkpoints Checkpoints
	Watcher     Watcher
	// Epoch gives the fencing epoch a new pool starts at; Clock is the
	// pools' clock; Life ends the pools' watchers.
	Epoch func() uint32
	Clock clock.Clock
	Life  context.Context
	Log   *slog.Logger
}

// Lifecycle owns every tenant's in-memory state from its first call to its
// deletion: its pool (made with its policy, its lease cap, charged to its
// budget), the limits in force (rates, budgets, stream and lease caps, the
// quarantine and decay policy) and what follows a suspension, a
// reactivation, a deletion and a key revocation. It implements the control
// plane's Hooks (control.Hooks). Safe for concurrent use.
type Lifecycle struct {
	cfg LifecycleConfig

	mu     sync.RWMutex
	limits map[string]store.Limits // per tenant with stored limits: those in force (LimitRules.Effective)
	moving map[string]bool         // tenants being moved out (MoveOut): SyncPlacements leaves them alone

	moveMu sync.Mutex // one move at a time
}

// NewLifecycle returns a Lifecycle with no tenant's limits yet (LoadLimits
// reads them).
func NewLifecycle(cfg LifecycleConfig) (*Lifecycle, error) {
	switch {
	case cfg.Pools == nil, cfg.Store == nil, cfg.Rules == nil, cfg.Budget == nil, cfg.Limiter == nil, cfg.Credentials == nil, cfg.Checkpoints == nil,
		cfg.Watcher == nil, cfg.Epoch == nil, cfg.Clock == nil, cfg.Life == nil:
		return nil, errors.New("tenants: lifecycle: every dependency is required")
	}
	for l := range limits.Count {
		if _, ok := cfg.Defaults.Values.Get(l); !ok {
			return nil, fmt.Errorf("tenants: lifecycle: Defaults must set every limit (%s is not set)", l)
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Pools.newPool != nil {
		return nil, errors.New("tenants: lifecycle: Pools must be made with NewRegistry(nil): the lifecycle makes its pools")
	}
	if cfg.Handover != nil {
		if err := store.ValidateGroup(cfg.Group); err != nil {
			return nil, fmt.Errorf("tenants: lifecycle: %w", err)
		}
		cfg.Pools.Shard()
	}
	lc := &Lifecycle{cfg: cfg, limits: map[string]store.Limits{}, moving: map[string]bool{}}
	cfg.Pools.newPool, cfg.Pools.filled = lc.NewPool, lc.restored
	return lc, nil
}

// Pools is the registry of the tenants' pools.
func (lc *Lifecycle) Pools() *Registry { return lc.cfg.Pools }

// NewPool makes tenant's pool, as the registry asks for it: its policy and
// lease cap in force, charged to its budget under the pool's own lock, at
// the current epoch, its events audited.
func (lc *Lifecycle) NewPool(tenant string) (*pool.Pool, error) {
	// A failure here is the server's, not the caller's: %v keeps the
	// pool's error kinds out of it, so that it is answered as INTERNAL.
	gate := lc.cfg.Budget.Gate(tenant, lc.cfg.Log)
	p, err := pool.New(lc.Policy(tenant).PoolConfig(pool.Config{Clock: lc.cfg.Clock, Gate: gate}))
	if err != nil {
		return nil, fmt.Errorf("creating the pool of tenant %q: %v", tenant, err)
	}
	if err := p.SetEpoch(lc.cfg.Epoch()); err != nil {
		return nil, fmt.Errorf("creating the pool of tenant %q: %v", tenant, err)
	}
	p.SetMaxLeases(int(lc.Limit(tenant, limits.MaxLeases)))
	lc.cfg.Watcher.Watch(lc.cfg.Life, tenant, p)
	return p, nil
}

// Limits returns the limits in force for tenant: every limit set.
func (lc *Lifecycle) Limits(tenant string) store.Limits {
	lc.mu.RLock()
	l, ok := lc.limits[tenant]
	lc.mu.RUnlock()
	if !ok {
		return lc.cfg.Defaults
	}
	return l
}

// Limit returns tenant's limit l in force (a whole number for every
// limit but a rate).
func (lc *Lifecycle) Limit(tenant string, l limits.Limit) float64 {
	return lc.Limits(tenant).Values.Value(l)
}

// Policy returns the quarantine and decay policy in force for tenant: the
// server-wide one (exact, as the flags gave it) overlaid with the tenant's
// own values.
func (lc *Lifecycle) Policy(tenant string) Policy {
	lc.mu.RLock()
	l := lc.limits[tenant]
	lc.mu.RUnlock()
	return lc.cfg.Policy.ForTenant(l.Policy)
}

// LoadLimits applies every tenant's stored limits, before traffic. Stored
// limits that no longer fit (a smaller global budget, values from before
// the ranges) are logged and the tenant is served with the defaults rather
// than not at all.
func (lc *Lifecycle) LoadLimits(ctx context.Context) error {
	ts, err := lc.cfg.Store.ListTenants(ctx, store.TenantFilter{})
	if err != nil {
		return fmt.Errorf("listing tenants: %w", err)
	}
	for _, t := range ts {
		if err := lc.loadTenantLimits(ctx, t.ID); err != nil {
			return err
		}
	}
	return nil
}

// loadTenantLimits applies one tenant's stored limits, as LoadLimits does
// for every tenant: for a tenant moved here from another group, before its
// pool is made. Only a failure to read them is an error; limits the rules
// refuse are logged and the defaults stay in force.
func (lc *Lifecycle) loadTenantLimits(ctx context.Context, tenant string) error {
	l, err := lc.cfg.Store.GetLimits(ctx, tenant)
	if err != nil {
		return fmt.Errorf("reading the limits of %s: %w", tenant, err)
	}
	err = lc.cfg.Rules.Check(l)
	if err == nil {
		err = lc.ApplyLimits(tenant, l)
	}
	if err != nil {
		lc.cfg.Log.Error("stored limits not applied", "tenant", tenant, "err", err)
	}
	return nil
}

// ApplyLimits applies a tenant's limits live: those in force, the smaller
// of the operator's (or the default) and the tenant-admin's of each; and
// its quarantine and decay policy, over the server-wide one, to its pool.
// Limits the budget or the policy's ranges refuse are an error wrapping
// ErrInvalidLimits, and nothing is applied.
func (lc *Lifecycle) ApplyLimits(tenant string, l store.Limits) error {
	policy := lc.cfg.Policy.ForTenant(l.Policy)
	if err := policy.Validate(); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidLimits, strings.TrimPrefix(err.Error(), "config: "))
	}
	eff := lc.cfg.Rules.Effective(l)
	eff.Policy = l.Policy // the tenant's own values, for pools created later
	v := eff.Values
	if err := lc.cfg.Budget.SetLimits(tenant, budget.Limits{
		ReservedResources: int64(v.Value(limits.ReservedResources)), MaxResources: int64(v.Value(limits.MaxResources)),
		ReservedCells: int64(v.Value(limits.ReservedCells)), MaxCells: int64(v.Value(limits.MaxCells)),
	}); err != nil {
		// The budget's words ("resources reservations would total ..."),
		// without its sentinel's.
		msg := strings.TrimPrefix(err.Error(), budget.ErrInvalidArgument.Error()+": ")
		return fmt.Errorf("%w: %s", ErrInvalidLimits, msg)
	}
	if err := lc.cfg.Limiter.Set(tenant, v.Value(limits.RatePerSecond), int(v.Value(limits.Burst))); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidLimits, err)
	}
	lc.mu.Lock()
	lc.limits[tenant] = eff
	lc.mu.Unlock()
	if p, ok := lc.cfg.Pools.Lookup(tenant); ok {
		p.SetMaxLeases(int(v.Value(limits.MaxLeases)))
		if err := p.SetPolicy(policy.PoolPolicy()); err != nil {
			// Validate's ranges are within the pool's: not the caller's fault.
			return fmt.Errorf("applying the policy of tenant %q: %v", tenant, err)
		}
	}
	return nil
}

// TenantStatusChanged drops cached credentials and, on suspension, ends the
// tenant's event streams and refuses new ones (a stream admitted just
// before the suspension included) until the tenant is reactivated.
func (lc *Lifecycle) TenantStatusChanged(tenant string, st store.Status) {
	lc.cfg.Credentials.Invalidate(tenant)
	p, ok := lc.cfg.Pools.Lookup(tenant)
	if !ok {
		return
	}
	switch st {
	case store.StatusSuspended:
		p.CloseSubscriptions(ErrSuspended)
	case store.StatusActive:
		p.OpenSubscriptions()
	}
}

// TenantDeleted runs after the delete committed: it drops the pool for
// good (a call admitted before the delete cannot create a new one; tenant
// ids are never reused), closes it, so that a call that already holds it
// changes nothing and charges no budget from now on, and only then returns
// the tenant's budget and forgets its limits.
func (lc *Lifecycle) TenantDeleted(tenant string) {
	lc.cfg.Credentials.Invalidate(tenant)
	if p := lc.cfg.Pools.Remove(tenant); p != nil {
		p.Close(fmt.Errorf("tenant %s: %w", tenant, ErrDeleted))
	}
	lc.forget(tenant)
}

// forget drops what the checkpointer, the budget, the limiter and the
// limits in force hold of a tenant whose pool is gone from here.
func (lc *Lifecycle) forget(tenant string) {
	lc.cfg.Checkpoints.Forget(tenant)
	lc.cfg.Budget.Forget(tenant)
	lc.cfg.Limiter.Forget(tenant)
	lc.mu.Lock()
	delete(lc.limits, tenant)
	lc.mu.Unlock()
}

// MovedAway lets go of a tenant that another group now serves (it was
// moved there, or found placed there): its calls are refused with an
// *ElsewhereError naming group from now on, its pool (if any) is closed
// with that error, and what the budget, the limiter, the checkpointer and
// the limits in force hold of it is forgotten. Nothing is written: the
// tenant's state is the other group's now.
func (lc *Lifecycle) MovedAway(tenant, group string) {
	why := &ElsewhereError{Tenant: tenant, Group: group}
	if p := lc.cfg.Pools.Away(tenant, group); p != nil {
		p.Close(why)
	}
	lc.cfg.Credentials.Invalidate(tenant)
	lc.forget(tenant)
}

// Close closes every tenant's pool with why and forgets what the budget
// and the checkpointer hold of them, as a server stepping down does: a
// call still holding a pool changes nothing and charges nothing, and the
// registry refuses new pools until Open. The limits in force stay; the
// next LoadLimits replaces them.
func (lc *Lifecycle) Close(why error) {
	for t, p := range lc.cfg.Pools.Close() {
		p.Close(why)
		lc.cfg.Budget.Forget(t)
		lc.cfg.Checkpoints.Forget(t)
	}
}

// Open lets the registry make pools again, after Close.
func (lc *Lifecycle) Open() { lc.cfg.Pools.Open() }

// restored accounts a restored pool's resources and cells (its charge) to
// its tenant's budget, even above a limit: the registry calls it before it
// publishes the pool, so that the tenant's first call sees its budget with
// the restored state in it.
func (lc *Lifecycle) restored(tenant string, p *pool.Pool) {
	resources, cells := p.Charge()
	_ = lc.cfg.Budget.Account(tenant, budget.Resources, int64(resources))
	_ = lc.cfg.Budget.Account(tenant, budget.Cells, int64(cells))
}

// KeyRevoked drops cached credentials so the key fails at once.
func (lc *Lifecycle) KeyRevoked(tenant, _ string) { lc.cfg.Credentials.Invalidate(tenant) }

// ErrNotDurable: a change made in the tenant's pool could not be made
// durable at once; the next checkpoint round writes it.
var ErrNotDurable = errors.New("change made but not yet durable")

// Resource returns one resource of the tenant's pool: pool.ErrNotFound
// for a resource the pool does not hold (or a tenant without a pool here).
func (lc *Lifecycle) Resource(tenant, id string) (pool.ResourceInfo, error) {
	p, ok := lc.cfg.Pools.Lookup(tenant)
	if !ok {
		return pool.ResourceInfo{}, fmt.Errorf("%w: resource %q: the tenant has no pool on this server", pool.ErrNotFound, id)
	}
	return p.Get(id)
}

// Resources returns up to limit resources of the tenant's pool with ids
// greater than after, in id order, and whether more follow:
// pool.ErrNotFound for a tenant without a pool here.
func (lc *Lifecycle) Resources(tenant, after string, limit int) ([]pool.ResourceInfo, bool, error) {
	p, ok := lc.cfg.Pools.Lookup(tenant)
	if !ok {
		return nil, false, fmt.Errorf("%w: the tenant has no pool on this server", pool.ErrNotFound)
	}
	infos, more := p.List(after, limit)
	return infos, more, nil
}

// Quarantine imposes a whole quarantine of d (0: the tenant's cooldown
// maximum) on one resource of the tenant's pool, or with impose false
// lifts every quarantine of it (pool.Pool.Quarantine, pool.Pool.Lift),
// for why; then it makes the change durable before it returns the
// resource's state. An error wrapping ErrNotDurable means the change was
// made but only the next checkpoint round writes it; a retry does the
// same again and confirms it.
func (lc *Lifecycle) Quarantine(ctx context.Context, tenant, id string, impose bool, d time.Duration, why string) (pool.ResourceInfo, error) {
	p, ok := lc.cfg.Pools.Lookup(tenant)
	if !ok {
		return pool.ResourceInfo{}, fmt.Errorf("%w: resource %q: the tenant has no pool on this server", pool.ErrNotFound, id)
	}
	var (
		info pool.ResourceInfo
		err  error
	)
	if impose {
		if d == 0 {
			d = lc.Policy(tenant).PoolPolicy().CooldownMax
		}
		info, err = p.Quarantine(id, d, why)
	} else {
		info, err = p.Lift(id, why)
	}
	if err != nil {
		return pool.ResourceInfo{}, err
	}
	if err := lc.cfg.Checkpoints.Sync(ctx, tenant); err != nil {
		return info, fmt.Errorf("%w: %w", ErrNotDurable, err)
	}
	return info, nil
}
