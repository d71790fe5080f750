// Package tenants keeps one reputation pool per tenant in memory.
package tenants

import (
	"fmt"
	"sort"
	"sync"

	"github.com/repool/repool/internal/pool"
)

// Registry maps tenants to their pools. A tenant's pool is created once,
// even when its first requests race. Safe for concurrent use.
type Registry struct {
	newPool func(tenant string) (*pool.Pool, error)

	mu    sync.RWMutex
	pools map[string]*pool.Pool
}

// NewRegistry returns an empty registry that makes pools with newPool.
func NewRegistry(newPool func(tenant string) (*pool.Pool, error)) *Registry {
	return &Registry{newPool: newPool, pools: map[string]*pool.Pool{}}
}

// Pool returns the tenant's pool, creating it on first use. An empty tenant
// is an error: a call without a tenant must never reach a pool.
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
	p, err := r.newPool(tenant)
	if err != nil {
		return nil, fmt.Errorf("tenants: creating the pool of %q: %w", tenant, err)
	}
	r.pools[tenant] = p
	return p, nil
}

// Lookup returns the tenant's pool if it exists.
func (r *Registry) Lookup(tenant string) (*pool.Pool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.pools[tenant]
	return p, ok
}

// Remove drops the tenant's pool and returns it (nil if there was none).
func (r *Registry) Remove(tenant string) *pool.Pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pools[tenant]
	delete(r.pools, tenant)
	return p
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
