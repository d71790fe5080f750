package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/repool/repool/internal/store"
)

// GroupStore is a store that shards tenants over groups.
type GroupStore interface {
	store.Store
	store.Groups
}

// Groups checks the contract of tenant-sharded groups on handles of one
// empty database: open(g) returns a new handle writing for group g, and
// lead(g) holds group g's leader lock (as its active server does) until
// the release it returns is called. Placement of new tenants (named, or
// the least-loaded group that can take them), the registry of known
// groups, each group's own epoch, and the fenced move: after MoveTenant
// commits, every write of the tenant's pool by the source group fails with
// ErrFenced and changes nothing, while the target's succeed; a stale
// source (its epoch raised by a successor) cannot move a tenant at all; a
// group no server has run, or draining, retired or without an active
// server takes no tenant; a group is retired only once empty; and a
// tenant stranded on a group without an active server is recovered onto
// another, fencing the stranded group's writes.
func Groups(t *testing.T, open func(t *testing.T, group string) GroupStore, lead func(t *testing.T, group string) (release func())) {
	t.Helper()
	ctx := context.Background()
	a, b := open(t, store.DefaultGroup), open(t, "b")
	unavailable := func(what string, err error, group, reason string) {
		t.Helper()
		var ge *store.GroupUnavailableError
		if !errors.As(err, &ge) || ge.Group != group || ge.Reason != reason || !errors.Is(err, store.ErrGroupUnavailable) {
			t.Fatalf("%s = got %v, want group %q refused: %s", what, err, group, reason)
		}
	}

	ea, err := a.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := b.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ea < 1 || eb != ea+1 {
		t.Fatalf("BumpEpoch of two groups = got %d and %d, want e and e+1: each group has its own epoch, from one sequence", ea, eb)
	}
	a.SetFence(ea)
	b.SetFence(eb)
	// Neither group is live (no server holds its lock): with no group
	// live at all, a tenant goes to the default group, though b has none.
	first, err := a.CreateTenant(ctx, store.Tenant{ID: "first", Name: "First"})
	if err != nil || first.Group != store.DefaultGroup {
		t.Fatalf("CreateTenant(no group live) = got %+v, %v, want group %q", first, err, store.DefaultGroup)
	}
	releaseA, releaseB := lead(t, store.DefaultGroup), lead(t, "b")
	defer releaseA()
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
	if got, err := a.CreateTenant(ctx, store.Tenant{ID: "named", Name: "Named", Group: "b"}); err != nil || got.Group != "b" {
		t.Fatalf("CreateTenant(group b) = got %+v, %v, want group b", got, err)
	}
	// A group no server has run is not known: nothing is created.
	_, err = a.CreateTenant(ctx, store.Tenant{ID: "lost", Name: "Lost", Group: "c"})
	unavailable("CreateTenant(group c, never run)", err, "c", store.GroupUnknown)
	if _, err := a.GetTenant(ctx, "lost"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTenant(lost) after a refused create = got %v, want ErrNotFound", err)
	}
	if _, err := a.CreateTenant(ctx, store.Tenant{ID: "badgroup", Name: "x", Group: "Bad Group"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("CreateTenant(group %q) = got %v, want ErrInvalid", "Bad Group", err)
	}
	placed, err := a.Placements(ctx)
	want := map[string]string{"first": "default", "t1": "b", "t2": "default", "t3": "b", "named": "b"}
	if err != nil || len(placed) != len(want) {
		t.Fatalf("Placements = got %v, %v, want %v", placed, err, want)
	}
	for id, g := range want {
		if placed[id] != g {
			t.Fatalf("Placements[%s] = got %q, want %q", id, placed[id], g)
		}
	}
	groups, err := b.GroupList(ctx)
	wantGroups := []store.GroupInfo{
		{Name: "b", State: store.GroupActive, Live: true, Epoch: eb, Tenants: 3},
		{Name: "default", State: store.GroupActive, Live: true, Epoch: ea, Tenants: 2},
	}
	if err != nil || len(groups) != len(wantGroups) {
		t.Fatalf("GroupList = got %+v, %v, want %+v", groups, err, wantGroups)
	}
	for i := range groups {
		if groups[i] != wantGroups[i] {
			t.Fatalf("GroupList[%d] = got %+v, want %+v", i, groups[i], wantGroups[i])
		}
	}
	if ts, err := a.ListTenants(ctx, store.TenantFilter{Group: "b"}); err != nil || len(ts) != 3 || ts[0].ID != "named" || ts[1].ID != "t1" || ts[2].ID != "t3" {
		t.Fatalf("ListTenants(group b) = got %+v, %v, want named, t1 and t3", ts, err)
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
	unavailable("MoveTenant(t2 to c, never run)", a.MoveTenant(ctx, "t2", "c"), "c", store.GroupUnknown)
	releaseB()
	unavailable("MoveTenant(t2 to b, no server holding its lock)", a.MoveTenant(ctx, "t2", "b"), "b", store.GroupNoServer)
	releaseB = lead(t, "b")
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

	// The default group's active server of now (the handle a was deposed
	// by the epoch raised above).
	a2 := open(t, store.DefaultGroup)
	e2, err := a2.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2.SetFence(e2)

	// Draining: b keeps its tenants and takes no new one.
	if g, err := a2.SetGroupState(ctx, "b", store.GroupDraining); err != nil || g.State != store.GroupDraining || g.ChangedAt.IsZero() {
		t.Fatalf("SetGroupState(b, draining) = got %+v, %v", g, err)
	}
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("d%d", i)
		if got, err := a2.CreateTenant(ctx, store.Tenant{ID: id, Name: id}); err != nil || got.Group != store.DefaultGroup {
			t.Fatalf("CreateTenant(%s) with b draining = got %+v, %v, want the default group", id, got, err)
		}
	}
	_, err = a2.CreateTenant(ctx, store.Tenant{ID: "drained", Name: "x", Group: "b"})
	unavailable("CreateTenant(group b, draining)", err, "b", string(store.GroupDraining))
	if _, err := a2.SetGroupState(ctx, "b", store.GroupRetired); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("SetGroupState(b, retired) with tenants on it = got %v, want ErrConflict", err)
	}
	_, err = a2.SetGroupState(ctx, "c", store.GroupDraining)
	unavailable("SetGroupState(c, never run)", err, "c", store.GroupUnknown)
	if _, err := a2.SetGroupState(ctx, store.DefaultGroup, store.GroupRetired); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SetGroupState(default, retired) = got %v, want ErrInvalid", err)
	}

	// Recovery: b's server is gone (its lock released) while b's writes
	// still run on its epoch; the default group re-places b's tenants.
	if _, err := a2.RecoverTenant(ctx, "t1", store.DefaultGroup); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("RecoverTenant(t1) while b has an active server = got %v, want ErrConflict", err)
	}
	if err := succ.WriteLeases(ctx, "t1", []store.LeaseRow{{ID: 7, ResourceID: "r", Context: "x", Token: 7, ExpiresAt: 1 << 60}}, nil); err != nil {
		t.Fatalf("WriteLeases(t1 by b) = got %v, want nil", err)
	}
	releaseB()
	rec, err := a2.RecoverTenant(ctx, "t1", store.DefaultGroup)
	if err != nil || rec.From != "b" || rec.FencedEpoch <= e {
		t.Fatalf("RecoverTenant(t1 onto default) = got %+v, %v, want from b with b's epoch raised above %d", rec, err, e)
	}
	if err := succ.WriteLeases(ctx, "t3", nil, []uint64{1}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("WriteLeases(t3, still on b, by b's server on its old epoch) = got %v, want ErrFenced", err)
	}
	if err := succ.WriteLeases(ctx, "t1", nil, []uint64{7}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("WriteLeases(t1 by b after its recovery) = got %v, want ErrFenced", err)
	}
	if leases, err := a2.LoadLeases(ctx, "t1"); err != nil || len(leases) != 1 || leases[0].ID != 7 {
		t.Fatalf("LoadLeases(t1) after its recovery = got %+v, %v, want the lease b acknowledged", leases, err)
	}
	if tn, err := a2.GetTenant(ctx, "t1"); err != nil || tn.Group != store.DefaultGroup {
		t.Fatalf("GetTenant(t1) after its recovery = got %+v, %v, want the default group", tn, err)
	}
	for _, bad := range []struct {
		name, tenant, to string
		want             error
	}{
		{"onto its own group", "t3", "b", store.ErrInvalid},
		{"of an unknown tenant", "nobody", store.DefaultGroup, store.ErrNotFound},
		{"onto a group never run", "t3", "c", store.ErrGroupUnavailable},
	} {
		if _, err := a2.RecoverTenant(ctx, bad.tenant, bad.to); !errors.Is(err, bad.want) {
			t.Fatalf("RecoverTenant(%s) = got %v, want %v", bad.name, err, bad.want)
		}
	}
	for _, id := range []string{"named", "t3"} {
		if _, err := a2.RecoverTenant(ctx, id, store.DefaultGroup); err != nil {
			t.Fatalf("RecoverTenant(%s) = got %v, want nil", id, err)
		}
	}
	if g, err := a2.SetGroupState(ctx, "b", store.GroupRetired); err != nil || g.State != store.GroupRetired || g.Tenants != 0 {
		t.Fatalf("SetGroupState(b, retired) once empty = got %+v, %v", g, err)
	}
	releaseB = lead(t, "b")
	defer releaseB()
	if _, err := open(t, "b").BumpEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = a2.CreateTenant(ctx, store.Tenant{ID: "late", Name: "x", Group: "b"})
	unavailable("CreateTenant(group b, retired, its server back)", err, "b", string(store.GroupRetired))
	if err := a2.MoveTenant(ctx, "t1", "b"); !errors.Is(err, store.ErrGroupUnavailable) {
		t.Fatalf("MoveTenant(to b, retired) = got %v, want ErrGroupUnavailable", err)
	}
}
