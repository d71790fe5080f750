// Package journal makes the active server's leases durable before clients
// hear of them, with group commit: lease changes that arrive while a commit
// is in flight are written together in the next one, so a busy server pays
// one database transaction per batch and tenant, not per call, and an idle
// one waits for no timer. The tenants of a batch are written concurrently
// (a few at a time), so a waiter pays for one transaction, not for one per
// tenant ahead of it in the batch.
package journal

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// tenantsInFlight bounds the tenants of one batch whose transactions run at
// once. Each holds a store connection for its transaction; the bound keeps
// a batch that spans many tenants from taking every connection of the
// store's pool (pgxpool's default is the greater of 4 and the number of
// CPUs) from the checkpointer and the control plane.
const tenantsInFlight = 4

// A batch smaller than lingerBelow after the queue is drained waits for up
// to maxYields yields of the writer's goroutine, each while the one before
// brought more changes (see gather).
const (
	lingerBelow = 64
	maxYields   = 4
)

// Store writes lease changes of one tenant in one transaction. The Writer
// calls it concurrently for different tenants, never for the same tenant.
type Store interface {
	WriteLeases(ctx context.Context, tenantID string, put []store.LeaseRow, del []uint64) error
}

// ErrClosed is returned for changes offered after the writer stopped.
var ErrClosed = errors.New("journal: closed")

// op is one call's change: a lease put, a lease removed (del, not 0), or
// both, as a release that leases the next resource makes.
type op struct {
	tenant string
	put    *store.LeaseRow
	del    uint64
	done   chan error
}

// Writer batches lease changes. Create it with New and Start it; it is safe
// for concurrent use.
type Writer struct {
	st      Store
	timeout time.Duration
	ops     chan op

	mu     sync.RWMutex
	closed bool

	// dones recycles the channels that answer a change: one is put back
	// only once its answer was taken, so a recycled one is always empty.
	dones sync.Pool

	batches prometheus.Histogram
	commits prometheus.Histogram
}

// New returns a writer whose commits each get timeout.
func New(st Store, timeout time.Duration, reg prometheus.Registerer) (*Writer, error) {
	w := &Writer{st: st, timeout: timeout, ops: make(chan op, 4096),
		dones: sync.Pool{New: func() any { return make(chan error, 1) }},
		batches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "repool_lease_journal_batch_size", Help: "Lease changes written per journal commit.",
			// 1 to 4096, the queue's length: a batch is at most what the
			// queue holds, and an alert on its p99 needs buckets up there.
			Buckets: prometheus.ExponentialBuckets(1, 2, 13),
		}),
		commits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "repool_lease_journal_commit_seconds",
			Help: "Time to write one journal batch (every tenant's transaction of it), which Acquire, Renew and Release wait for.",
			// 0.5 ms to 8 s: a local commit without fsync, to the timeout
			// of a commit (5 s).
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15),
		})}
	if reg != nil {
		for _, c := range []prometheus.Collector{w.batches, w.commits} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// Leased records a lease granted or renewed and returns once it is
// committed (or ctx ends).
func (w *Writer) Leased(ctx context.Context, tenant string, l pool.Lease) error {
	row := store.LeaseRow{ID: l.ID, ResourceID: l.Resource, Context: l.Context, Token: l.Token, ExpiresAt: l.ExpiresAt.UnixNano()}
	return w.submit(ctx, op{tenant: tenant, put: &row})
}

// Ended records a lease released.
func (w *Writer) Ended(ctx context.Context, tenant string, leaseID uint64) error {
	return w.submit(ctx, op{tenant: tenant, del: leaseID})
}

// Swapped records a lease released and the next one granted, as one change
// of one commit: a release that leases the next resource waits for one
// commit, not two.
func (w *Writer) Swapped(ctx context.Context, tenant string, ended uint64, next pool.Lease) error {
	row := store.LeaseRow{ID: next.ID, ResourceID: next.Resource, Context: next.Context, Token: next.Token, ExpiresAt: next.ExpiresAt.UnixNano()}
	return w.submit(ctx, op{tenant: tenant, put: &row, del: ended})
}

func (w *Writer) submit(ctx context.Context, o op) error {
	o.done = w.dones.Get().(chan error)
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrClosed
	}
	select {
	case w.ops <- o:
		w.mu.RUnlock()
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	select {
	case err := <-o.done:
		w.dones.Put(o.done)
		return err
	case <-ctx.Done():
		return ctx.Err() // the writer still answers into o.done: not recycled
	}
}

// Start opens the writer and commits batches on a goroutine until ctx
// ends; changes still queued then fail with ErrClosed, as do changes offered
// until the next Start. A server starts it once per term as the active
// server, before it serves; terms must not overlap. wait returns once the
// writer has stopped.
func (w *Writer) Start(ctx context.Context) (wait func()) {
	w.mu.Lock()
	w.closed = false
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	return func() { <-done }
}

func (w *Writer) run(ctx context.Context) {
	var batch []op
	for {
		select {
		case <-ctx.Done():
			w.stop()
			return
		case first := <-w.ops:
			batch = w.gather(append(batch[:0], first))
			w.commit(ctx, batch)
			clear(batch) // no references to answered calls
		}
	}
}

// maxBatch bounds the changes of one commit.
const maxBatch = 1024

// gather adds the changes already queued to batch. When that leaves it
// small, it lets the goroutines that are ready run once first (the calls
// in flight on other cores or behind this one reach the queue within
// microseconds) and takes what they queued: on a busy server one write
// then carries many lease changes instead of one each, and a lone call
// pays only for a yield with no one to yield to.
func (w *Writer) gather(batch []op) []op {
	drain := func() int {
		n := 0
		for len(batch) < maxBatch {
			select {
			case o := <-w.ops:
				batch = append(batch, o)
				n++
			default:
				return n
			}
		}
		return n
	}
	drain()
	for yields := 0; len(batch) < lingerBelow && yields < maxYields; yields++ {
		runtime.Gosched()
		if drain() == 0 {
			break
		}
	}
	return batch
}

// stop refuses new changes and fails the queued ones. Senders blocked on a
// full queue hold the read lock, so the queue is drained while the write
// lock is awaited; once it is held no sender is mid-send.
func (w *Writer) stop() {
	draining, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case o := <-w.ops:
				o.done <- ErrClosed
			case <-draining:
				return
			}
		}
	}()
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	close(draining)
	<-drained
	for {
		select {
		case o := <-w.ops:
			o.done <- ErrClosed
		default:
			return
		}
	}
}

