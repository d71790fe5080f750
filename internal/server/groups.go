package server

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// sharding is what a server of a tenant-sharded deployment adds (every
// HA server: a deployment without groups is the default group alone). Its
// group's active server serves only the tenants placed on the group: the
// placement loop reads the placements and the tenants' lifecycle takes in
// the tenants placed there and lets go of the others
// (tenants.Lifecycle.SyncPlacements); the operator's moves are the
// lifecycle's too (tenants.Lifecycle.MoveOut).
type sharding struct {
	group string
	store store.Groups

	// The placement loop's memory, to skip listing unchanged placements:
	// the store's fingerprint at the last pass that had nothing left to
	// do, and when the last full pass ran.
	lastFP   string
	lastFull time.Time

	moves  *prometheus.CounterVec
	window prometheus.Histogram
}

// Moved and Failed count the moves that began (tenants.MoveMetrics).
func (sh *sharding) Moved(refused time.Duration) {
	sh.moves.WithLabelValues("moved").Inc()
	sh.window.Observe(refused.Seconds())
}

func (sh *sharding) Failed() { sh.moves.WithLabelValues("failed").Inc() }

func newSharding(group string, raw store.Store, reg prometheus.Registerer) (*sharding, error) {
	gs, ok := raw.(store.Groups)
	if !ok {
		return nil, fmt.Errorf("the store does not support groups of servers (use postgres://)")
	}
	sh := &sharding{
		group: group, store: gs,
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_tenant_moves_total",
			Help: "Tenants this server moved to another group, by result (moved, failed).",
		}, []string{"result"}),
		window: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "repool_tenant_move_refused_seconds",
			Help:    "How long a moved tenant's calls were refused by this server (the source's part of the move window).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	reg.MustRegister(sh.moves, sh.window)
	return sh, nil
}

// placementLoop follows the placements while the server is active.
func (e *elected) placementLoop(ctx context.Context) {
	s := e.s
	clock.Every(ctx, s.clock, s.cfg.PlacementInterval, func(ctx context.Context) bool {
		e.syncPlacements(ctx)
		return true
	})
}

// syncPlacements reads every tenant's placement once and has the tenants'
// lifecycle bring this server in line (tenants.Lifecycle.SyncPlacements).
func (e *elected) syncPlacements(ctx context.Context) {
	s, sh := e.s, e.shard
	// Unchanged placements (the store's fingerprint) need no listing, but
	// a full pass runs at least every fullPlacementPass, and after any
	// pass that left something undone.
	fp, fpErr := "", error(nil)
	if f, ok := sh.store.(placementsFingerprinter); ok {
		fp, fpErr = f.PlacementsFingerprint(ctx)
		if fpErr == nil && fp != "" && fp == sh.lastFP && s.clock.Now().Sub(sh.lastFull) < fullPlacementPass {
			return
		}
	}
	sh.lastFP = ""
	placed, err := sh.store.Placements(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading the tenants' placements", "err", err)
		}
		return
	}
	done := s.tenants.SyncPlacements(ctx, placed)
	sh.lastFull = s.clock.Now()
	if done && fpErr == nil {
		sh.lastFP = fp
	}
}

// fullPlacementPass bounds how long the placement loop trusts an
// unchanged fingerprint before it lists every placement again.
const fullPlacementPass = 5 * time.Second

// placementsFingerprinter is a store that can tell cheaply whether the
// placements changed (PostgreSQL: a count and a hash sum in one query).
type placementsFingerprinter interface {
	PlacementsFingerprint(ctx context.Context) (string, error)
}

// warnGroupState logs, as the server becomes active, that an operator drained
// or retired its group: it serves the tenants still placed there and is
// given no new one.
func (e *elected) warnGroupState(ctx context.Context) {
	s := e.s
	gs, err := e.shard.store.GroupList(ctx)
	if err != nil {
		return
	}
	for _, g := range gs {
		if g.Name == e.shard.group && g.State != store.GroupActive {
			s.log.Warn("this server's group is "+string(g.State)+": it is given no new tenants (PUT /api/v1/groups/"+g.Name+` {"state":"active"} reopens it)`,
				"group", g.Name, "state", g.State, "tenants", g.Tenants)
		}
	}
}

// groupsAPI is the control plane's view of the server's group.
type groupsAPI struct{ e *elected }

var _ control.Groups = groupsAPI{}

func (g groupsAPI) Group() string { return g.e.shard.group }

func (g groupsAPI) List(ctx context.Context) ([]store.GroupInfo, error) {
	return g.e.shard.store.GroupList(ctx)
}

func (g groupsAPI) Holds() control.Holdings {
	var h control.Holdings
	h.Tenants = len(g.e.s.pools.Admitted())
	g.e.s.pools.Each(func(_ string, p *pool.Pool) {
		r, c := p.Len()
		h.Resources += int64(r)
		h.Cells += int64(c)
	})
	return h
}

func (g groupsAPI) MoveTenant(ctx context.Context, tenant, to string) (time.Duration, error) {
	return g.e.s.tenants.MoveOut(ctx, tenant, to)
}

func (g groupsAPI) SetState(ctx context.Context, group string, state store.GroupState) (store.GroupInfo, error) {
	return g.e.shard.store.SetGroupState(ctx, group, state)
}

// RecoverTenant re-places a tenant stranded on a group without an active
// server (store.Groups.RecoverTenant, fenced by this server's epoch). The
// target's active server takes it in at its next placement poll, as after
// a move: restored from the store, leases from the journal.
func (g groupsAPI) RecoverTenant(ctx context.Context, tenant, to string) (store.Recovered, error) {
	rec, err := g.e.shard.store.RecoverTenant(ctx, tenant, to)
	if err == nil {
		g.e.s.log.Warn("recovered a tenant stranded on a group without an active server", "tenant", tenant, "from", rec.From, "to", to, "fenced_epoch", rec.FencedEpoch)
	}
	return rec, err
}
