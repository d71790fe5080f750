// Package tenants keeps one reputation pool per tenant in memory.
package tenants

import (
	"errors"
	"fmt"
	"sort"
	"sync"

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
)

// Registry maps tenants to their pools. A tenant's pool is created once,
// even when its first requests race, and never again once the tenant is
// removed: a call that was admitted before its tenant's deletion (or before
// a step-down) and reaches Pool afterwards gets an error, not a new empty
// pool that nothing would ever remove. Safe for concurrent use.
type Registry struct {
	newPool func(tenant string) (*pool.Pool, error)

	mu      sync.RWMutex
	pools   map[string]*pool.Pool
	deleted map[string]bool // removed tenants: one entry per tenant deleted while the process runs
	closed  bool
}

// NewRegistry returns an empty, open registry that makes pools with newPool.
func NewRegistry(newPool func(tenant string) (*pool.Pool, error)) *Registry {
	return &Registry{newPool: newPool, pools: map[string]*pool.Pool{}, deleted: map[string]bool{}}
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
	r.mu.RUnlock()
	if ok {
		return p, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pools[tenant]; ok {
		return p, nil
	}
	switch {
	case r.deleted[tenant]:
		return nil, fmt.Errorf("tenants: %q: %w", tenant, ErrDeleted)
	case r.closed:
		return nil, fmt.Errorf("tenants: %q: %w", tenant, ErrClosed)
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
	out := make([]string, 0, len(r.pools))
	for t := range r.pools {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
