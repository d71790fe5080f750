// Package tenants keeps one reputation pool per tenant in memory.
package tenants

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/repool/repool/internal/pool"
)

// Errors of Registry.Pool.
var (
	// ErrDeleted: the tenant was removed (deleted); it never gets a pool
	// again, since tenant ids are never reused.
	ErrDeleted = errors.New("tenant deleted")
	// ErrClosed: the registry is closed (the server stepped down) until it
	// is opened again.
	ErrClosed = errors.New("tenant pools closed")
	// ErrElsewhere: the tenant is served by another group of servers, or is
	// on its way to or from this one (tenant-sharded groups). The caller
	// should retry through the front end. Errors wrapping it are
	// *ElsewhereError.
	ErrElsewhere = errors.New("tenant served elsewhere")
)

// ElsewhereError is a call refused because its tenant is not served here.
type ElsewhereError struct {
	Tenant string
	// Group is the group the tenant is placed on, or moving to; empty when
	// this server does not know it (yet).
	Group string
}

func (e *ElsewhereError) Error() string {
	if e.Group == "" {
		return fmt.Sprintf("tenant %s is not served by this group of servers; retry through the front end", e.Tenant)
	}
	return fmt.Sprintf("tenant %s is served by group %s; retry through the front end", e.Tenant, e.Group)
}

// Is makes errors.Is(err, ErrElsewhere) hold.
func (e *ElsewhereError) Is(target error) bool { return target == ErrElsewhere }

// Registry maps tenants to their pools. A tenant's pool is created once,
// even when its first requests race, and never again once the tenant is
// removed: a call that was admitted before its tenant's deletion (or before
// a step-down) and reaches Pool afterwards gets an error, not a new empty
// pool that nothing would ever remove. Safe for concurrent use.
//
// Sharded (tenant-sharded groups), a registry makes pools only for the
// tenants placed on its group (Admit): any other tenant is refused with an
// *ElsewhereError, and a tenant that moves away (Away) is refused from
// then on, so that a call is never served by the wrong group, nor by an
// empty pool made before the tenant's state was restored.
type Registry struct {
	newPool func(tenant string) (*pool.Pool, error)
	// filled is told of every pool Admit filled, before it is published
	// (the owning Lifecycle accounts the restored state); nil: nobody.
	filled func(tenant string, p *pool.Pool)

	mu      sync.RWMutex
	pools   map[string]*pool.Pool
	deleted map[string]bool // removed tenants: one entry per tenant deleted while the process runs
	closed  bool
	sharded atomic.Bool       // set once, before traffic (Shard)
	placed  map[string]bool   // sharded: tenants admitted here (with or without a pool)
	away    map[string]string // sharded: tenants known to be placed on (or moving to) another group
}

// NewRegistry returns an empty, open registry that makes pools with newPool.
// A server's registry is made with newPool nil and handed to NewLifecycle,
// which makes its pools.
func NewRegistry(newPool func(tenant string) (*pool.Pool, error)) *Registry {
	return &Registry{newPool: newPool, pools: map[string]*pool.Pool{}, deleted: map[string]bool{},
		placed: map[string]bool{}, away: map[string]string{}}
}

// Shard makes the registry serve only the tenants admitted to it (Admit).
func (r *Registry) Shard() { r.sharded.Store(true) }

