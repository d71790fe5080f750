package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/tenants"
)

// sharding is what a server of a tenant-sharded deployment adds (every
// HA server: a deployment without groups is the default group alone). Its
// group's active server serves only the tenants placed on the group: it
// takes in the tenants placed there (the placement loop), lets go of the
// others, and moves its tenants to other groups on the operator's demand.
type sharding struct {
	group string
	store store.Groups

	moveMu sync.Mutex // one move at a time
	mu     sync.Mutex
	moving map[string]bool // tenants being moved out: the placement loop leaves them alone

	// The placement loop's memory, to skip listing unchanged placements:
	// the store's fingerprint at the last pass that had nothing left to
	// do, and when the last full pass ran.
	lastFP   string
	lastFull time.Time

	moves  *prometheus.CounterVec
	window prometheus.Histogram
}

func newSharding(group string, raw store.Store, reg prometheus.Registerer) (*sharding, error) {
	gs, ok := raw.(store.Groups)
	if !ok {
		return nil, fmt.Errorf("the store does not support groups of servers (use postgres://)")
	}
	sh := &sharding{
		group: group, store: gs, moving: map[string]bool{},
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

func (sh *sharding) setMoving(tenant string, on bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if on {
		sh.moving[tenant] = true
	} else {
		delete(sh.moving, tenant)
	}
}

func (sh *sharding) isMoving(tenant string) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.moving[tenant]
}

// placementLoop follows the placements while the server is active.
func (s *Server) placementLoop(ctx context.Context) {
	clock.Every(ctx, s.clock, s.cfg.PlacementInterval, func(ctx context.Context) bool {
		s.syncPlacements(ctx)
		return true
	})
}

// syncPlacements reads every tenant's placement once and brings this
// server in line: a tenant placed on its group and not served yet (moved
// here, or created by another group's server) is restored from the store
// (its limits, resources, statistics and journaled leases) before its
// first call is served; a tenant served here but placed elsewhere is let
// go; every other tenant's group is remembered, for the refusals to name
// it.
func (s *Server) syncPlacements(ctx context.Context) {
	sh := s.shard
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
	admitted := map[string]bool{}
	for _, t := range s.pools.Admitted() {
		admitted[t] = true
	}
	done := fpErr == nil
	for t, g := range placed {
		if sh.isMoving(t) {
			done = false
			continue
		}
		switch {
		case g == sh.group && !admitted[t]:
			if err := s.takeIn(ctx, t); err != nil && ctx.Err() == nil {
				done = false
				s.log.Error("taking in a tenant placed on this group", "tenant", t, "err", err)
			}
		case g != sh.group && admitted[t]:
			s.log.Warn("a tenant served here is placed on another group; letting it go", "tenant", t, "group", g)
			s.tenants.MovedAway(t, g)
		case g != sh.group:
			if cur, ok := s.pools.Elsewhere(t); !ok || cur != g {
				s.pools.Refuse(t, g)
			}
		}
	}
	// Tenants deleted meanwhile are no longer anyone's: forget them.
	s.pools.ForgetAway(func(t string) bool { _, ok := placed[t]; return ok || sh.isMoving(t) })
	sh.lastFull = s.clock.Now()
	if done {
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

// takeIn restores tenant, placed on this group, and serves it.
func (s *Server) takeIn(ctx context.Context, tenant string) error {
	if err := s.tenants.LoadTenantLimits(ctx, s.store, tenant); err != nil {
		return err
	}
	if err := s.cp.Restore(ctx, tenant); err != nil {
		return err
	}
	s.log.Info("serving a tenant placed on this group", "tenant", tenant, "group", s.shard.group)
	return nil
}

// moveTenant moves tenant from this server's group to group to (see
// control.Groups.MoveTenant): its calls are refused here (retryable
// UNAVAILABLE, TENANT_ELSEWHERE) from the first step; its pool is closed,
// so that no change lands after the state is taken; its whole state is
// checkpointed (leases are in the journal already, acknowledged before
// their calls were answered); the store moves it in one fenced
// transaction, after which this server cannot write its state; and the
// server lets it go. If the handover fails for any other reason than a
// fence, the move is rolled back: the tenant is restored from the state
// just written and served here again.
func (s *Server) moveTenant(ctx context.Context, tenant, to string) (time.Duration, error) {
	sh := s.shard
	if err := store.ValidateGroup(to); err != nil {
		return 0, err
	}
	if to == sh.group {
		return 0, fmt.Errorf("%w: tenant %q is on group %q already", store.ErrInvalid, tenant, to)
	}
	sh.moveMu.Lock()
	defer sh.moveMu.Unlock()
	t, err := s.store.GetTenant(ctx, tenant)
	if err == nil && t.Status == store.StatusDeleted {
		err = fmt.Errorf("tenant %q: %w", tenant, store.ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	if t.Group != sh.group || !s.pools.Placed(tenant) {
		return 0, &tenants.ElsewhereError{Tenant: tenant, Group: t.Group}
	}
	// A target that cannot take the tenant is refused before anything
	// changes here (the handover checks it again, atomically).
	if err := sh.canTake(ctx, to); err != nil {
		return 0, err
	}
	sh.setMoving(tenant, true)
	defer sh.setMoving(tenant, false)
	start := s.clock.Now()
	s.pools.Refuse(tenant, to)
	if p, ok := s.pools.Lookup(tenant); ok {
		p.Close(&tenants.ElsewhereError{Tenant: tenant, Group: to})
		err = s.cp.Save(ctx, tenant)
	}
	if err == nil {
		err = sh.store.MoveTenant(ctx, tenant, to)
	}
	if err != nil {
		sh.moves.WithLabelValues("failed").Inc()
		s.tenants.MovedAway(tenant, "")
		if !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrNotFound) {
			if rerr := s.takeIn(context.WithoutCancel(ctx), tenant); rerr != nil {
				s.log.Error("rolling back a failed move: the tenant could not be restored; the next placement check retries", "tenant", tenant, "err", rerr)
			}
		}
		return 0, err
	}
	s.tenants.MovedAway(tenant, to)
	refused := s.clock.Now().Sub(start)
	sh.moves.WithLabelValues("moved").Inc()
	sh.window.Observe(refused.Seconds())
	s.log.Info("tenant moved", "tenant", tenant, "from", sh.group, "to", to, "refused", refused)
	return refused, nil
}

// canTake returns a *store.GroupUnavailableError unless group is known,
// active and live (a server holds its leader lock) as the store sees it now.
func (sh *sharding) canTake(ctx context.Context, group string) error {
	gs, err := sh.store.GroupList(ctx)
	if err != nil {
		return err
	}
	for _, g := range gs {
		switch {
		case g.Name != group:
		case g.State == "":
			return &store.GroupUnavailableError{Group: group, Reason: store.GroupUnknown}
		case g.State != store.GroupActive:
			return &store.GroupUnavailableError{Group: group, Reason: string(g.State)}
		case !g.Live:
			return &store.GroupUnavailableError{Group: group, Reason: store.GroupNoServer}
		default:
			return nil
		}
	}
	return &store.GroupUnavailableError{Group: group, Reason: store.GroupUnknown}
}

// warnGroupState logs, as the server becomes active, that an operator drained
// or retired its group: it serves the tenants still placed there and is
// given no new one.
func (s *Server) warnGroupState(ctx context.Context) {
	gs, err := s.shard.store.GroupList(ctx)
	if err != nil {
		return
	}
	for _, g := range gs {
		if g.Name == s.shard.group && g.State != store.GroupActive {
			s.log.Warn("this server's group is "+string(g.State)+": it is given no new tenants (PUT /api/v1/groups/"+g.Name+` {"state":"active"} reopens it)`,
				"group", g.Name, "state", g.State, "tenants", g.Tenants)
		}
	}
}

// groupsAPI is the control plane's view of the server's group.
type groupsAPI struct{ s *Server }

var _ control.Groups = groupsAPI{}

func (g groupsAPI) Group() string { return g.s.shard.group }

func (g groupsAPI) List(ctx context.Context) ([]store.GroupInfo, error) {
	return g.s.shard.store.GroupList(ctx)
}

func (g groupsAPI) Holds() control.Holdings {
	var h control.Holdings
	h.Tenants = len(g.s.pools.Admitted())
	g.s.pools.Each(func(_ string, p *pool.Pool) {
		r, c := p.Len()
		h.Resources += int64(r)
		h.Cells += int64(c)
	})
	return h
}

func (g groupsAPI) MoveTenant(ctx context.Context, tenant, to string) (time.Duration, error) {
	return g.s.moveTenant(ctx, tenant, to)
}

func (g groupsAPI) SetState(ctx context.Context, group string, state store.GroupState) (store.GroupInfo, error) {
	return g.s.shard.store.SetGroupState(ctx, group, state)
}

// RecoverTenant re-places a tenant stranded on a group without an active
// server (store.Groups.RecoverTenant, fenced by this server's epoch). The
// target's active server takes it in at its next placement poll, as after
// a move: restored from the store, leases from the journal.
func (g groupsAPI) RecoverTenant(ctx context.Context, tenant, to string) (store.Recovered, error) {
	rec, err := g.s.shard.store.RecoverTenant(ctx, tenant, to)
	if err == nil {
		g.s.log.Warn("recovered a tenant stranded on a group without an active server", "tenant", tenant, "from", rec.From, "to", to, "fenced_epoch", rec.FencedEpoch)
	}
	return rec, err
}
