package tenants

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/budget"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/ratelimit"
	"github.com/repool/repool/internal/store"
)

// recorder stands in for the credentials cache, the checkpointer and the
// audit watcher: it records which tenants each was told about.
type recorder struct {
	mu                         sync.Mutex
	invalidated, forgot, watch []string
}

func (r *recorder) Invalidate(t string) {
	r.mu.Lock()
	r.invalidated = append(r.invalidated, t)
	r.mu.Unlock()
}
func (r *recorder) Forget(t string)                       { r.mu.Lock(); r.forgot = append(r.forgot, t); r.mu.Unlock() }
func (r *recorder) Sync(context.Context, string) error    { return nil }
func (r *recorder) Save(context.Context, string) error    { return nil }
func (r *recorder) Restore(context.Context, string) error { return nil }
func (r *recorder) Watch(_ context.Context, t string, _ *pool.Pool) {
	r.mu.Lock()
	r.watch = append(r.watch, t)
	r.mu.Unlock()
}

func (r *recorder) seen() (invalidated, forgot, watch []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.invalidated), slices.Clone(r.forgot), slices.Clone(r.watch)
}

// with returns l with limit lim set to v.
func with(l store.Limits, lim limits.Limit, v float64) store.Limits {
	l.Values.Set(lim, v)
	return l
}

// fillRules puts the defaults in a limit's unset fields and checks
// nothing: the ranges are control.LimitRules' (tested there); the budget's
// refusals are what these tests see.
type fillRules struct{ d store.Limits }

func (r fillRules) Effective(l store.Limits) store.Limits {
	out := r.d
	for lim := range limits.Count {
		if l.Values[lim] != nil {
			out.Values[lim] = l.Values[lim]
		}
	}
	return out
}

func (fillRules) Check(store.Limits) error { return nil }

// testConfig is a lifecycle's configuration for tests: a budget of 100
// resources and 1000 cells, a limiter, every default limit set, no stored
// limits, and rec as the credentials cache, checkpointer and watcher.
func testConfig(t *testing.T, rec *recorder) LifecycleConfig {
	t.Helper()
	b, err := budget.New(budget.Config{Resources: 100, Cells: 1000})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(ratelimit.Config{Rate: 100, Burst: 100})
	if err != nil {
		t.Fatal(err)
	}
	return LifecycleConfig{
		Pools: NewRegistry(nil), Store: noLimits{}, Rules: fillRules{testDefaults()}, Defaults: testDefaults(), Budget: b, Limiter: lim,
		Credentials: rec, Checkpoints: rec, Watcher: rec,
		Epoch: func() uint32 { return 7 }, Clock: clock.NewFake(time.Unix(1e9, 0)), Life: t.Context(),
	}
}