// Admit places tenant here. With fill, it makes the tenant's pool, fills
// it (restores its stored state) outside the registry's lock, and only
// then publishes it: no call sees the pool before its state is in. A
// tenant that already has a pool is an error (its state would be
// overwritten). Without fill, the tenant (which has no stored state) gets
// an empty pool on its first call.
func (r *Registry) Admit(tenant string, fill func(*pool.Pool) error) error {
	if tenant == "" {
		return fmt.Errorf("tenants: no tenant")
	}
	var p *pool.Pool
	if fill != nil {
		var err error
		if p, err = r.newPool(tenant); err != nil {
			return fmt.Errorf("tenants: creating the pool of %q: %w", tenant, err)
		}
		if err := fill(p); err != nil {
			p.Close(err)
			return err
		}
		if r.filled != nil {
			r.filled(tenant, p)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.deleted[tenant]:
		err := fmt.Errorf("tenants: %q: %w", tenant, ErrDeleted)
		if p != nil {
			p.Close(err)
		}
		return err
	case p != nil && r.pools[tenant] != nil:
		p.Close(errors.New("admitted twice"))
		return fmt.Errorf("tenants: %q already has a pool here", tenant)
	}
	if p != nil {
		r.pools[tenant] = p
	}
	r.placed[tenant] = true
	delete(r.away, tenant)
	return nil
}

// Placed reports whether tenant is admitted here (always true unsharded).
func (r *Registry) Placed(tenant string) bool {
	if !r.sharded.Load() {
		return true
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.placed[tenant]
}

// Away marks tenant as served by group (moving there, or found placed
// there): Pool refuses it with an *ElsewhereError from now on. It drops
// the tenant's pool and returns it (nil if there was none), for the caller
// to close.
func (r *Registry) Away(tenant, group string) *pool.Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pools[tenant]
	delete(r.pools, tenant)
	delete(r.placed, tenant)
	r.away[tenant] = group
	return p
}

// Refuse marks tenant as on its way to group without dropping its pool:
// new calls get an *ElsewhereError while calls that already hold the pool
// finish. Away (or a later Admit) ends it.
func (r *Registry) Refuse(tenant, group string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.away[tenant] = group
}

// Serves returns nil if this server serves tenant, and an
// *ElsewhereError if another group does (or the tenant is moving): the
// data plane asks it before anything else of the call is charged to the
// tenant (its rate limit), since this server's view of a tenant it does
// not serve is not the tenant's. A closed registry (a standby) answers
// nil: the call is refused as not active.
func (r *Registry) Serves(tenant string) error {
	if !r.sharded.Load() {
		return nil // one group: nothing is ever elsewhere (no lock on the hot path)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if g, ok := r.away[tenant]; ok {
		return &ElsewhereError{Tenant: tenant, Group: g}
	}
	if !r.closed && !r.placed[tenant] {
		return &ElsewhereError{Tenant: tenant}
	}
	return nil
}

// ForgetAway drops what the registry remembers of the tenants refused as
// served elsewhere that live does not report (deleted tenants), so that
// the memory of other groups' tenants follows the placements.
func (r *Registry) ForgetAway(live func(tenant string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range r.away {
		if !live(t) {
			delete(r.away, t)
		}
	}
}

// Elsewhere returns the group tenant is known to be served by (or moving
// to) and true, if it is refused here (Refuse, Away).
func (r *Registry) Elsewhere(tenant string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	g, ok := r.away[tenant]
	return g, ok
}

// Admitted returns the tenants admitted here, sorted (sharded registries).
func (r *Registry) Admitted() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.placed))
}

// Pool returns the tenant's pool, creating it on first use. It fails with
// an error wrapping ErrDeleted for a removed tenant and ErrClosed while the
// registry is closed. An empty tenant is an error: a call without a tenant
// must never reach a pool.
func (r *Registry) Pool(tenant string) (*pool.Pool, error) {
	if tenant == "" {
		return nil, fmt.Errorf("tenants: no tenant")
	}
	r.mu.RLock()
	p, ok := r.pools[tenant]
	g, away := r.away[tenant]
	r.mu.RUnlock()
	if away {
		return nil, &ElsewhereError{Tenant: tenant, Group: g}
	}
	if ok {
		return p, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, away := r.away[tenant]; away {
		return nil, &ElsewhereError{Tenant: tenant, Group: g}
	}
	if p, ok := r.pools[tenant]; ok {
		return p, nil
	}
	switch {
	case r.deleted[tenant]:
		return nil, fmt.Errorf("tenants: %q: %w", tenant, ErrDeleted)
	case r.closed:
		return nil, fmt.Errorf("tenants: %q: %w", tenant, ErrClosed)
	case r.sharded.Load() && !r.placed[tenant]:
		return nil, &ElsewhereError{Tenant: tenant}
	}
	p, err := r.newPool(tenant)
	if err != nil {
		return nil, fmt.Errorf("tenants: creating the pool of %q: %w", tenant, err)
	}
	r.pools[tenant] = p
	return p, nil
}

// Lookup returns the tenant's pool if it exists. It never creates one.
func (r *Registry) Lookup(tenant string) (*pool.Pool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.pools[tenant]
	return p, ok
}

// Remove is for a deleted tenant: it drops the tenant's pool and returns it
// (nil if there was none), and Pool refuses the tenant from then on, even
// after Open. The tenant is remembered for as long as the registry lives.
func (r *Registry) Remove(tenant string) *pool.Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pools[tenant]
	delete(r.pools, tenant)
	r.deleted[tenant] = true
	return p
}

// Close drops every pool and returns them by tenant; until Open, Pool
// creates none. A server closes its registry when it stops being the
// active one.
func (r *Registry) Close() map[string]*pool.Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	dropped := r.pools
	r.pools = map[string]*pool.Pool{}
	r.placed = map[string]bool{}
	r.away = map[string]string{}
	r.closed = true
	return dropped
}

// Open lets Pool create pools again after Close (removed tenants stay
// refused). A new registry is open.
func (r *Registry) Open() {
	r.mu.Lock()
	r.closed = false
	r.mu.Unlock()
}

// Each calls f for every tenant that has a pool, in no particular order.
// f runs without the registry's lock, so it may use the registry.
func (r *Registry) Each(f func(tenant string, p *pool.Pool)) {
	type entry struct {
		tenant string
		p      *pool.Pool
	}
	r.mu.RLock()
	all := make([]entry, 0, len(r.pools))
	for t, p := range r.pools {
		all = append(all, entry{t, p})
	}
	r.mu.RUnlock()
	for _, e := range all {
		f(e.tenant, e.p)
	}
}

// Tenants returns the tenants that have a pool, sorted.
func (r *Registry) Tenants() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.pools))
}
