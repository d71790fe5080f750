package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/repool/repool/internal/store"
)

// live returns which groups have a server holding their leader lock now,
// read on c (see Dialect.LiveGroups).
func (s *Store) live(ctx context.Context, c Conn) (func(string) bool, error) {
	if s.c.LiveGroups == nil {
		return func(g string) bool { return g == store.DefaultGroup }, nil
	}
	f, err := s.c.LiveGroups(ctx, c)
	if err != nil {
		return nil, s.classify(err)
	}
	return f, nil
}

// GroupList implements store.Groups.
func (s *Store) GroupList(ctx context.Context) ([]store.GroupInfo, error) {
	gs, err := s.groupList(ctx, s.c.Read)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	return gs, nil
}

// groupList lists the known groups, and those tenants are placed on, read
// on c: their state, liveness, epoch and number of live tenants.
func (s *Store) groupList(ctx context.Context, c Conn) ([]store.GroupInfo, error) {
	byName := map[string]*store.GroupInfo{}
	get := func(name string) *store.GroupInfo {
		g := byName[name]
		if g == nil {
			g = &store.GroupInfo{Name: name}
			byName[name] = g
		}
		return g
	}
	err := c.Query(ctx, func(row Row) error {
		var name, state string
		var changed time.Time
		if err := row.Scan(&name, &state, s.c.TimeDest(&changed)); err != nil {
			return err
		}
		g := get(name)
		g.State, g.ChangedAt = store.GroupState(state), changed
		return nil
	}, `SELECT name, state, changed_at FROM server_groups`)
	if err != nil {
		return nil, s.classify(err)
	}
	err = c.Query(ctx, func(row Row) error {
		var name string
		var epoch int64
		if err := row.Scan(&name, &epoch); err != nil {
			return err
		}
		if g, ok := store.GroupOf(name); ok {
			if x := byName[g]; x != nil {
				x.Epoch = uint32(epoch)
			}
		}
		return nil
	}, `SELECT name, value FROM server_counters WHERE name = 'epoch' OR name LIKE 'epoch:%'`)
	if err != nil {
		return nil, s.classify(err)
	}
	err = c.Query(ctx, func(row Row) error {
		var name string
		var n int
		if err := row.Scan(&name, &n); err != nil {
			return err
		}
		get(name).Tenants = n
		return nil
	}, `SELECT placement, count(*) FROM tenants WHERE status <> 'deleted' GROUP BY placement`)
	if err != nil {
		return nil, s.classify(err)
	}
	live, err := s.live(ctx, c)
	if err != nil {
		return nil, err
	}
	out := make([]store.GroupInfo, 0, len(byName))
	for _, g := range byName {
		g.Live = live(g.Name)
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// pickGroup returns where CreateTenant places a tenant the operator did
// not place: the group with the fewest live tenants among those that can
// take one (known, active, live), the first by name on a tie. When no
// group is live at all (a store no server serves yet: the first start's
// demo tenant, a tool), the default group. Groups are live but none can
// take tenants: a *store.GroupUnavailableError naming no group.
func (s *Store) pickGroup(ctx context.Context, c Conn) (string, error) {
	gs, err := s.groupList(ctx, c)
	if err != nil {
		return "", err
	}
	best, least, anyLive := "", -1, false
	for _, g := range gs {
		anyLive = anyLive || g.Live
		if g.CanTake() && (least < 0 || g.Tenants < least) {
			best, least = g.Name, g.Tenants
		}
	}
	switch {
	case best != "":
		return best, nil
	case !anyLive:
		return store.DefaultGroup, nil
	}
	return "", &store.GroupUnavailableError{Reason: "no known group is active with an active server"}
}

// takes checks, in transaction tx, that group may take a tenant: known
// and active (its registry row taken FOR SHARE, so that a concurrent
// SetGroupState waits for tx), and, with needLive, live.
func (s *Store) takes(ctx context.Context, tx Conn, group string, needLive bool) error {
	var state string
	err := tx.QueryRow(ctx, `SELECT state FROM server_groups WHERE name = $1 `+s.c.ForShare, group).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return &store.GroupUnavailableError{Group: group, Reason: store.GroupUnknown}
	}
	if err != nil {
		return s.classify(err)
	}
	if store.GroupState(state) != store.GroupActive {
		return &store.GroupUnavailableError{Group: group, Reason: state}
	}
	if needLive {
		live, err := s.live(ctx, tx)
		if err != nil {
			return err
		}
		if !live(group) {
			return &store.GroupUnavailableError{Group: group, Reason: store.GroupNoServer}
		}
	}
	return nil
}

// registerGroup makes group known (active), in tx; a known group keeps
// its state.
func (s *Store) registerGroup(ctx context.Context, tx Conn, group string) error {
	_, err := tx.Exec(ctx, `INSERT INTO server_groups (name, state) VALUES ($1, 'active') ON CONFLICT (name) DO NOTHING`, group)
	return err
}

// bumpEpoch raises group's epoch in tx to the next value of the sequence
// every group draws from, at least Config.EpochFloor, and returns it. It
// takes the sequence's row, then the group's epoch row.
func (s *Store) bumpEpoch(ctx context.Context, tx Conn, group string) (uint32, error) {
	var (
		v     int64
		floor int64
	)
	if s.c.EpochFloor != nil {
		floor = int64(s.c.EpochFloor())
	}
	err := tx.QueryRow(ctx, `
INSERT INTO server_counters AS c (name, value)
SELECT 'epoch_seq', CASE WHEN coalesce(max(value), 0) + 1 > $2 THEN coalesce(max(value), 0) + 1 ELSE $2 END
FROM server_counters WHERE name = 'epoch' OR name LIKE 'epoch:%'
ON CONFLICT (name) DO UPDATE SET value = CASE WHEN c.value + 1 > $2 THEN c.value + 1 ELSE $2 END WHERE c.value < $1
RETURNING value`, int64(math.MaxUint32), floor).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: epoch counter exhausted", store.ErrConflict)
	}
	if err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `
INSERT INTO server_counters AS c (name, value) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`, store.EpochCounter(group), v)
	return uint32(v), err
}

