package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/dataplane"
	"github.com/repool/repool/internal/ha"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/postgres"
)

// haState is what a server in the active/standby group adds.
type haState struct {
	elector *ha.Elector

	mu   sync.Mutex
	term *ha.Term

	takeovers prometheus.Counter
	stepdowns prometheus.Counter
	isActive  prometheus.Gauge
	reachable prometheus.Gauge
}

func newHA(s *Server, cfg Config, raw store.Store) (*haState, error) {
	st, ok := raw.(store.HA)
	if !ok {
		return nil, errors.New("ha: the store does not support high availability (use postgres://)")
	}
	h := &haState{
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "repool_ha_takeovers_total", Help: "Times this server became active."}),
		stepdowns: prometheus.NewCounter(prometheus.CounterOpts{Name: "repool_ha_stepdowns_total", Help: "Times this server lost leadership."}),
		isActive:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "repool_ha_active", Help: "1 while this server is the active one."}),
		reachable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "repool_ha_database_reachable",
			Help: "1 while this server's leader election last reached the database (a wait for the lock or the leader's check answered), 0 after a connection, a wait or a check failed: on standbys too."}),
	}
	el, err := ha.New(ha.Config{DSN: st.DSN(), Name: cfg.HAName, Interval: cfg.HAInterval, SessionTimeout: cfg.HASessionTimeout,
		Clock: s.clock, Log: s.log, LockID: postgres.GroupLockID(cfg.Group),
		Reachable: func(ok bool) {
			if ok {
				h.reachable.Set(1)
			} else {
				h.reachable.Set(0)
			}
		}})
	if err != nil {
		return nil, err
	}
	h.elector = el
	// It opened the store, on that database, before it campaigns.
	h.reachable.Set(1)
	s.reg.MustRegister(h.takeovers, h.stepdowns, h.isActive, h.reachable)
	return h, nil
}

func (h *haState) resign() {
	h.mu.Lock()
	t := h.term
	h.term = nil
	h.mu.Unlock()
	if t != nil {
		t.Resign()
	}
}

// serve campaigns, serves while it leads, steps down when the term ends,
// and campaigns again, until ctx ends or a listener fails.
func (e *elected) serve(ctx context.Context, errc <-chan error) error {
	s := e.s
	for {
		campaign := make(chan *ha.Term, 1)
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			t, err := e.ha.elector.Campaign(cctx)
			if err == nil {
				campaign <- t
			}
			close(campaign)
		}()
		var term *ha.Term
		select {
		case err := <-errc:
			cancel()
			if t := <-campaign; t != nil {
				t.Resign()
			}
			return err
		case term = <-campaign:
			cancel()
		}
		if term == nil {
			return nil // ctx ended
		}
		e.ha.mu.Lock()
		e.ha.term = term
		e.ha.mu.Unlock()
		stop, err := e.takeOver(ctx, term)
		if err != nil {
			s.log.Error("takeover failed; resigning", "err", err)
			e.ha.resign()
			e.stepDown()
			if clock.Sleep(ctx, s.clock, time.Second) != nil {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			stop()
			return nil // Run checkpoints and resigns
		case err := <-errc:
			stop()
			return err
		case to := <-term.Switchover():
			e.switchOver(ctx, to, stop)
		case <-term.Done():
			// Stop serving first: stop waits for the journal's commit in
			// flight and the checkpoint loop, and until stepDown this
			// server would still answer as the active one.
			s.lead.Store(false)
			stop()
			e.ha.stepdowns.Inc()
			s.log.Error("stepped down", "why", term.Err())
			e.stepDown()
			// A server that just lost its session gives the others a
			// session timeout's head start, so leadership does not flap
			// back to a server whose database link is failing.
			if clock.Sleep(ctx, s.clock, s.cfg.HASessionTimeout) != nil {
				return nil
			}
		}
	}
}

// switchOver hands leadership to the standby named to, as a switchover
// asked (server switchover), and stands by again: it stops taking calls
// (they are refused as a standby refuses them, which a sidecar retries
// through HAProxy), ends the Leases streams between two calls, waits for
// the calls in progress (ShutdownGrace at most), stops the active loops
// (the journal's last commit), writes a final checkpoint and only then
// gives up the lock, which the candidate, waiting for it, takes at once
// (the other standbys leave it to the candidate: internal/ha). The same
// steps as a planned stop (Run), without stopping the process.
func (e *elected) switchOver(ctx context.Context, to string, stop func()) {
	s := e.s
	began := s.clock.Now()
	s.log.Info("switchover: handing leadership over", "to", to)
	s.lead.Store(false)
	s.syncHealth()
	s.closeStreams(fmt.Errorf("%w: switching over to %s", dataplane.ErrNotActive, to))
	s.drainCalls(ctx)
	drained := s.clock.Now()
	stop()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownGrace)
	if err := s.cp.Round(cctx); err != nil {
		s.log.Error("switchover: final checkpoint incomplete", "err", err)
	}
	cancel()
	checkpointed := s.clock.Now()
	e.ha.resign()
	e.ha.stepdowns.Inc()
	e.stepDown()
	e.gaveUp("switchover: gave up the leader lock", began, drained, checkpointed, "to", to)
}

// takeOver raises the epoch, fences the store with it, restores every
// tenant (leases from the journal included) and starts serving.
func (e *elected) takeOver(ctx context.Context, term *ha.Term) (stop func(), err error) {
	s := e.s
	epoch, err := s.store.BumpEpoch(ctx)
	if err != nil {
		return nil, fmt.Errorf("raising the epoch: %w", err)
	}
	s.store.SetFence(epoch)
	// The journal is open before the first call is served.
	lctx, cancel := context.WithCancel(s.life)
	journalDone := s.journal.Start(lctx)
	if err := s.becomeActive(ctx, epoch); err != nil {
		cancel()
		journalDone()
		return nil, err
	}
	e.ha.takeovers.Inc()
	e.ha.isActive.Set(1)
	loops := s.activeLoops(lctx)
	return func() { cancel(); loops(); journalDone() }, nil
}

// stepDown stops serving at once and forgets the in-memory state: the next
// takeover restores it from the store. The registry stays closed until
// then, so a call admitted before the step-down gets UNAVAILABLE instead of
// a new empty pool.
func (e *elected) stepDown() {
	s := e.s
	s.lead.Store(false)
	e.ha.isActive.Set(0)
	s.writes.reset() // a standby writes nothing
	s.syncHealth()
	why := fmt.Errorf("%w: stepped down", dataplane.ErrNotActive)
	s.tenants.Close(why)
	s.svc.EndLeases(why) // a sidecar's streams move to the new leader now, not when idle
}
