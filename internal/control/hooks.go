package control

import (
	"context"
	"fmt"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// Hooks keep the server's in-memory state in step with the control plane,
// and reach into a tenant's pool for the resource routes.
// tenants.Lifecycle implements them; the API calls them synchronously, one change
// at a time for status changes, deletes and limits, in the order the store
// applied the changes. Implementations must be safe for concurrent use,
// return quickly and never call back into the API.
type Hooks interface {
	// ApplyLimits validates and applies a tenant's new limits live (rate
	// limits, budgets, stream and lease caps, and store.Limits.Policy, the
	// quarantine and decay policy of its pool). It is all or nothing: an
	// error means nothing was applied. An error wrapping
	// tenants.ErrInvalidLimits (the refusal of the package that owns
	// tenants' limits; for example a reservation the global budget cannot
	// hold) is answered 400 with its message, so that message is written
	// for the client and holds nothing secret; any other error is a 500.
	// It is called
	// before the limits are stored, and called again with the previous
	// limits if storing them fails.
	ApplyLimits(tenant string, l store.Limits) error
	// TenantStatusChanged is called after a suspend or reactivate
	// committed; for example, on suspension close the tenant's event
	// streams and drop its cached credentials.
	TenantStatusChanged(tenant string, s store.Status)
	// TenantDeleted is called only after the delete committed: drop the
	// tenant's pool and return its budget counts.
	TenantDeleted(tenant string)
	// KeyRevoked is called after a revocation committed: drop the key's
	// cached credentials at once.
	KeyRevoked(tenant, keyID string)
	// Resource returns one resource of the tenant's pool; an error
	// wrapping pool.ErrNotFound is answered 404.
	Resource(tenant, id string) (pool.ResourceInfo, error)
	// Resources returns up to limit resources of the tenant's pool with
	// ids greater than after, in id order, and whether more follow
	// (pool.Pool.List); an error wrapping pool.ErrNotFound when the tenant
	// has no pool on this server.
	Resources(tenant, after string, limit int) ([]pool.ResourceInfo, bool, error)
	// Quarantine imposes a quarantine of d (0: the tenant's cooldown
	// maximum) on a resource of the tenant's pool, or with impose false
	// lifts its quarantines, for why, and makes the change durable before
	// it returns the resource's state. pool.ErrNotFound is answered 404,
	// pool.ErrInvalidArgument 400 with its message; an error wrapping
	// tenants.ErrNotDurable 503.
	Quarantine(ctx context.Context, tenant, id string, impose bool, d time.Duration, why string) (pool.ResourceInfo, error)
}

// NopHooks does nothing and accepts every limit; for tests and tools that
// hold no in-memory state.
type NopHooks struct{}

var _ Hooks = NopHooks{}

// ApplyLimits accepts l.
func (NopHooks) ApplyLimits(string, store.Limits) error { return nil }

// TenantStatusChanged does nothing.
func (NopHooks) TenantStatusChanged(string, store.Status) {}

// TenantDeleted does nothing.
func (NopHooks) TenantDeleted(string) {}

// KeyRevoked does nothing.
func (NopHooks) KeyRevoked(string, string) {}

// Resource finds nothing: NopHooks hold no pools.
func (NopHooks) Resource(_, id string) (pool.ResourceInfo, error) {
	return pool.ResourceInfo{}, fmt.Errorf("%w: resource %q: no pools here", pool.ErrNotFound, id)
}

// Resources finds nothing: NopHooks hold no pools.
func (NopHooks) Resources(string, string, int) ([]pool.ResourceInfo, bool, error) {
	return nil, false, fmt.Errorf("%w: no pools here", pool.ErrNotFound)
}

// Quarantine finds nothing: NopHooks hold no pools.
func (NopHooks) Quarantine(_ context.Context, _, id string, _ bool, _ time.Duration, _ string) (pool.ResourceInfo, error) {
	return pool.ResourceInfo{}, fmt.Errorf("%w: resource %q: no pools here", pool.ErrNotFound, id)
}
