// Package retention keeps a store bounded over time: it deletes the audit
// entries that are older than the retention age or beyond the most kept
// per tenant, and API keys revoked longer ago than their retention age, a
// batch per statement with a pause between batches, on the active
// server's clock and beside its own writes (never on a call's path). Each
// round also reads the store's size and audit rows for their gauges.
//
// What else a store holds is bounded where it is written: the lease
// journal is compacted by the server every checkpoint interval
// (store.Store PruneLeases), a tenant's checkpoint rows are its pool's
// current state (one row per resource and cell, one metadata row; a
// removal deletes its rows), and a deleted tenant's rows are deleted with
// it, its tombstone kept so that its id is never reused.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
)

// Store is what retention needs from the store.
type Store interface {
	ListTenants(ctx context.Context, f store.TenantFilter) ([]store.Tenant, error)
	PruneAudit(ctx context.Context, tenantID string, p store.AuditPrune) (int64, error)
	AuditCut(ctx context.Context, tenantID string, keep int64) (int64, error)
	PruneRevokedKeys(ctx context.Context, tenantID string, before time.Time, limit int) (int64, error)
	Usage(ctx context.Context) (store.Usage, error)
}

// Policy is what is kept. A zero or negative bound keeps everything by
// that rule.
type Policy struct {
	// AuditMaxAge: audit entries older than this go.
	AuditMaxAge time.Duration
	// AuditMaxRows: a tenant keeps at most its newest AuditMaxRows
	// entries.
	AuditMaxRows int64
	// RevokedKeyMaxAge: API keys revoked longer ago than this go.
	RevokedKeyMaxAge time.Duration
	// Batch is the most rows one statement deletes, 1..store.MaxPruneBatch.
	// Default DefaultBatch.
	Batch int
	// Pause is the wait after each statement that deleted rows, so that a
	// large backlog is deleted a batch at a time while the server's own
	// writes go on between. Default DefaultPause.
	Pause time.Duration
}

// The defaults of a Policy's batch and pause.
const (
	DefaultBatch = 1000
	DefaultPause = 10 * time.Millisecond
)

// Config wires a Pruner. Store is required.
type Config struct {
	Store  Store
	Policy Policy
	// Group, when set, restricts the rounds to the tenants placed on that
	// group (tenant-sharded groups: each group's active server prunes its
	// own tenants); empty prunes every tenant.
	Group string
	// Clock gives the time retention ages are measured from and paces
	// the rounds and pauses. Nil means clock.Real{}.
	Clock clock.Clock
	// Metrics registers the store's size and retention metrics; nil
	// means none.
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// Pruner runs retention rounds. Rounds are meant to run one at a time
// (Run's loop); Round may be called beside it.
type Pruner struct {
	cfg Config
	log *slog.Logger

	size, auditRows, lastSuccess prometheus.Gauge
	pruned                       *prometheus.CounterVec
	failures                     prometheus.Counter
}

// New returns a Pruner for cfg.
func New(cfg Config) (*Pruner, error) {
	if cfg.Store == nil {
		return nil, errors.New("retention: no store")
	}
	if cfg.Policy.Batch == 0 {
		cfg.Policy.Batch = DefaultBatch
	}
	if cfg.Policy.Pause == 0 {
		cfg.Policy.Pause = DefaultPause
	}
	if err := store.ValidatePruneLimit(cfg.Policy.Batch); err != nil {
		return nil, fmt.Errorf("retention: batch: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p := &Pruner{cfg: cfg, log: cfg.Log.With("component", "retention"),
		size: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "repool_store_size_bytes",
			Help: "The store's size: a SQLite store's files on disk, a PostgreSQL store's tables with their indexes (read by the active server's retention rounds).",
		}),
		auditRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "repool_store_audit_rows",
			Help: "Audit entries in the store, of every tenant (read by the active server's retention rounds).",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "repool_retention_last_success_timestamp_seconds",
			Help: "End of the last retention round that pruned every tenant and read the store's size.",
		}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_retention_pruned_rows_total",
			Help: "Rows deleted by retention, by kind (audit, revoked_keys).",
		}, []string{"kind"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repool_retention_failures_total",
			Help: "Retention statements (a tenant's prune, the store's size) that failed; the next round tries again.",
		}),
	}
	p.pruned.WithLabelValues("audit")
	p.pruned.WithLabelValues("revoked_keys")
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{p.size, p.auditRows, p.lastSuccess, p.pruned, p.failures} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// Run runs a round at once and then one every interval until ctx ends.
func (p *Pruner) Run(ctx context.Context, interval time.Duration) {
	p.round(ctx)
	clock.Every(ctx, p.cfg.Clock, interval, func(ctx context.Context) bool {
		p.round(ctx)
		return true
	})
}