func newLifecycle(t *testing.T) (*Lifecycle, *budget.Budget, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg := testConfig(t, rec)
	lc, err := NewLifecycle(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lc, cfg.Budget, rec
}

// testDefaults are the tests' server defaults: every limit set, to its
// built-in default but for a request limit of 100/s, burst 100, ceilings
// of 10 resources and 100 cells, and 4 event streams.
func testDefaults() store.Limits {
	var d store.Limits
	for lim := range limits.Count {
		d.Values.Set(lim, lim.Spec().Default)
	}
	for lim, v := range map[limits.Limit]float64{
		limits.RatePerSecond: 100, limits.Burst: 100, limits.MaxResources: 10, limits.MaxCells: 100, limits.MaxStreams: 4,
	} {
		d.Values.Set(lim, v)
	}
	return d
}

// TestLifecycleNeedsEveryDefault: a lifecycle refuses server defaults
// that leave any limit of the table unset, naming it.
func TestLifecycleNeedsEveryDefault(t *testing.T) {
	for l := range limits.Count {
		cfg := testConfig(t, &recorder{})
		cfg.Defaults.Values[l] = nil
		if _, err := NewLifecycle(cfg); err == nil || !strings.Contains(err.Error(), l.String()) {
			t.Errorf("NewLifecycle(defaults without %s) = got error %v, want one naming it", l, err)
		}
	}
}

// TestLifecyclePoolsFollowTheLimits: a new pool is charged to its tenant's
// budget, at the tenant's ceiling, and watched; limits applied live reach
// the pool; limits the budget refuses change nothing.
func TestLifecyclePoolsFollowTheLimits(t *testing.T) {
	lc, b, rec := newLifecycle(t)
	p, err := lc.Pools().Pool("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, w := rec.seen(); !slices.Equal(w, []string{"a"}) {
		t.Fatalf("watched %v, want [a]", w)
	}
	if _, _, err := p.Register([]pool.Spec{{ID: "r1"}, {ID: "r2"}}); err != nil {
		t.Fatal(err)
	}
	if u := b.Usage("a"); u.Of(budget.Resources) != 2 {
		t.Fatalf("budget holds %d resources of a, want the pool's 2", u.Of(budget.Resources))
	}
	// A ceiling of 3 resources, applied live: the fourth is over budget.
	if err := lc.ApplyLimits("a", with(store.Limits{}, limits.MaxResources, 3)); err != nil {
		t.Fatalf("ApplyLimits(max_resources 3) = %v", err)
	}
	if got := lc.Limit("a", limits.MaxResources); got != 3 {
		t.Fatalf("limits in force: max_resources %v, want 3", got)
	}
	if _, _, err := p.Register([]pool.Spec{{ID: "r3"}, {ID: "r4"}}); !errors.Is(err, pool.ErrOverBudget) {
		t.Fatalf("registering past the ceiling = %v, want ErrOverBudget", err)
	}
	// A reservation larger than the global budget is refused as invalid
	// limits, and the limits in force stay as they were.
	if err := lc.ApplyLimits("a", with(with(store.Limits{}, limits.ReservedResources, 1000), limits.MaxResources, 1000)); !errors.Is(err, ErrInvalidLimits) {
		t.Fatalf("ApplyLimits(reserve 1000 of 100) = %v, want ErrInvalidLimits", err)
	}
	if got := lc.Limit("a", limits.MaxResources); got != 3 {
		t.Fatalf("a refused ApplyLimits changed max_resources to %v", got)
	}
	// A policy out of range is refused too.
	bad := int64(5000)
	if err := lc.ApplyLimits("a", store.Limits{Policy: store.Policy{QuarantineAfter: &bad}}); !errors.Is(err, ErrInvalidLimits) {
		t.Fatalf("ApplyLimits(quarantine_after 5000) = %v, want ErrInvalidLimits", err)
	}
	if got := lc.Limit("a", limits.MaxStreams); got != 4 {
		t.Fatalf("max_streams in force = %v, want the default 4", got)
	}
}

// TestLifecycleDeleteForgetsEverything: a deleted tenant's pool is closed
// and never made again, its credentials and checkpoint state are dropped,
// its budget returned and its limits back to the defaults.
func TestLifecycleDeleteForgetsEverything(t *testing.T) {
	lc, b, rec := newLifecycle(t)
	p, err := lc.Pools().Pool("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Register([]pool.Spec{{ID: "r1"}}); err != nil {
		t.Fatal(err)
	}
	if err := lc.ApplyLimits("a", with(store.Limits{}, limits.MaxResources, 5)); err != nil {
		t.Fatal(err)
	}
	lc.TenantDeleted("a")
	if _, _, err := p.Register([]pool.Spec{{ID: "r2"}}); !errors.Is(err, pool.ErrPoolClosed) || !errors.Is(err, ErrDeleted) {
		t.Fatalf("a deleted tenant's pool took a Register: %v", err)
	}
	if _, err := lc.Pools().Pool("a"); !errors.Is(err, ErrDeleted) {
		t.Fatalf("a deleted tenant got a pool again: %v", err)
	}
	inv, forgot, _ := rec.seen()
	if !slices.Contains(inv, "a") || !slices.Contains(forgot, "a") {
		t.Fatalf("credentials dropped for %v, checkpoints forgotten for %v; want a in both", inv, forgot)
	}
	if u := b.Usage("a"); u.Of(budget.Resources) != 0 {
		t.Fatalf("a deleted tenant still holds %d resources of the budget", u.Of(budget.Resources))
	}
	if got := lc.Limit("a", limits.MaxResources); got != 10 {
		t.Fatalf("a deleted tenant's limits stayed: max_resources %v, want the default 10", got)
	}
}

// TestLifecycleCloseAndOpen: Close closes every pool and refuses new ones
// until Open; a suspension ends event streams and a reactivation lets
// them start again.
func TestLifecycleCloseAndOpen(t *testing.T) {
	lc, b, _ := newLifecycle(t)
	p, err := lc.Pools().Pool("a")
	if err != nil {
		t.Fatal(err)
	}
	live := p.Subscribe(0, 0)
	lc.TenantStatusChanged("a", store.StatusSuspended)
	if err := live.Err(); !errors.Is(err, ErrSuspended) {
		t.Fatalf("a stream on suspension: %v, want ErrSuspended", err)
	}
	if err := p.Subscribe(0, 0).Err(); !errors.Is(err, ErrSuspended) {
		t.Fatalf("Subscribe while suspended: %v, want ErrSuspended", err)
	}
	lc.TenantStatusChanged("a", store.StatusActive)
	if err := p.Subscribe(0, 0).Err(); err != nil {
		t.Fatalf("Subscribe after reactivation: %v", err)
	}
	if _, _, err := p.Register([]pool.Spec{{ID: "r1"}}); err != nil {
		t.Fatal(err)
	}
	why := errors.New("stepped down")
	lc.Close(why)
	if _, err := lc.Pools().Pool("a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Pool after Close = %v, want ErrClosed", err)
	}
	if u := b.Usage("a"); u.Of(budget.Resources) != 0 {
		t.Fatalf("budget still holds %d resources after Close", u.Of(budget.Resources))
	}
	lc.Open()
	if _, err := lc.Pools().Pool("a"); err != nil {
		t.Fatalf("Pool after Open = %v", err)
	}
	// State restored into a new pool (the checkpointer's Admit with a
	// fill) is accounted to the tenant's budget before the pool is
	// published.
	src, err := pool.New(pool.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Register([]pool.Spec{{ID: "r1"}, {ID: "r2"}, {ID: "r3"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"x", "y"} {
		if _, err := src.Report(pool.Report{Resource: "r1", Context: c, Outcome: pool.Success}); err != nil {
			t.Fatal(err)
		}
	}
	units, cells := src.Charge()
	err = lc.Pools().Admit("b", func(p *pool.Pool) error {
		if u := b.Usage("b"); u.Of(budget.Resources) != 0 {
			t.Errorf("budget of b holds %d resources before the restore", u.Of(budget.Resources))
		}
		return p.Restore(src.Snapshot())
	})
	if err != nil {
		t.Fatal(err)
	}
	if u := b.Usage("b"); u.Of(budget.Resources) != int64(units) || u.Of(budget.Cells) != int64(cells) || units != 3 || cells == 0 {
		t.Fatalf("restored pool accounted %d resources and %d cells, want its charge %d and %d", u.Of(budget.Resources), u.Of(budget.Cells), units, cells)
	}
}

// noLimits is a store with no tenant and no stored limits.
type noLimits struct{}

func (noLimits) ListTenants(context.Context, store.TenantFilter) ([]store.Tenant, error) {
	return nil, nil
}
func (noLimits) GetLimits(context.Context, string) (store.Limits, error) { return store.Limits{}, nil }
func (noLimits) GetTenant(_ context.Context, id string) (store.Tenant, error) {
	return store.Tenant{}, fmt.Errorf("tenant %q: %w", id, store.ErrNotFound)
}