// commit writes a batch, one transaction per tenant, up to
// tenantsInFlight of them at once, and answers each waiter with the outcome
// of its tenant's transaction. It returns once every transaction has ended,
// so the changes of one tenant are written batch after batch, in order.
func (w *Writer) commit(ctx context.Context, batch []op) {
	w.batches.Observe(float64(len(batch)))
	start := time.Now()
	defer func() { w.commits.Observe(time.Since(start).Seconds()) }()
	if oneTenant(batch) {
		// The common case: no map to build, no goroutine to start and
		// wait for.
		w.commitTenant(ctx, batch[0].tenant, batch)
		return
	}
	byTenant := map[string][]op{}
	for _, o := range batch {
		byTenant[o.tenant] = append(byTenant[o.tenant], o)
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, tenantsInFlight)
	for tenant, ops := range byTenant {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			w.commitTenant(ctx, tenant, ops)
		})
	}
	wg.Wait()
}

func oneTenant(batch []op) bool {
	for _, o := range batch[1:] {
		if o.tenant != batch[0].tenant {
			return false
		}
	}
	return true
}

// commitTenant writes one tenant's changes of a batch in one transaction
// and answers their waiters.
func (w *Writer) commitTenant(ctx context.Context, tenant string, ops []op) {
	// The last change of a lease in the batch wins.
	final := make(map[uint64]*store.LeaseRow, len(ops))
	order := make([]uint64, 0, len(ops))
	change := func(id uint64, row *store.LeaseRow) {
		if _, seen := final[id]; !seen {
			order = append(order, id)
		}
		final[id] = row
	}
	for _, o := range ops {
		if o.del != 0 {
			change(o.del, nil)
		}
		if o.put != nil {
			change(o.put.ID, o.put)
		}
	}
	var put []store.LeaseRow
	var del []uint64
	for _, id := range order {
		if row := final[id]; row != nil {
			put = append(put, *row)
		} else {
			del = append(del, id)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, w.timeout)
	err := w.st.WriteLeases(cctx, tenant, put, del)
	cancel()
	for _, o := range ops {
		o.done <- err
	}
}
