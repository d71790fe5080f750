package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/repool/repool/internal/store"
)

// GroupStore is a store that shards tenants over groups.
type GroupStore interface {
	store.Store
	store.Groups
}

// Groups checks the contract of tenant-sharded groups on handles of one
// empty database: open(g) returns a new handle writing for group g.
// Placement of new tenants (named, or the least-loaded group), each
// group's own epoch, and the fenced move: after MoveTenant commits, every
// write of the tenant's pool by the source group fails with ErrFenced and
// changes nothing, while the target's succeed; a stale source (its epoch
// raised by a successor) cannot move a tenant at all.
func Groups(t *testing.T, open func(t *testing.T, group string) GroupStore) {
	t.Helper()
	ctx := context.Background()
	a, b := open(t, store.DefaultGroup), open(t, "b")

	// Before any group exists, tenants go to the default group.
	first, err := a.CreateTenant(ctx, store.Tenant{ID: "first", Name: "First"})
	if err != nil || first.Group != store.DefaultGroup {
		t.Fatalf("CreateTenant(no group, no groups yet) = got %+v, %v, want group %q", first, err, store.DefaultGroup)
	}
	ea, err := a.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := b.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ea != 1 || eb != 2 {
		t.Fatalf("BumpEpoch of two groups = got %d and %d, want 1 and 2: each group has its own epoch, from one sequence", ea, eb)
	}
	a.SetFence(ea)
	b.SetFence(eb)
	// Group b holds none: the next tenant goes there, then to b again (a
	// tie, broken by name), then to the default group.
	for i, want := range []string{"b", "b", store.DefaultGroup} {
		id := []string{"t1", "t3", "t2"}[i]
		got, err := a.CreateTenant(ctx, store.Tenant{ID: id, Name: id})
		if err != nil || got.Group != want {
			t.Fatalf("CreateTenant(%s, least loaded) = got %+v, %v, want group %q", id, got, err, want)
		}
		if read, err := b.GetTenant(ctx, id); err != nil || read.Group != want {
			t.Fatalf("GetTenant(%s) = got %+v, %v, want group %q", id, read, err, want)
		}
	}
	if got, err := a.CreateTenant(ctx, store.Tenant{ID: "named", Name: "Named", Group: "c"}); err != nil || got.Group != "c" {
		t.Fatalf("CreateTenant(group c) = got %+v, %v, want group c", got, err)
	}
	if _, err := a.CreateTenant(ctx, store.Tenant{ID: "badgroup", Name: "x", Group: "Bad Group"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("CreateTenant(group %q) = got %v, want ErrInvalid", "Bad Group", err)
	}
	placed, err := a.Placements(ctx)
	want := map[string]string{"first": "default", "t1": "b", "t2": "default", "t3": "b", "named": "c"}
	if err != nil || len(placed) != len(want) {
		t.Fatalf("Placements = got %v, %v, want %v", placed, err, want)
	}
	for id, g := range want {
		if placed[id] != g {
			t.Fatalf("Placements[%s] = got %q, want %q", id, placed[id], g)
		}
	}
	groups, err := b.GroupList(ctx)
	wantGroups := []store.GroupInfo{{Name: "b", Epoch: 2, Tenants: 2}, {Name: "c", Tenants: 1}, {Name: "default", Epoch: 1, Tenants: 2}}
	if err != nil || len(groups) != len(wantGroups) {
		t.Fatalf("GroupList = got %+v, %v, want %+v", groups, err, wantGroups)
	}
	for i := range groups {
		if groups[i] != wantGroups[i] {
			t.Fatalf("GroupList[%d] = got %+v, want %+v", i, groups[i], wantGroups[i])
		}
	}
	if ts, err := a.ListTenants(ctx, store.TenantFilter{Group: "b"}); err != nil || len(ts) != 2 || ts[0].ID != "t1" || ts[1].ID != "t3" {
		t.Fatalf("ListTenants(group b) = got %+v, %v, want t1 and t3", ts, err)
	}

	// The move: the default group hands t2 over to b.
	cp := store.Checkpoint{Full: true, FencingHWM: 5, Resources: []store.ResourceRow{{ID: "r1", Capacity: 1}}}
	if err := a.SaveCheckpoint(ctx, "t2", cp); err != nil {
		t.Fatalf("SaveCheckpoint(t2 by its group) = got %v, want nil", err)
	}
	if err := a.WriteLeases(ctx, "t2", []store.LeaseRow{{ID: 1, ResourceID: "r1", Context: "x", Token: 5, ExpiresAt: 1 << 60}}, nil); err != nil {
		t.Fatalf("WriteLeases(t2 by its group) = got %v, want nil", err)
	}
	if err := b.SaveCheckpoint(ctx, "t2", cp); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("SaveCheckpoint(t2 by group b before the move) = got %v, want ErrFenced", err)
	}
	if err := b.WriteLeases(ctx, "t2", nil, []uint64{1}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("WriteLeases(t2 by group b before the move) = got %v, want ErrFenced", err)
	}
	for _, bad := range []struct {
		name, tenant, to string
		want             error
	}{
		{"to its own group", "t2", store.DefaultGroup, store.ErrInvalid},
		{"to a bad group name", "t2", "B!", store.ErrInvalid},
		{"an unknown tenant", "nobody", "b", store.ErrNotFound},
		{"a tenant placed elsewhere", "t1", "c", store.ErrFenced},
	} {
		if err := a.MoveTenant(ctx, bad.tenant, bad.to); !errors.Is(err, bad.want) {
			t.Fatalf("MoveTenant(%s) = got %v, want %v", bad.name, err, bad.want)
		}
	}
	if err := a.MoveTenant(ctx, "t2", "b"); err != nil {
		t.Fatalf("MoveTenant(t2 to b) = got %v, want nil", err)
	}
	stale := store.Checkpoint{Full: true, FencingHWM: 6, Resources: []store.ResourceRow{{ID: "stale", Capacity: 1}}}
	if err := a.SaveCheckpoint(ctx, "t2", stale); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("SaveCheckpoint(t2 by the source after the move) = got %v, want ErrFenced", err)
	}
	if err := a.WriteLeases(ctx, "t2", nil, []uint64{1}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("WriteLeases(t2 by the source after the move) = got %v, want ErrFenced", err)
	}
	st, err := b.LoadCheckpoint(ctx, "t2")
	if err != nil || len(st.Resources) != 1 || st.Resources[0].ID != "r1" || st.FencingHWM != 5 {
		t.Fatalf("LoadCheckpoint(t2 by the target) = got %+v, %v, want r1 and hwm 5 as the source left them", st, err)
	}
	if leases, err := b.LoadLeases(ctx, "t2"); err != nil || len(leases) != 1 || leases[0].Token != 5 {
		t.Fatalf("LoadLeases(t2 by the target) = got %+v, %v, want the source's lease", leases, err)
	}
	if err := b.WriteLeases(ctx, "t2", []store.LeaseRow{{ID: 2, ResourceID: "r1", Context: "x", Token: 6, ExpiresAt: 1 << 60}}, nil); err != nil {
		t.Fatalf("WriteLeases(t2 by the target) = got %v, want nil", err)
	}
	if tn, err := a.GetTenant(ctx, "t2"); err != nil || tn.Group != "b" {
		t.Fatalf("GetTenant(t2) after the move = got %+v, %v, want group b", tn, err)
	}

	// A stale source: b's epoch raised by a successor; b cannot move t2 on.
	succ := open(t, "b")
	e, err := succ.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	succ.SetFence(e)
	if e <= eb {
		t.Fatalf("BumpEpoch(b's successor) = got %d, want above %d", e, eb)
	}
	if again, err := a.BumpEpoch(ctx); err != nil || again <= e {
		t.Fatalf("BumpEpoch(default group after b's) = got %d, %v, want above %d: one sequence for every group", again, err, e)
	}
	if err := b.MoveTenant(ctx, "t2", store.DefaultGroup); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("MoveTenant by a deposed active server = got %v, want ErrFenced", err)
	}
	if tn, err := a.GetTenant(ctx, "t2"); err != nil || tn.Group != "b" {
		t.Fatalf("GetTenant(t2) after a stale move = got %+v, %v, want still group b", tn, err)
	}
	if err := succ.MoveTenant(ctx, "t2", store.DefaultGroup); err != nil {
		t.Fatalf("MoveTenant(t2 back, by b's new active server) = got %v, want nil", err)
	}
}