// SetGroupState implements store.Groups. It takes the group's registry
// row FOR UPDATE, so that it waits for the transactions placing a tenant
// on the group (they hold it FOR SHARE) and the count of its tenants sees
// them.
func (s *Store) SetGroupState(ctx context.Context, group string, state store.GroupState) (store.GroupInfo, error) {
	if err := store.ValidateGroup(group); err != nil {
		return store.GroupInfo{}, err
	}
	if !store.ValidGroupState(state) {
		return store.GroupInfo{}, fmt.Errorf("%w: group state %q: want active, draining or retired", store.ErrInvalid, state)
	}
	if state == store.GroupRetired && group == store.DefaultGroup {
		return store.GroupInfo{}, fmt.Errorf("%w: the default group cannot be retired", store.ErrInvalid)
	}
	var out store.GroupInfo
	err := s.c.InTx(ctx, false, func(tx Conn) error {
		var cur string
		err := tx.QueryRow(ctx, `SELECT state FROM server_groups WHERE name = $1 `+s.c.ForUpdate, group).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) {
			return &store.GroupUnavailableError{Group: group, Reason: store.GroupUnknown}
		}
		if err != nil {
			return s.classify(err)
		}
		if state == store.GroupRetired {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE placement = $1 AND status <> 'deleted'`, group).Scan(&n); err != nil {
				return s.classify(err)
			}
			if n > 0 {
				return fmt.Errorf("%w: group %q still has %d tenants placed on it", store.ErrConflict, group, n)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE server_groups SET state = $2, changed_at = $3 WHERE name = $1`,
			group, string(state), s.c.Time(s.c.Options.Now())); err != nil {
			return s.classify(err)
		}
		gs, err := s.groupList(ctx, tx)
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.Name == group {
				out = g
			}
		}
		return nil
	})
	if err != nil {
		return store.GroupInfo{}, fmt.Errorf("set the state of group %q: %w", group, err)
	}
	return out, nil
}

// Placements implements store.Groups.
func (s *Store) Placements(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := s.c.Read.Query(ctx, func(row Row) error {
		var id, g string
		if err := row.Scan(&id, &g); err != nil {
			return err
		}
		out[id] = g
		return nil
	}, `SELECT id, placement FROM tenants WHERE status <> 'deleted'`)
	if err != nil {
		return nil, fmt.Errorf("list placements: %w", s.classify(err))
	}
	return out, nil
}

