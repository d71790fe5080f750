// Package audit writes the data plane's audit trail: registrations and
// deregistrations, and the quarantines and recoveries that pools report as
// events. Entries are queued and written to the store in the background so
// that the data plane never waits for the database; a full queue drops the
// entry and counts it.
package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// Appender is what the writer needs from the store.
type Appender interface {
	AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error)
}

// Writer queues audit entries and writes them in order. Safe for concurrent
// use. Run must be running for entries to be written.
type Writer struct {
	store Appender
	log   *slog.Logger
	queue chan store.AuditEntry

	dropped prometheus.Counter
	failed  prometheus.Counter

	wg sync.WaitGroup // watchers
}

// New returns a writer with a queue of size entries, registering its
// metrics on reg (nil: none).
func New(st Appender, size int, reg prometheus.Registerer, log *slog.Logger) (*Writer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{
		store: st, log: log.With("component", "audit"), queue: make(chan store.AuditEntry, size),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "repool_audit_dropped_total", Help: "Audit entries dropped because the queue was full."}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "repool_audit_write_failures_total", Help: "Audit entries the store refused."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{w.dropped, w.failed} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// Record queues an entry without blocking.
func (w *Writer) Record(e store.AuditEntry) {
	select {
	case w.queue <- e:
	default:
		w.dropped.Inc()
	}
}

// Run writes queued entries until ctx ends, then writes what is still
// queued (bounded by drain) and returns.
func (w *Writer) Run(ctx context.Context, drain time.Duration) {
	for {
		select {
		case e := <-w.queue:
			w.write(ctx, e)
		case <-ctx.Done():
			w.wg.Wait()
			dctx, cancel := context.WithTimeout(context.Background(), drain)
			defer cancel()
			for {
				select {
				case e := <-w.queue:
					w.write(dctx, e)
				default:
					return
				}
			}
		}
	}
}

func (w *Writer) write(ctx context.Context, e store.AuditEntry) {
	if _, err := w.store.AppendAudit(ctx, e); err != nil && !errors.Is(err, store.ErrNotFound) {
		w.failed.Inc()
		w.log.Error("audit entry not written", "tenant", e.TenantID, "action", e.Action, "err", err)
	}
}

// Watch records the pool's quarantines, recoveries, retirements and
// quarantines ended by the share cap for tenant until ctx
// ends. If it falls behind and its subscription is cut, it resubscribes
// from where it was; events lost meanwhile are recorded as a gap.
func (w *Writer) Watch(ctx context.Context, tenant string, p *pool.Pool) {
	kinds := pool.KindsOf(pool.EventBlocked, pool.EventRecovered, pool.EventRetired, pool.EventCapped)
	// The first subscription is made before Watch returns, so no event of
	// the pool's first requests is missed.
	sub := p.Subscribe(kinds, 0)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		var after uint64
		for first := true; ctx.Err() == nil; first = false {
			if !first {
				sub = p.Subscribe(kinds, after)
			}
			after = w.drain(ctx, tenant, sub, after)
			why := sub.Err()
			sub.Close()
			if !errors.Is(why, pool.ErrSlowSubscriber) {
				return // ctx ended, or the pool closed its subscriptions
			}
		}
	}()
}

func (w *Writer) drain(ctx context.Context, tenant string, sub *pool.Subscription, after uint64) uint64 {
	for {
		select {
		case <-ctx.Done():
			return after
		case e, ok := <-sub.C:
			if !ok {
				return after
			}
			if e.Seq > 0 {
				after = e.Seq
			}
			var action string
			switch e.Kind {
			case pool.EventBlocked:
				action = "resource.blocked"
			case pool.EventRecovered:
				action = "resource.recovered"
			case pool.EventRetired:
				action = "resource.retired"
			case pool.EventCapped:
				action = "resource.quarantine_capped"
			case pool.EventGap:
				action = "audit.gap"
			}
			target := e.Resource
			if e.Context != "" {
				target += "/" + e.Context
			}
			w.Record(store.AuditEntry{TenantID: tenant, At: e.At, Actor: "pool", Action: action, Target: target, Detail: e.Detail})
		}
	}
}
