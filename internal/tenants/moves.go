package tenants

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/repool/repool/internal/store"
)

// Handover is the store's side of tenants placed on groups of servers
// (store.Groups does): the groups and whether each can take a tenant, and
// the fenced move of a tenant to another group.
type Handover interface {
	GroupList(ctx context.Context) ([]store.GroupInfo, error)
	MoveTenant(ctx context.Context, tenant, to string) error
}

// MoveMetrics counts the moves that began (past the checks that change
// nothing): moved, with how long the tenant's calls were refused here, or
// failed.
type MoveMetrics interface {
	Moved(refused time.Duration)
	Failed()
}

// TakeIn restores a tenant placed on this server's group and serves it:
// its stored limits first, then its pool (checkpoint and journaled
// leases), published only once its state is in and accounted.
func (lc *Lifecycle) TakeIn(ctx context.Context, tenant string) error {
	if err := lc.loadTenantLimits(ctx, tenant); err != nil {
		return err
	}
	if err := lc.cfg.Checkpoints.Restore(ctx, tenant); err != nil {
		return err
	}
	lc.cfg.Log.Info("serving a tenant placed on this group", "tenant", tenant, "group", lc.cfg.Group)
	return nil
}

// SyncPlacements brings the tenants served here in line with placed (every
// tenant's group, as the store holds them): a tenant placed on this group
// and not served yet (moved here, or created by another group's server) is
// taken in (TakeIn) before its first call is served; a tenant served here
// but placed elsewhere is let go (MovedAway); every other tenant's group is
// remembered, for the refusals to name it, and tenants no longer placed
// anywhere (deleted) are forgotten. A tenant being moved out is left alone.
// It reports whether nothing was left undone.
func (lc *Lifecycle) SyncPlacements(ctx context.Context, placed map[string]string) (done bool) {
	pools := lc.cfg.Pools
	admitted := map[string]bool{}
	for _, t := range pools.Admitted() {
		admitted[t] = true
	}
	done = true
	for t, g := range placed {
		if lc.isMoving(t) {
			done = false
			continue
		}
		switch {
		case g == lc.cfg.Group && !admitted[t]:
			if err := lc.TakeIn(ctx, t); err != nil && ctx.Err() == nil {
				done = false
				lc.cfg.Log.Error("taking in a tenant placed on this group", "tenant", t, "err", err)
			}
		case g != lc.cfg.Group && admitted[t]:
			lc.cfg.Log.Warn("a tenant served here is placed on another group; letting it go", "tenant", t, "group", g)
			lc.MovedAway(t, g)
		case g != lc.cfg.Group:
			if cur, ok := pools.Elsewhere(t); !ok || cur != g {
				pools.Refuse(t, g)
			}
		}
	}
	pools.ForgetAway(func(t string) bool { _, ok := placed[t]; return ok || lc.isMoving(t) })
	return done
}

// MoveOut moves tenant from this server's group to group to (see
// control.Groups.MoveTenant) and returns how long its calls were refused
// here. Its calls are refused (an *ElsewhereError naming to) from the first
// step; its pool is closed, so that no change lands after the state is
// taken; its whole state is checkpointed (leases are in the journal
// already, acknowledged before their calls were answered); the store moves
// it in one fenced transaction, after which this server cannot write its
// state; and the lifecycle lets it go. If the handover fails for any other
// reason than a fence (or the tenant's deletion), the move is rolled back:
// the tenant is taken in again from the state just written.
func (lc *Lifecycle) MoveOut(ctx context.Context, tenant, to string) (time.Duration, error) {
	h := lc.cfg.Handover
	if h == nil {
		return 0, fmt.Errorf("%w: this server is not part of a group of servers", store.ErrInvalid)
	}
	if err := store.ValidateGroup(to); err != nil {
		return 0, err
	}
	if to == lc.cfg.Group {
		return 0, fmt.Errorf("%w: tenant %q is on group %q already", store.ErrInvalid, tenant, to)
	}
	lc.moveMu.Lock()
	defer lc.moveMu.Unlock()
	t, err := lc.cfg.Store.GetTenant(ctx, tenant)
	if err == nil && t.Status == store.StatusDeleted {
		err = fmt.Errorf("tenant %q: %w", tenant, store.ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	if t.Group != lc.cfg.Group || !lc.cfg.Pools.Placed(tenant) {
		return 0, &ElsewhereError{Tenant: tenant, Group: t.Group}
	}
	// A target that cannot take the tenant is refused before anything
	// changes here (the handover checks it again, atomically).
	if err := canTake(ctx, h, to); err != nil {
		return 0, err
	}
	lc.setMoving(tenant, true)
	defer lc.setMoving(tenant, false)
	start := lc.cfg.Clock.Now()
	lc.cfg.Pools.Refuse(tenant, to)
	if p, ok := lc.cfg.Pools.Lookup(tenant); ok {
		p.Close(&ElsewhereError{Tenant: tenant, Group: to})
		err = lc.cfg.Checkpoints.Save(ctx, tenant)
	}
	if err == nil {
		err = h.MoveTenant(ctx, tenant, to)
	}
	if err != nil {
		if lc.cfg.Moves != nil {
			lc.cfg.Moves.Failed()
		}
		lc.MovedAway(tenant, "")
		if !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrNotFound) {
			if rerr := lc.TakeIn(context.WithoutCancel(ctx), tenant); rerr != nil {
				lc.cfg.Log.Error("rolling back a failed move: the tenant could not be restored; the next placement check retries", "tenant", tenant, "err", rerr)
			}
		}
		return 0, err
	}
	lc.MovedAway(tenant, to)
	refused := lc.cfg.Clock.Now().Sub(start)
	if lc.cfg.Moves != nil {
		lc.cfg.Moves.Moved(refused)
	}
	lc.cfg.Log.Info("tenant moved", "tenant", tenant, "from", lc.cfg.Group, "to", to, "refused", refused)
	return refused, nil
}

// canTake returns a *store.GroupUnavailableError unless group is known,
// active and live (a server holds its leader lock) as the store sees it now.
func canTake(ctx context.Context, h Handover, group string) error {
	gs, err := h.GroupList(ctx)
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

func (lc *Lifecycle) setMoving(tenant string, on bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if on {
		lc.moving[tenant] = true
	} else {
		delete(lc.moving, tenant)
	}
}

func (lc *Lifecycle) isMoving(tenant string) bool {
	lc.mu.RLock()
	defer lc.mu.RUnlock()
	return lc.moving[tenant]
}