// MoveTenant implements store.Groups: the fenced transaction checks this
// group's epoch (InTx), then moves the tenant only if it is still placed
// on this group and the target can take it (known, active, live; its
// registry row held FOR SHARE against a concurrent retirement). The
// UPDATE takes the tenant's row lock, which the fenced writes of the
// tenant's pool take FOR SHARE (placedHere): a write of the source either
// commits before the move or sees the new placement.
func (s *Store) MoveTenant(ctx context.Context, tenant, to string) error {
	if err := store.ValidateTenantID(tenant); err != nil {
		return err
	}
	if err := store.ValidateGroup(to); err != nil {
		return err
	}
	from := s.c.Options.GroupName()
	if to == from {
		return fmt.Errorf("%w: tenant %q: already on group %q", store.ErrInvalid, tenant, to)
	}
	err := s.c.InTx(ctx, true, func(tx Conn) error {
		if err := s.placedHere(ctx, tx, tenant, s.c.ForUpdate); err != nil {
			return err
		}
		if err := s.takes(ctx, tx, to, true); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE tenants SET placement = $2 WHERE id = $1`, tenant, to)
		return s.classify(err)
	})
	if err != nil {
		return fmt.Errorf("move tenant %q to group %q: %w", tenant, to, err)
	}
	return nil
}

// RecoverTenant implements store.Groups. Lock order: the epoch sequence's
// row (as BumpEpoch), this group's epoch row FOR SHARE (the fence), the
// stranded group's epoch row (raised), the tenant's row FOR UPDATE, the
// target's registry row FOR SHARE: epoch rows before tenant rows, as
// every fenced write takes them. Holding the stranded group's epoch
// row, the check that no server holds its leader lock is final: a server
// that takes the lock later raises that epoch after this commits, and
// only then reads the placements, without the tenant.
func (s *Store) RecoverTenant(ctx context.Context, tenant, to string) (store.Recovered, error) {
	if err := store.ValidateTenantID(tenant); err != nil {
		return store.Recovered{}, err
	}
	if err := store.ValidateGroup(to); err != nil {
		return store.Recovered{}, err
	}
	var out store.Recovered
	fenceFirst := s.c.CheckFence == nil
	err := s.c.InTx(ctx, fenceFirst, func(tx Conn) error {
		// Take the sequence first, as BumpEpoch does, so that a takeover
		// racing this transaction waits for it instead of deadlocking.
		if _, err := tx.Exec(ctx, `UPDATE server_counters SET value = value WHERE name = 'epoch_seq'`); err != nil {
			return s.classify(err)
		}
		if !fenceFirst {
			if err := s.c.CheckFence(ctx, tx); err != nil {
				return err
			}
		}
		// The stranded group's epoch row before the tenant's row: its
		// writes take them in that order (the fence FOR SHARE, then the
		// tenant's placement), and a recovery holding the tenant's row
		// while it waited for the epoch row deadlocked with one of them.
		// So the placement is read first without a lock, and read again
		// under the lock once the epoch row is held.
		placement := func(lock string) (string, error) {
			var status store.Status
			var g string
			err := tx.QueryRow(ctx, `SELECT status, placement FROM tenants WHERE id = $1 `+lock, tenant).Scan(&status, &g)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && status == store.StatusDeleted) {
				return "", fmt.Errorf("tenant %q: %w", tenant, store.ErrNotFound)
			}
			if err != nil {
				return "", s.classify(err)
			}
			if g == to {
				return "", fmt.Errorf("%w: tenant %q: already on group %q", store.ErrInvalid, tenant, to)
			}
			return g, nil
		}
		from, err := placement("")
		if err != nil {
			return err
		}
		epoch, err := s.bumpEpoch(ctx, tx, from)
		if err != nil {
			return s.classify(err)
		}
		if now, err := placement(s.c.ForUpdate); err != nil {
			return err
		} else if now != from {
			return fmt.Errorf("%w: tenant %q moved from group %q to %q meanwhile; look again and retry", store.ErrConflict, tenant, from, now)
		}
		live, err := s.live(ctx, tx)
		if err != nil {
			return err
		}
		if live(from) {
			return fmt.Errorf("%w: group %q of tenant %q has an active server", store.ErrConflict, from, tenant)
		}
		if err := s.takes(ctx, tx, to, true); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET placement = $2 WHERE id = $1`, tenant, to); err != nil {
			return s.classify(err)
		}
		out = store.Recovered{From: from, FencedEpoch: epoch}
		return nil
	})
	if err != nil {
		return store.Recovered{}, fmt.Errorf("recover tenant %q onto group %q: %w", tenant, to, err)
	}
	return out, nil
}

// placedHere checks, in a fenced transaction, that tenant is live and
// placed on this store's group, taking its row with lock (ForShare for a
// write of its state, ForUpdate to move it): a tenant deleted is
// store.ErrNotFound, a tenant placed elsewhere store.ErrFenced.
func (s *Store) placedHere(ctx context.Context, tx Conn, tenant, lock string) error {
	var status store.Status
	var cur string
	err := tx.QueryRow(ctx, `SELECT status, placement FROM tenants WHERE id = $1 `+lock, tenant).Scan(&status, &cur)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && status == store.StatusDeleted) {
		return fmt.Errorf("tenant %q: %w", tenant, store.ErrNotFound)
	}
	if err != nil {
		return s.classify(err)
	}
	if g := s.c.Options.GroupName(); cur != g {
		return fmt.Errorf("%w: tenant %q is placed on group %q, not on %q", store.ErrFenced, tenant, cur, g)
	}
	return nil
}
