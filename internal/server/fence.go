package server

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/store"
)

// fenceCounter wraps an HA store and counts the writes the store refused
// because this server's epoch was no longer current: a deposed leader that
// kept trying to write. Each such write changed nothing.
type fenceCounter struct {
	store.Store
	ha      store.HA
	refused prometheus.Counter
}

func newFenceCounter(st store.Store, h store.HA, reg prometheus.Registerer) *fenceCounter {
	f := &fenceCounter{Store: st, ha: h, refused: prometheus.NewCounter(prometheus.CounterOpts{
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

func (f *fenceCounter) SetFence(epoch uint32) { f.ha.SetFence(epoch) }

func (f *fenceCounter) DSN() string { return f.ha.DSN() }

func (f *fenceCounter) WriteLeases(ctx context.Context, tenant string, put []store.LeaseRow, del []uint64) error {
	return f.count(f.ha.WriteLeases(ctx, tenant, put, del))
}

func (f *fenceCounter) LoadLeases(ctx context.Context, tenant string) ([]store.LeaseRow, error) {
	return f.ha.LoadLeases(ctx, tenant)
}

func (f *fenceCounter) PruneLeases(ctx context.Context, before int64) error {
	return f.count(f.ha.PruneLeases(ctx, before))
}

var _ store.HA = (*fenceCounter)(nil)
