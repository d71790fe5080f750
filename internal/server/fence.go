package server

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/store"
)

// watchedStore wraps the store and watches the server's writes: it counts
// the writes it refused because this server's epoch was no longer current
// (a deposed server that kept trying to write; each such write changed
// nothing), and reports every write that failed to the write health
// (writeHealth), which tells a store that cannot take writes from one
// that refused a write for cause. Reads pass through.
type watchedStore struct {
	store.Store
	refused prometheus.Counter
	health  *writeHealth // nil until set: the writes of New before it are the caller's to judge
}

func newWatchedStore(st store.Store, reg prometheus.Registerer) *watchedStore {
	f := &watchedStore{Store: st, refused: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "repool_store_fenced_writes_total",
		Help: "Writes refused because a successor raised the epoch (this server had been deposed).",
	})}
	reg.MustRegister(f.refused)
	return f
}

// wrote records the outcome of one write.
func (f *watchedStore) wrote(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrFenced) {
		f.refused.Inc()
	}
	if f.health != nil {
		f.health.failed(err)
	}
	return err
}

// ProbeWrite implements store.WriteProber when the wrapped store does.
func (f *watchedStore) ProbeWrite(ctx context.Context) error {
	p, ok := f.Store.(store.WriteProber)
	if !ok {
		return nil
	}
	return p.ProbeWrite(ctx)
}

func (f *watchedStore) SaveCheckpoint(ctx context.Context, tenant string, cp store.Checkpoint) error {
	return f.wrote(f.Store.SaveCheckpoint(ctx, tenant, cp))
}

func (f *watchedStore) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	out, err := f.Store.AppendAudit(ctx, e)
	return out, f.wrote(err)
}

func (f *watchedStore) WriteLeases(ctx context.Context, tenant string, put []store.LeaseRow, del []uint64) error {
	return f.wrote(f.Store.WriteLeases(ctx, tenant, put, del))
}

func (f *watchedStore) PruneLeases(ctx context.Context, before int64) error {
	return f.wrote(f.Store.PruneLeases(ctx, before))
}

func (f *watchedStore) PruneAudit(ctx context.Context, tenant string, p store.AuditPrune) (int64, error) {
	n, err := f.Store.PruneAudit(ctx, tenant, p)
	return n, f.wrote(err)
}

func (f *watchedStore) PruneRevokedKeys(ctx context.Context, tenant string, before time.Time, limit int) (int64, error) {
	n, err := f.Store.PruneRevokedKeys(ctx, tenant, before, limit)
	return n, f.wrote(err)
}

func (f *watchedStore) CreateTenant(ctx context.Context, t store.Tenant) (store.Tenant, error) {
	out, err := f.Store.CreateTenant(ctx, t)
	return out, f.wrote(err)
}

func (f *watchedStore) SetTenantStatus(ctx context.Context, id string, from, to store.Status) (store.Tenant, error) {
	out, err := f.Store.SetTenantStatus(ctx, id, from, to)
	return out, f.wrote(err)
}

func (f *watchedStore) DeleteTenant(ctx context.Context, id string) error {
	return f.wrote(f.Store.DeleteTenant(ctx, id))
}

func (f *watchedStore) PutLimits(ctx context.Context, tenant string, l store.Limits) error {
	return f.wrote(f.Store.PutLimits(ctx, tenant, l))
}

func (f *watchedStore) CreateKey(ctx context.Context, k store.Key) (store.Key, error) {
	out, err := f.Store.CreateKey(ctx, k)
	return out, f.wrote(err)
}

func (f *watchedStore) RevokeKey(ctx context.Context, tenant, keyID string) error {
	return f.wrote(f.Store.RevokeKey(ctx, tenant, keyID))
}
