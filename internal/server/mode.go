package server

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/status"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/tenants"
)

// mode is how a server holds the right to write its store. There are two
// (Config.HA chooses):
//
//   - single: the only server on its store. It claims the store at its
//     start (a second server on the same store stops there), raises the
//     epoch and serves every tenant from New to the end of Run.
//   - elected: one of the servers of a group of an HA deployment. The
//     group's servers take turns through a leader election; the leader
//     raises the epoch and serves the tenants placed on its group, the
//     others stand by. A deployment without groups is the default group
//     alone; with groups, each group's leader follows the placements and
//     moves tenants on the operator's demand.
//
// The server calls its mode at each step of its life that differs between
// them; everything else is common.
type mode interface {
	// lifecycle completes the tenants' lifecycle's configuration: an
	// elected server's serves only its group's tenants.
	lifecycle(cfg *tenants.LifecycleConfig)
	// groups is the control plane's view of the server's group; nil for a
	// single server.
	groups() control.Groups
	// start runs at the end of New, once everything is built and the
	// listeners bound: a single server becomes active; an elected one is
	// ready as a standby (Run campaigns).
	start(ctx context.Context) error
	// serve is Run's serving phase, until ctx ends, a listener fails (errc)
	// or the right to write is lost for good.
	serve(ctx context.Context, errc <-chan error) error
	// activated runs as the server becomes active, before its first call.
	activated(ctx context.Context)
	// loops starts the mode's own loops of an active server, beside the
	// common ones.
	loops(ctx context.Context, wg *sync.WaitGroup)
	// drained runs in a shutdown once calls are drained, before the final
	// checkpoint; handOver once it is written (began: when the shutdown
	// began, drained: when calls were drained).
	drained()
	handOver(wasActive bool, began, drained time.Time)
	// release lets go of the store, last.
	release()
	// describe fills in the mode's part of the server's status.
	describe(st *status.Server)
}

// newMode returns the mode Config.HA chooses, on the store raw (opened,
// nothing written yet).
func newMode(ctx context.Context, s *Server, raw store.Store) (mode, error) {
	if s.cfg.HA {
		e, err := newElected(s, raw)
		if err != nil {
			return nil, err // not a nil *elected in a non-nil mode
		}
		return e, nil
	}
	m, err := newSingle(ctx, s, raw)
	if err != nil {
		return nil, err // not a nil *single in a non-nil mode
	}
	return m, nil
}

// single is the mode of a server alone on its store.
type single struct {
	s           *Server
	claim       store.Claim // this process's hold on the store
	journalDone func()      // stops the lease journal and waits for it
}

// newSingle claims the store: a second server on the same store stops
// here, before it writes anything (waiting a bounded time for a killed
// predecessor's claim to end).
func newSingle(ctx context.Context, s *Server, raw store.Store) (*single, error) {
	wl, ok := raw.(store.WriterLock)
	if !ok {
		return nil, fmt.Errorf("the store %s cannot be claimed by one server", s.storeURL.Redacted())
	}
	claim, err := claimStore(ctx, wl, s.cfg.StoreLockWait, s.clock, s.log)
	if err != nil {
		return nil, err
	}
	return &single{s: s, claim: claim}, nil
}

func (m *single) lifecycle(*tenants.LifecycleConfig) {}

func (m *single) groups() control.Groups { return nil }

// start raises the epoch, fences the store with it, opens the lease
// journal (Run stops it after the last call) and becomes active.
func (m *single) start(ctx context.Context) error {
	s := m.s
	epoch, err := s.store.BumpEpoch(ctx)
	if err != nil {
		return fmt.Errorf("raising the epoch: %w", err)
	}
	s.store.SetFence(epoch)
	m.journalDone = s.journal.Start(s.life)
	return s.becomeActive(ctx, epoch)
}

// serve runs the active server's loops until ctx ends, a listener fails,
// or the store's claim is lost.
func (m *single) serve(ctx context.Context, errc <-chan error) error {
	s := m.s
	stop := s.activeLoops(s.life)
	// As in elected.serve: no periodic checkpoint races the final one.
	defer stop()
	lost := make(chan error, 1)
	wctx, cancel := context.WithCancel(s.life)
	defer cancel()
	go func() { lost <- m.watchClaim(wctx) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		s.log.Error("listener failed", "err", err)
		return err
	case err := <-lost:
		s.log.Error("lost the store; stopping without writing", "err", err)
		return err
	}
}

