package server

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/store"
)

// fenceCounter wraps the store and counts the writes it refused because
// this server's epoch was no longer current: a deposed server that kept
// trying to write. Each such write changed nothing.
type fenceCounter struct {
	store.Store
	refused prometheus.Counter
}

func newFenceCounter(st store.Store, reg prometheus.Registerer) *fenceCounter {
	f := &fenceCounter{Store: st, refused: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "repool_store_fenced_writes_total",
		Help: "Writes refused because a successor raised the epoch (this server had been deposed).",
	})}
	reg.MustRegister(f.refused)
	return f
}

func (f *fenceCounter) count(err error) error {
	if errors.Is(err, store.ErrFenced) {
		f.refused.Inc()
	}
	return err
}

func (f *fenceCounter) SaveCheckpoint(ctx context.Context, tenant string, cp store.Checkpoint) error {
	return f.count(f.Store.SaveCheckpoint(ctx, tenant, cp))
}

func (f *fenceCounter) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	out, err := f.Store.AppendAudit(ctx, e)
	return out, f.count(err)
}

func (f *fenceCounter) WriteLeases(ctx context.Context, tenant string, put []store.LeaseRow, del []uint64) error {
	return f.count(f.Store.WriteLeases(ctx, tenant, put, del))
}

func (f *fenceCounter) PruneLeases(ctx context.Context, before int64) error {
	return f.count(f.Store.PruneLeases(ctx, before))
}
