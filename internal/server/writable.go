package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/dataplane"
	"github.com/repool/repool/internal/store"
)

// writeHealth is the one owner of "this server can write its store". The
// store wrapper (watchedStore) reports every write of the server's state
// that failed because the store could not take it (writeFault), and the
// active server probes the store with a small write of its own every
// StoreProbeInterval (store.WriteProber), at once after such a failure.
// From a failed write until a probe succeeds the server is not ready:
// /readyz and /readyz/active answer 503 "store not writable: REASON", the
// gRPC health service NOT_SERVING, and data-plane calls whose change could
// not be written UNAVAILABLE with the same text. A real write that
// succeeds meanwhile does not end it: on a disk that is nearly full small
// writes succeed between the ones that fail, and readiness that followed
// them would flap; the probe asks for new blocks every time.
//
// Only the active server's writes count: a standby writes nothing, and a
// step-down forgets the state (reset).
type writeHealth struct {
	log     *slog.Logger
	clock   clock.Clock
	active  func() bool // failures count only while this returns true
	changed func()      // called after the state flips, outside the lock

	mu     sync.Mutex
	reason string    // why the last failed write failed; "" while writable
	since  time.Time // the first failure since the store was last writable
	kick   chan struct{}

	writable prometheus.Gauge
	failures prometheus.Counter
	probes   *prometheus.CounterVec
}

// probeTimeout bounds a probe write: a store that takes longer than this
// to write a row is not writable either.
const probeTimeout = 5 * time.Second

func newWriteHealth(log *slog.Logger, clk clock.Clock, reg prometheus.Registerer, active func() bool, changed func()) *writeHealth {
	h := &writeHealth{log: log, clock: clk, active: active, changed: changed, kick: make(chan struct{}, 1),
		writable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "repool_store_writable",
			Help: "1 while the active server's last store write succeeded (or a probe write since a failed one); 0 from a write that failed because the store could not take it until a probe write succeeds.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repool_store_write_failures_total",
			Help: "Writes of the active server (its own and its probes) that failed because the store could not take them (disk full or read-only, the database refusing writes or unreachable).",
		}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_store_write_probes_total",
			Help: "Probe writes of the active server, by result (ok, failed).",
		}, []string{"result"}),
	}
	h.writable.Set(1)
	reg.MustRegister(h.writable, h.failures, h.probes)
	return h
}

// err returns nil while the store is writable, and otherwise an error
// wrapping dataplane.ErrStoreNotWritable: "store not writable: REASON".
func (h *writeHealth) err() error {
	h.mu.Lock()
	reason := h.reason
	h.mu.Unlock()
	if reason == "" {
		return nil
	}
	return notWritable(reason)
}

func notWritable(reason string) error {
	return fmt.Errorf("%w: %s", dataplane.ErrStoreNotWritable, reason)
}

// failed records the outcome of a write that failed with err. It returns
// the error a client should be answered with: "store not writable:
// REASON" when err is a fault of the store (whether or not this server
// still counts it), or nil when err is not one (fenced, not found, a
// conflict, a deadline of the caller's).
func (h *writeHealth) failed(err error) error {
	reason, ok := writeFault(err)
	if !ok {
		return nil
	}
	h.mu.Lock()
	// Under the lock: a step-down clears the state (reset) after this
	// server stopped being active, so a failure is either counted before
	// that and cleared, or not counted.
	if !h.active() {
		h.mu.Unlock()
		return notWritable(reason)
	}
	h.failures.Inc()
	flipped := h.reason == ""
	h.reason = reason
	if flipped {
		h.since = h.clock.Now()
		h.writable.Set(0)
	}
	h.mu.Unlock()
	if flipped {
		h.log.Error("store not writable: not ready until a probe write succeeds", "reason", reason, "err", err)
		select {
		case h.kick <- struct{}{}: // probe at once: a passing fault ends now
		default:
		}
		h.changed()
	}
	return notWritable(reason)
}

// succeeded records a probe write that succeeded.
func (h *writeHealth) succeeded() {
	h.mu.Lock()
	flipped := h.reason != ""
	since := h.since
	h.reason = ""
	h.writable.Set(1)
	h.mu.Unlock()
	if flipped {
		h.log.Info("store writable again: a probe write succeeded", "not_writable_for", h.clock.Now().Sub(since))
		h.changed()
	}
}

// reset forgets a failure without a probe: a server that steps down writes
// nothing, and finds out again when it next becomes active.
func (h *writeHealth) reset() {
	h.mu.Lock()
	flipped := h.reason != ""
	h.reason = ""
	h.writable.Set(1)
	h.mu.Unlock()
	if flipped {
		h.changed()
	}
}

// run probes the store every interval, and at once after a write failed,
// until ctx ends. The active server runs it.
func (h *writeHealth) run(ctx context.Context, interval time.Duration, probe func(context.Context) error) {
	t := h.clock.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		case <-h.kick:
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := probe(pctx)
		timedOut := pctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			h.probes.WithLabelValues("ok").Inc()
			h.succeeded()
		case timedOut:
			h.probes.WithLabelValues("failed").Inc()
			h.failed(fmt.Errorf("%w: a probe write took over %v: %w", store.ErrUnavailable, probeTimeout, err))
		default:
			h.probes.WithLabelValues("failed").Inc()
			if h.failed(err) == nil {
				// Not a fault of the store's (a conflict, a lock taken):
				// it took the write as far as it could tell.
				h.log.Warn("probe write failed", "err", err)
			}
		}
	}
}

// writeFault says whether err, the error of a write, means that the store
// cannot take writes now, and why, in words that carry nothing of the
// store's location or credentials: a client is told them. The store
// classifies such errors as store.ErrUnavailable; of those, the ones that
// only say the write met another (a lock not granted in time, a
// serialization failure, a deadlock, SQLite busy) are not faults: the
// store takes writes. Neither is a deadline or cancellation, fenced
// writes, or a missing row.
func writeFault(err error) (reason string, ok bool) {
	if err == nil || !errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.Canceled) {
		return "", false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "55P03", "40001", "40P01": // lock not available, serialization failure, deadlock
			return "", false
		}
		return fmt.Sprintf("the database refused the write: %s (SQLSTATE %s)", pe.Message, pe.Code), true
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return "", false
		}
		return "the database refused the write: " + se.Error(), true
	}
	var ce *pgconn.ConnectError
	var ne *net.OpError // not net.Error: a syscall.Errno is one too
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, pgconn.ErrConnClosed) {
		return "the database cannot be reached", true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "the file system refused the write: " + errno.Error(), true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "the store did not take a write in time", true
	}
	return "the store is unavailable", true
}
