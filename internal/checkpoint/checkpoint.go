// Package checkpoint persists every tenant's pool to the store and restores
// them at start. Each tenant is written in its own transaction that touches
// only its rows, and failures are isolated per tenant: one tenant whose rows
// are corrupt or whose write fails is logged, counted and retried, and never
// stops the others.
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// Store is what checkpoints need from the store.
type Store interface {
	ListTenants(ctx context.Context, f store.TenantFilter) ([]store.Tenant, error)
	SaveCheckpoint(ctx context.Context, tenantID string, cp store.Checkpoint) error
	LoadCheckpoint(ctx context.Context, tenantID string) (store.PoolState, error)
}

// Pools holds the tenants' pools. Admit places a tenant and, with fill,
// makes its pool, fills it and only then publishes it
// (tenants.Registry.Admit).
type Pools interface {
	Admit(tenant string, fill func(*pool.Pool) error) error
	Pool(tenant string) (*pool.Pool, error)
	Lookup(tenant string) (*pool.Pool, bool)
	Tenants() []string
}

// Config wires a Checkpointer. Store and Pools are required.
type Config struct {
	Store Store
	Pools Pools
	// Group, when set, restricts RestoreAll to the tenants placed on that
	// group (tenant-sharded groups); empty restores every tenant.
	Group string
	// Leases, when set, returns a tenant's journaled leases, restored with
	// its pool so that leases survive a failover.
	Leases func(ctx context.Context, tenant string) ([]store.LeaseRow, error)
	// TenantTimeout bounds one tenant's checkpoint in a round, so that a
	// tenant whose write hangs (a lock wait, a stalled connection) fails
	// alone instead of holding up every other tenant's. Default 30s (a full
	// checkpoint of 100,000 resources and 500,000 cells takes about 2s).
	TenantTimeout time.Duration
	// Metrics registers the checkpoint metrics; nil means none.
	Metrics prometheus.Registerer
	Clock   clock.Clock
	Log     *slog.Logger
}

// Checkpointer writes and restores pools. Safe for concurrent use; rounds
// are serialized, and the writes of one tenant are serialized with each
// other (a round's and Persist's), never with another tenant's.
type Checkpointer struct {
	cfg Config
	log *slog.Logger

	round    sync.Mutex             // one round at a time
	mu       sync.Mutex             // guards needFull, writing and groups
	needFull map[string]bool        // tenants whose next checkpoint must be full
	savedHWM map[string]uint64      // per tenant: the fencing high-water mark the store holds
	writing  map[string]*sync.Mutex // per tenant ever written: one write at a time
	groups   map[string]*group      // per tenant that persisted or synced: its group commit

	lastFullAt atomic.Int64 // the last round in which every tenant succeeded, Unix ns; 0: none

	restoreFailures prometheus.Counter
	failures        *prometheus.CounterVec
	lastFull        prometheus.Gauge
	duration        prometheus.Histogram
}

// New returns a Checkpointer, or an error naming the missing field.
func New(cfg Config) (*Checkpointer, error) {
	if cfg.Store == nil || cfg.Pools == nil {
		return nil, errors.New("checkpoint: Config.Store and Config.Pools are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.TenantTimeout <= 0 {
		cfg.TenantTimeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	c := &Checkpointer{
		cfg: cfg, log: cfg.Log.With("component", "checkpoint"), needFull: map[string]bool{}, savedHWM: map[string]uint64{}, writing: map[string]*sync.Mutex{}, groups: map[string]*group{},
		restoreFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repool_restore_failures_total", Help: "Tenants skipped at restore because their rows are corrupt.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_checkpoint_failures_total", Help: "Failed tenant checkpoints.",
		}, []string{"tenant"}),
		lastFull: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "repool_checkpoint_last_full_success_timestamp_seconds",
			Help: "Time of the last checkpoint round in which every tenant succeeded.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "repool_checkpoint_round_seconds", Help: "Duration of checkpoint rounds.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
	}
	if cfg.Metrics != nil {
		for _, m := range []prometheus.Collector{c.restoreFailures, c.failures, c.lastFull, c.duration} {
			if err := cfg.Metrics.Register(m); err != nil {
				return nil, fmt.Errorf("checkpoint: registering metrics: %w", err)
			}
		}
	}
	return c, nil
}

// RestoreAll restores the pool of every tenant that is not deleted and
// returns how many were corrupt. A corrupt tenant (its rows fail validation:
// store.ErrCorrupt) is logged, counted in repool_restore_failures_total and
// skipped; its pool starts empty only when it is first used, and it is
// checkpointed in full from then on, so a corrupt tenant never blocks the
// others. Any other failure (the store unreachable, a timeout) is returned:
// skipping the tenant would let its first full checkpoint overwrite what is
// stored, so the caller must not serve.
func (c *Checkpointer) RestoreAll(ctx context.Context) (failed int, err error) {
	ts, err := c.cfg.Store.ListTenants(ctx, store.TenantFilter{Group: c.cfg.Group})
	if err != nil {
		return 0, fmt.Errorf("checkpoint: listing tenants: %w", err)
	}
	for _, t := range ts {
		if err := c.Restore(ctx, t.ID); err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				return failed, fmt.Errorf("checkpoint: restoring tenant %s: %w", t.ID, err)
			}
			failed++
			c.restoreFailures.Inc()
			c.log.Error("restore failed; tenant skipped", "tenant", t.ID, "err", err)
		}
	}
	return failed, nil
}

