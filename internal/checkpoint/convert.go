package checkpoint

import (
	"slices"
	"strings"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func resourceRow(r pool.ResourceState) store.ResourceRow {
	return store.ResourceRow{
		ID: r.ID, Capacity: int32(r.Capacity), Labels: r.Labels,
		Alpha: r.Aggregate.Alpha, Beta: r.Aggregate.Beta, UpdatedAt: unixNano(r.Aggregate.UpdatedAt),
		ConsecutiveFailures: int32(r.Aggregate.ConsecutiveFailures),
		BlockedUntil:        unixNano(r.Quarantine.Until), CooldownLevel: int32(r.Quarantine.Level),
		RegisteredAt: unixNano(r.RegisteredAt), Uses: int64(r.Uses), MaxUses: int64(r.MaxUses), MaxAge: int64(r.MaxAge),
		Retired: r.Retired, Imposed: r.Imposed, Recent: int64(r.Aggregate.Recent),
	}
}

func cellRow(c pool.CellState) store.CellRow {
	return store.CellRow{
		ResourceID: c.Resource, Context: c.Context,
		Alpha: c.Stats.Alpha, Beta: c.Stats.Beta, UpdatedAt: unixNano(c.Stats.UpdatedAt),
		ConsecutiveFailures: int32(c.Stats.ConsecutiveFailures),
		BlockedUntil:        unixNano(c.Quarantine.Until), CooldownLevel: int32(c.Quarantine.Level),
		Recent: int64(c.Stats.Recent),
	}
}

func bindingRow(b pool.BindingState) store.BindingRow {
	return store.BindingRow{Context: b.Context, Key: b.Key, ResourceID: b.Resource, ExpiresAt: b.ExpiresAt.UnixNano(), Failed: b.Failed}
}

// toCheckpoint converts a full snapshot.
func toCheckpoint(s pool.Snapshot) store.Checkpoint {
	return store.Checkpoint{Full: true, FencingHWM: s.LastToken,
		Resources: mapAll(s.Resources, resourceRow), Cells: mapAll(s.Cells, cellRow), Bindings: mapAll(s.Bindings, bindingRow)}
}

// changesToCheckpoint converts an incremental change set.
func changesToCheckpoint(ch pool.Changes) store.Checkpoint {
	return store.Checkpoint{FencingHWM: ch.LastToken, Removed: ch.Removed,
		Resources: mapAll(ch.Resources, resourceRow), Cells: mapAll(ch.Cells, cellRow),
		Bindings: mapAll(ch.Bindings, bindingRow), Unbound: mapAll(ch.Unbound, func(k pool.BindingKey) store.BindingKey { return store.BindingKey(k) })}
}

// toSnapshot converts a loaded pool state. Leases are not checkpointed: the
// restored pool starts with none, and the caller raises the epoch so that
// new tokens exceed every token issued before. A binding of a resource the
// state does not hold is dropped: its resource was removed after the
// bindings were last written.
func toSnapshot(st store.PoolState) pool.Snapshot {
	var binds []pool.BindingState
	for _, b := range st.Bindings {
		if _, ok := slices.BinarySearchFunc(st.Resources, b.ResourceID, func(r store.ResourceRow, id string) int { return strings.Compare(r.ID, id) }); ok {
			binds = append(binds, pool.BindingState{Context: b.Context, Key: b.Key, Resource: b.ResourceID, ExpiresAt: time.Unix(0, b.ExpiresAt), Failed: b.Failed})
		}
	}
	return pool.Snapshot{
		Bindings: binds,
		Epoch:    uint32(st.FencingHWM >> 40), LastToken: st.FencingHWM, LastLease: st.FencingHWM &^ (1<<40 - 1),
		Resources: mapAll(st.Resources, func(r store.ResourceRow) pool.ResourceState {
			return pool.ResourceState{
				ID: r.ID, Capacity: int(r.Capacity), Labels: r.Labels,
				Aggregate: pool.Stats{Alpha: r.Alpha, Beta: r.Beta, UpdatedAt: fromUnixNano(r.UpdatedAt), ConsecutiveFailures: int(r.ConsecutiveFailures),
					Recent: uint64(r.Recent)},
				Quarantine:   pool.Quarantine{Until: fromUnixNano(r.BlockedUntil), Level: int(r.CooldownLevel)},
				RegisteredAt: fromUnixNano(r.RegisteredAt), Uses: int(min(r.Uses, pool.MaxMaxUses)), MaxUses: int(r.MaxUses), MaxAge: time.Duration(r.MaxAge),
				Retired: r.Retired, Imposed: r.Imposed,
			}
		}),
		Cells: mapAll(st.Cells, func(c store.CellRow) pool.CellState {
			return pool.CellState{
				Resource: c.ResourceID, Context: c.Context,
				Stats: pool.Stats{Alpha: c.Alpha, Beta: c.Beta, UpdatedAt: fromUnixNano(c.UpdatedAt), ConsecutiveFailures: int(c.ConsecutiveFailures),
					Recent: uint64(c.Recent)},
				Quarantine: pool.Quarantine{Until: fromUnixNano(c.BlockedUntil), Level: int(c.CooldownLevel)},
			}
		}),
	}
}

// mapAll returns f of each element of in, in order (an empty, non-nil
// slice for an empty in, as the store's rows and the pool's states are
// made).
func mapAll[S, D any](in []S, f func(S) D) []D {
	out := make([]D, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// withLeases adds journaled leases that have not expired by now to a
// snapshot, raising its high-water marks to cover every journaled lease. A
// lease of a resource the checkpoint does not hold is dropped: its resource
// was removed. Every other one is kept, even beyond its resource's capacity:
// the journal may still hold leases that ended (a release whose journal
// write failed, a lease taken back after an uncertain write, a removed and
// registered again resource), and which of them is stale is not known, so
// leaving any out could leave out one still held and let the resource be
// leased beyond its capacity. A stale one only holds capacity until its
// expiry.
func withLeases(s pool.Snapshot, leases []store.LeaseRow, now time.Time) pool.Snapshot {
	known := make(map[string]bool, len(s.Resources))
	for _, r := range s.Resources {
		known[r.ID] = true
	}
	for _, l := range leases {
		// Tokens and ids go on above every journaled lease's, kept or not.
		s.LastToken = max(s.LastToken, l.Token)
		s.LastLease = max(s.LastLease, l.ID)
		if l.ExpiresAt <= now.UnixNano() || !known[l.ResourceID] {
			continue
		}
		s.Leases = append(s.Leases, pool.LeaseState{ID: l.ID, Resource: l.ResourceID, Context: l.Context, Token: l.Token, ExpiresAt: time.Unix(0, l.ExpiresAt)})
	}
	s.Epoch = uint32(max(s.LastToken, s.LastLease) >> 40)
	return s
}
