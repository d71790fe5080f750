package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"

	"github.com/repool/repool/internal/store"
)

// groupsSQL lists every group that exists, with its epoch and the number of
// live tenants placed on it: a group exists once one of its servers has
// raised its epoch (server_counters) or a tenant is placed on it.
const groupsSQL = `
SELECT name, value FROM server_counters WHERE name = 'epoch' OR name LIKE 'epoch:%'`

// GroupList implements store.Groups.
func (s *Store) GroupList(ctx context.Context) ([]store.GroupInfo, error) {
	byName := map[string]*store.GroupInfo{}
	get := func(name string) *store.GroupInfo {
		g := byName[name]
		if g == nil {
			g = &store.GroupInfo{Name: name}
			byName[name] = g
		}
		return g
	}
	err := s.c.Read.Query(ctx, func(row Row) error {
		var name string
		var epoch int64
		if err := row.Scan(&name, &epoch); err != nil {
			return err
		}
		if g, ok := store.GroupOf(name); ok {
			get(g).Epoch = uint32(epoch)
		}
		return nil
	}, groupsSQL)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", s.classify(err))
	}
	err = s.c.Read.Query(ctx, func(row Row) error {
		var name string
		var n int
		if err := row.Scan(&name, &n); err != nil {
			return err
		}
		get(name).Tenants = n
		return nil
	}, `SELECT placement, count(*) FROM tenants WHERE status <> 'deleted' GROUP BY placement`)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", s.classify(err))
	}
	out := make([]store.GroupInfo, 0, len(byName))
	for _, g := range byName {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// leastLoaded returns the group with the fewest live tenants among those
// that exist (the first by name on a tie), or store.DefaultGroup when none
// does yet: where CreateTenant places a tenant the operator did not place.
func (s *Store) leastLoaded(ctx context.Context) (string, error) {
	gs, err := s.GroupList(ctx)
	if err != nil {
		return "", err
	}
	best := store.DefaultGroup
	least := -1
	for _, g := range gs {
		if least < 0 || g.Tenants < least {
			best, least = g.Name, g.Tenants
		}
	}
	return best, nil
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
// on this group. The UPDATE takes the tenant's row lock, which the fenced
// writes of the tenant's pool take FOR SHARE (placedHere): a write of the
// source either commits before the move or sees the new placement.
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
		_, err := tx.Exec(ctx, `UPDATE tenants SET placement = $2 WHERE id = $1`, tenant, to)
		return s.classify(err)
	})
	if err != nil {
		return fmt.Errorf("move tenant %q to group %q: %w", tenant, to, err)
	}
	return nil
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