// Restore places tenant here and restores its stored state (checkpoint and
// journaled leases) into a new pool before any call can see it: what
// RestoreAll does for each tenant, and how a group's active server takes
// in a tenant moved to it. store.ErrCorrupt for a state the pool refuses.
func (c *Checkpointer) Restore(ctx context.Context, tenant string) error {
	st, err := c.cfg.Store.LoadCheckpoint(ctx, tenant)
	if err != nil {
		return err
	}
	var leases []store.LeaseRow
	if c.cfg.Leases != nil {
		if leases, err = c.cfg.Leases(ctx, tenant); err != nil {
			return err
		}
	}
	c.markFull(tenant)
	if !st.HasCheckpoint && len(leases) == 0 {
		return c.cfg.Pools.Admit(tenant, nil)
	}
	// A snapshot the pool refuses leaves the tenant without a pool (Admit
	// publishes none): a pool, even an empty one, would be checkpointed in
	// full by the next round, deleting the stored state an operator could
	// repair.
	snap := withLeases(toSnapshot(st), leases, c.cfg.Clock.Now())
	// The registry publishes the pool once it is filled (and its owner
	// has accounted its charge to the tenant's budget).
	err = c.cfg.Pools.Admit(tenant, func(p *pool.Pool) error {
		// Restore leaves the pool with no changes to write: it holds
		// exactly the stored state, and the next checkpoint (below: not a
		// full one) writes what changes from here.
		if err := p.Restore(snap); err != nil {
			return fmt.Errorf("%w: %v", store.ErrCorrupt, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.needFull[tenant] = false
	c.savedHWM[tenant] = st.FencingHWM
	c.mu.Unlock()
	return nil
}

func (c *Checkpointer) markFull(tenant string) {
	c.mu.Lock()
	c.needFull[tenant] = true
	c.mu.Unlock()
}

// Round checkpoints every tenant that has a pool: in full the first time
// and after a failure, incrementally otherwise. It returns the tenants that
// failed, joined.
func (c *Checkpointer) Round(ctx context.Context) error {
	c.round.Lock()
	defer c.round.Unlock()
	start := c.cfg.Clock.Now()
	var errs []error
	for _, tenant := range c.cfg.Pools.Tenants() {
		// The tenant's failure counter exists from its first round, at 0,
		// so that an alert on its increase sees the first failure too.
		failures := c.failures.WithLabelValues(tenant)
		tctx, cancel := context.WithTimeout(ctx, c.cfg.TenantTimeout)
		err := c.Save(tctx, tenant)
		cancel()
		if err != nil {
			failures.Inc()
			c.log.Error("checkpoint failed", "tenant", tenant, "err", err)
			errs = append(errs, fmt.Errorf("tenant %s: %w", tenant, err))
		}
	}
	end := c.cfg.Clock.Now()
	c.duration.Observe(end.Sub(start).Seconds())
	if len(errs) == 0 {
		c.lastFull.Set(float64(end.UnixNano()) / 1e9)
		c.lastFullAt.Store(end.UnixNano())
	}
	return errors.Join(errs...)
}

// LastFull returns when the last round in which every tenant succeeded
// ended (what repool_checkpoint_last_full_success_timestamp_seconds says),
// and false before the first such round.
func (c *Checkpointer) LastFull() (time.Time, bool) {
	ns := c.lastFullAt.Load()
	return time.Unix(0, ns), ns != 0
}

// tenantLock returns the mutex that serializes the tenant's writes.
func (c *Checkpointer) tenantLock(tenant string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.writing[tenant]
	if !ok {
		m = &sync.Mutex{}
		c.writing[tenant] = m
	}
	return m
}

// Save writes tenant's pool state now, in one fenced transaction: what
// changed since its last write, nothing if nothing did, or all of it when
// that is due (the first time, after a failure). A round saves every
// tenant; a server also saves one before handing it to another group. A
// tenant without a pool has nothing to write.
func (c *Checkpointer) Save(ctx context.Context, tenant string) error {
	l := c.tenantLock(tenant)
	l.Lock()
	defer l.Unlock()
	p, ok := c.cfg.Pools.Lookup(tenant)
	if !ok {
		return nil
	}
	c.mu.Lock()
	full, seen := c.needFull[tenant]
	c.mu.Unlock()
	var cp store.Checkpoint
	if full || !seen {
		cp = toCheckpoint(p.Snapshot())
	} else {
		cp = changesToCheckpoint(p.TakeChanges())
		c.mu.Lock()
		hwm, known := c.savedHWM[tenant]
		c.mu.Unlock()
		if known && cp.FencingHWM == hwm && len(cp.Resources) == 0 && len(cp.Cells) == 0 && len(cp.Removed) == 0 && len(cp.Bindings) == 0 && len(cp.Unbound) == 0 {
			// Nothing changed since the last write: an idle tenant costs
			// the store nothing.
			return nil
		}
	}
	if err := c.cfg.Store.SaveCheckpoint(ctx, tenant, cp); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil // deleted meanwhile: nothing to keep
		}
		// The change set is gone with the failed write: go full next time.
		c.markFull(tenant)
		return err
	}
	c.mu.Lock()
	c.needFull[tenant] = false
	c.savedHWM[tenant] = cp.FencingHWM
	c.mu.Unlock()
	return nil
}

// Persist writes resources created or removed now, without waiting for the
// next round, so that an acknowledged registration survives a crash or a
// failover. Calls of one tenant that arrive while its write is in flight
// are written together in the next one (group commit), the last change of
// each resource winning. Persist is serialized with the tenant's
// checkpoint in a round, so a full checkpoint taken before the change
// cannot overwrite it; other tenants' writes do not hold it up.
func (c *Checkpointer) Persist(ctx context.Context, tenant string, resources []pool.ResourceState, removed []string) error {
	rows := make([]store.ResourceRow, len(resources))
	for i, r := range resources {
		rows[i] = resourceRow(r)
	}
	return c.group(tenant).wait(ctx, change{resources: rows, removed: removed})
}

// Sync returns once everything the tenant's pool changed before the call
// (the statistics of the reports it has answered) is durable: it writes
// the tenant's changes, as a round does, in a write that starts after the
// call. Calls that arrive while a write is in flight share the next one,
// so a busy tenant pays one transaction per batch of callers.
func (c *Checkpointer) Sync(ctx context.Context, tenant string) error {
	return c.group(tenant).wait(ctx, change{sync: true})
}

// group returns the tenant's group commit, creating it on first use.
func (c *Checkpointer) group(tenant string) *group {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.groups[tenant]
	if !ok {
		g = &group{write: func(batch []change) error { return c.writeBatch(tenant, batch) }}
		c.groups[tenant] = g
	}
	return g
}

// writeBatch writes one batch of Persist and Sync callers: the
// registrations and removals (in call order, the last change of a resource
// winning), then, if any caller syncs, the pool's changes, each in its own
// transaction under the tenant's write lock.
func (c *Checkpointer) writeBatch(tenant string, batch []change) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.TenantTimeout)
	defer cancel()
	final := map[string]*store.ResourceRow{}
	var order []string
	syncing := false
	for _, ch := range batch {
		syncing = syncing || ch.sync
		for _, id := range ch.removed {
			if _, seen := final[id]; !seen {
				order = append(order, id)
			}
			final[id] = nil
		}
		for i := range ch.resources {
			r := &ch.resources[i]
			if _, seen := final[r.ID]; !seen {
				order = append(order, r.ID)
			}
			final[r.ID] = r
		}
	}
	if len(order) > 0 {
		var cp store.Checkpoint
		for _, id := range order {
			if r := final[id]; r != nil {
				cp.Resources = append(cp.Resources, *r)
			} else {
				cp.Removed = append(cp.Removed, id)
			}
		}
		if err := c.persist(ctx, tenant, cp); err != nil {
			return err
		}
	}
	if syncing {
		// After the registrations: the pool's changes are newer.
		if err := c.Save(ctx, tenant); err != nil {
			c.failures.WithLabelValues(tenant).Inc()
			return err
		}
	}
	return nil
}