// watchClaim checks every second that this server still holds its store
// and returns why once it does not (nil when ctx ends). From that moment
// it serves nothing and writes nothing more: another server may own the
// store now.
func (m *single) watchClaim(ctx context.Context) error {
	s := m.s
	var lost error
	clock.Every(ctx, s.clock, time.Second, func(ctx context.Context) bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := m.claim.Check(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return true
		}
		s.lost.Store(true)
		s.lead.Store(false)
		s.store.SetFence(math.MaxUint32) // every later write is refused
		lost = fmt.Errorf("store %s: %w", s.storeURL.Redacted(), err)
		return false
	})
	return lost
}

func (m *single) activated(context.Context) {}

func (m *single) loops(context.Context, *sync.WaitGroup) {}

// drained stops the lease journal after the last call.
func (m *single) drained() { m.journalDone() }

func (m *single) handOver(bool, time.Time, time.Time) {}

func (m *single) release() { m.claim.Release() }

func (m *single) describe(st *status.Server) { st.Tenants = len(m.s.pools.Tenants()) }

// elected is the mode of a server of a group of an HA deployment: its
// leader election (haState) and its group's tenants (sharding).
type elected struct {
	s     *Server
	ha    *haState
	shard *sharding
}

func newElected(s *Server, raw store.Store) (*elected, error) {
	shard, err := newSharding(s.cfg.Group, raw, s.reg)
	if err != nil {
		return nil, err
	}
	h, err := newHA(s, s.cfg, raw)
	if err != nil {
		return nil, err
	}
	return &elected{s: s, ha: h, shard: shard}, nil
}

func (e *elected) lifecycle(cfg *tenants.LifecycleConfig) {
	cfg.Handover, cfg.Group, cfg.Moves = e.shard.store, e.shard.group, e.shard
}

func (e *elected) groups() control.Groups { return groupsAPI{e} }

// start makes the server ready as a standby: it answers health checks but
// is not active; Run campaigns for the leader lock.
func (e *elected) start(context.Context) error {
	s := e.s
	s.log.Info("server ready as standby", "grpc", s.grpcLn.Addr().String(), "http", s.httpLn.Addr().String(), "store", s.storeURL.Redacted())
	s.ready.Store(true)
	return nil
}

// activated, before the first call: the tenants of other groups are
// refused with their group named (a full pass: this term knows nothing
// yet), and a drained or retired group is logged.
func (e *elected) activated(ctx context.Context) {
	e.shard.lastFP = ""
	e.syncPlacements(ctx)
	e.warnGroupState(ctx)
}

func (e *elected) loops(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { e.placementLoop(ctx) })
}

func (e *elected) drained() {}

// handOver gives up the leader lock. It goes before the HTTP server's
// drain, which waits for its connections to go idle (checks, scrapes, the
// control plane: its writes are fenced like every other, so one that lands
// after a standby took over is refused, not lost): a standby waiting for
// the lock takes over after the checkpoint, not after the slowest client.
func (e *elected) handOver(wasActive bool, began, drained time.Time) {
	s := e.s
	checkpointed := s.clock.Now()
	e.ha.resign()
	if wasActive {
		e.gaveUp("gave up the leader lock", began, drained, checkpointed)
	}
}

// gaveUp logs what a planned hand-over of leadership (a stop, a
// switchover) waited for, when it is slow: the calls, the checkpoint, the
// lock's release.
func (e *elected) gaveUp(msg string, began, drained, checkpointed time.Time, attrs ...any) {
	now := e.s.clock.Now()
	e.s.log.Info(msg, append(attrs, "after", now.Sub(began).Round(time.Millisecond),
		"calls_drained_in", drained.Sub(began).Round(time.Millisecond),
		"checkpoint_in", checkpointed.Sub(drained).Round(time.Millisecond),
		"lock_released_in", now.Sub(checkpointed).Round(time.Millisecond))...)
}

func (e *elected) release() {}

func (e *elected) describe(st *status.Server) {
	st.HA = true
	st.Tenants = len(e.s.pools.Admitted()) // placed here, pool or not
	el := e.ha.elector.State()
	st.Election = &el
}