func (p *Pruner) round(ctx context.Context) {
	if _, err := p.Round(ctx); err != nil && ctx.Err() == nil {
		p.log.Warn("retention round incomplete; the next round tries again", "err", err)
	}
}

// Result is what a round did.
type Result struct {
	// Audit and RevokedKeys are the rows deleted.
	Audit, RevokedKeys int64
	// Usage is the store's, read at the end of the round.
	Usage store.Usage
}

// Round prunes every tenant (of Config.Group) by the policy, then reads
// the store's usage into the gauges. A tenant whose prune fails is logged
// and counted and the round goes on with the others; the error returned
// joins every failure.
func (p *Pruner) Round(ctx context.Context) (Result, error) {
	var res Result
	tenants, err := p.cfg.Store.ListTenants(ctx, store.TenantFilter{Group: p.cfg.Group})
	if err != nil {
		p.failures.Inc()
		return res, fmt.Errorf("retention: listing tenants: %w", err)
	}
	var errs []error
	for _, t := range tenants {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		a, k, err := p.tenant(ctx, t.ID)
		res.Audit += a
		res.RevokedKeys += k
		if err != nil && ctx.Err() == nil {
			p.failures.Inc()
			errs = append(errs, err)
		}
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if res.Usage, err = p.cfg.Store.Usage(ctx); err != nil {
		p.failures.Inc()
		errs = append(errs, fmt.Errorf("retention: %w", err))
	} else {
		p.size.Set(float64(res.Usage.Bytes))
		p.auditRows.Set(float64(res.Usage.AuditRows))
	}
	if len(errs) == 0 {
		p.lastSuccess.Set(float64(p.cfg.Clock.Now().UnixNano()) / 1e9)
	}
	if res.Audit+res.RevokedKeys > 0 {
		p.log.Info("retention round", "tenants", len(tenants), "audit_deleted", res.Audit, "revoked_keys_deleted", res.RevokedKeys,
			"store_bytes", res.Usage.Bytes, "audit_rows", res.Usage.AuditRows)
	}
	return res, errors.Join(errs...)
}

// tenant prunes one tenant's audit entries and revoked keys, a batch at a
// time, and returns how many of each it deleted.
func (p *Pruner) tenant(ctx context.Context, tenant string) (audit, keys int64, err error) {
	pol := p.cfg.Policy
	now := p.cfg.Clock.Now()
	prune := store.AuditPrune{Limit: pol.Batch}
	if pol.AuditMaxAge > 0 {
		prune.Before = now.Add(-pol.AuditMaxAge)
	}
	if pol.AuditMaxRows > 0 {
		if prune.ThroughID, err = p.cfg.Store.AuditCut(ctx, tenant, pol.AuditMaxRows); err != nil {
			return 0, 0, fmt.Errorf("retention: tenant %s: %w", tenant, err)
		}
	}
	if !prune.Before.IsZero() || prune.ThroughID > 0 {
		if audit, err = p.batches(ctx, "audit", func() (int64, error) { return p.cfg.Store.PruneAudit(ctx, tenant, prune) }); err != nil {
			return audit, 0, fmt.Errorf("retention: tenant %s: %w", tenant, err)
		}
	}
	if pol.RevokedKeyMaxAge > 0 {
		before := now.Add(-pol.RevokedKeyMaxAge)
		if keys, err = p.batches(ctx, "revoked_keys", func() (int64, error) {
			return p.cfg.Store.PruneRevokedKeys(ctx, tenant, before, pol.Batch)
		}); err != nil {
			return audit, keys, fmt.Errorf("retention: tenant %s: %w", tenant, err)
		}
	}
	return audit, keys, nil
}

// batches calls prune until it deletes less than a batch, pausing after
// each call that deleted rows, and counts the rows under kind.
func (p *Pruner) batches(ctx context.Context, kind string, prune func() (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := prune()
		total += n
		p.pruned.WithLabelValues(kind).Add(float64(n))
		if err != nil {
			return total, err
		}
		if n > 0 {
			if err := clock.Sleep(ctx, p.cfg.Clock, p.cfg.Policy.Pause); err != nil {
				return total, err
			}
		}
		if n < int64(p.cfg.Policy.Batch) {
			return total, nil
		}
	}
}