// persist writes registrations and removals under the tenant's write lock.
func (c *Checkpointer) persist(ctx context.Context, tenant string, cp store.Checkpoint) error {
	l := c.tenantLock(tenant)
	l.Lock()
	defer l.Unlock()
	if p, ok := c.cfg.Pools.Lookup(tenant); ok {
		_, cp.FencingHWM = p.Epoch()
	}
	return c.cfg.Store.SaveCheckpoint(ctx, tenant, cp)
}

// SetLeases sets the source of journaled leases restored with each pool
// (see Config.Leases). Call it before RestoreAll.
func (c *Checkpointer) SetLeases(f func(ctx context.Context, tenant string) ([]store.LeaseRow, error)) {
	c.cfg.Leases = f
}

// Forget drops what the checkpointer knows of a deleted tenant.
func (c *Checkpointer) Forget(tenant string) {
	c.mu.Lock()
	delete(c.needFull, tenant)
	delete(c.savedHWM, tenant)
	delete(c.groups, tenant)
	c.mu.Unlock()
	c.failures.DeleteLabelValues(tenant)
}

// Run checkpoints every interval until ctx ends. The caller runs a final
// Round on shutdown.
func (c *Checkpointer) Run(ctx context.Context, interval time.Duration) {
	clock.Every(ctx, c.cfg.Clock, interval, func(ctx context.Context) bool {
		_ = c.Round(ctx) // failures are logged and counted per tenant
		return true
	})
}
