package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/postgres"
	"github.com/repool/repool/internal/testenv"
)

// The attack of issue 32, run against real servers on one PostgreSQL: an
// operator names a group no server runs, or retires one carelessly, and
// tenants end up where nobody serves them.

// apiErr is a control-plane error body.
type apiErr struct {
	Error struct{ Code, Message string } `json:"error"`
}

// groupView is one group of GET /api/v1/groups.
type groupView struct {
	Name         string `json:"name"`
	State        string `json:"state"`
	ActiveServer bool   `json:"active_server"`
	Epoch        uint32 `json:"epoch"`
	Tenants      int    `json:"tenants"`
}

func listGroups(t *testing.T, r *running, op string) map[string]groupView {
	t.Helper()
	var out struct{ Groups []groupView }
	if code := r.api(t, "GET", "/api/v1/groups", op, "", &out); code != http.StatusOK {
		t.Fatalf("GET groups = %d", code)
	}
	m := map[string]groupView{}
	for _, g := range out.Groups {
		m[g.Name] = g
	}
	return m
}

// groupCfg is the configuration of a server of group in the tests below.
func groupCfg(dsn, name, group string) Config {
	return Config{Store: dsn, HA: true, HAName: name, Group: group, HASessionTimeout: time.Second,
		HAInterval: 100 * time.Millisecond, PlacementInterval: 50 * time.Millisecond, CheckpointInterval: time.Hour}
}

// tenantGroup returns the group tenant is placed on, "" if it does not
// exist.
func tenantGroup(t *testing.T, r *running, op, tenant string) string {
	t.Helper()
	var tj struct{ Group string }
	if code := r.api(t, "GET", "/api/v1/tenants/"+tenant, op, "", &tj); code != http.StatusOK {
		return ""
	}
	return tj.Group
}

// wantNamesGroups fails unless msg names every group of names.
func wantNamesGroups(t *testing.T, what, msg string, names ...string) {
	t.Helper()
	for _, n := range names {
		if !strings.Contains(msg, n+" (") {
			t.Fatalf("%s: message %q does not name the known group %q", what, msg, n)
		}
	}
}

// waitLockFree waits until no session holds group's leader lock: its
// active server is gone.
func waitLockFree(t *testing.T, dsn, group string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	id := postgres.GroupLockID(group)
	testenv.Eventually(t, 5*time.Second, "group "+group+"'s leader lock to be free", func() bool {
		var n int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
AND objsubid = 1 AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & x'ffffffff'::bigint)::oid`, id).Scan(&n)
		return err == nil && n == 0
	})
}

// TestGroupsUnknownGroupRefused: creating a tenant on, or moving one to, a
// group no server has ever run is refused with a message that names the
// known groups, and changes nothing: no tenant is created, the moved
// tenant stays where it is and is served there.
func TestGroupsUnknownGroupRefused(t *testing.T) {
	a, b := groupPair(t)
	_ = b
	var e apiErr
	code := a.api(t, "POST", "/api/v1/tenants", a.op, `{"id":"acme","name":"Acme","group":"nosuch"}`, &e)
	if code != http.StatusBadRequest || e.Error.Code != "invalid_argument" || !strings.Contains(e.Error.Message, `"nosuch" is not a known group`) {
		t.Fatalf("POST tenant on group nosuch = %d %+v, want 400 invalid_argument: not a known group", code, e)
	}
	wantNamesGroups(t, "create on an unknown group", e.Error.Message, "default", "b")
	if g := tenantGroup(t, a, a.op, "acme"); g != "" {
		t.Fatalf("a refused create left tenant acme on group %q", g)
	}

	ctx := withKey(a.key)
	if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}}); err != nil {
		t.Fatal(err)
	}
	e = apiErr{}
	code = a.api(t, "POST", "/api/v1/tenants/demo/move", a.op, `{"group":"nosuch"}`, &e)
	if code != http.StatusBadRequest || e.Error.Code != "invalid_argument" || !strings.Contains(e.Error.Message, `"nosuch" is not a known group`) {
		t.Fatalf("POST move to group nosuch = %d %+v, want 400 invalid_argument: not a known group", code, e)
	}
	wantNamesGroups(t, "move to an unknown group", e.Error.Message, "default", "b")
	if g := tenantGroup(t, a, a.op, "demo"); g != "default" {
		t.Fatalf("after a refused move the tenant is on group %q, want default", g)
	}
	if _, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); err != nil {
		t.Fatalf("Acquire after a refused move = %v, want the tenant served where it was", err)
	}
}

// TestGroupsPlacementSkipsGroupsThatCannotServe: a group whose only server
// stopped (known, no active server) and a retired group get no tenant
// created without a group, and a tenant named onto them is refused; the
// fewest-tenants rule counts only the groups that can serve.
func TestGroupsPlacementSkipsGroupsThatCannotServe(t *testing.T) {
	dsn := testenv.Postgres(t)
	a := start(t, groupCfg(dsn, "a", ""))
	waitStatus(t, a, http.StatusOK, 5*time.Second)
	b := start(t, groupCfg(dsn, "b", "b"))
	waitStatus(t, b, http.StatusOK, 5*time.Second)
	c := start(t, groupCfg(dsn, "c", "c"))
	waitStatus(t, c, http.StatusOK, 5*time.Second)
	c.stop(t)
	waitLockFree(t, dsn, "c")

	// c holds no tenant, fewer than any: the old rule would pick it.
	for i := 0; i < 4; i++ {
		id := fmt.Sprintf("t%d", i)
		var tj struct{ Group string }
		if code := a.api(t, "POST", "/api/v1/tenants", a.op, `{"id":"`+id+`","name":"x"}`, &tj); code != http.StatusCreated {
			t.Fatalf("POST tenant %s = %d", id, code)
		}
		if tj.Group == "c" {
			t.Fatalf("tenant %s placed on group c, which has no active server", id)
		}
	}
	var e apiErr
	code := a.api(t, "POST", "/api/v1/tenants", a.op, `{"id":"onc","name":"x","group":"c"}`, &e)
	if code != http.StatusConflict || !strings.Contains(e.Error.Message, `"c" has no active server`) {
		t.Fatalf("POST tenant on group c (no server) = %d %+v, want 409 naming no active server", code, e)
	}
	wantNamesGroups(t, "create on a group without a server", e.Error.Message, "b", "c", "default")

	// Retired, c takes nothing even with its server back.
	if code := a.api(t, "PUT", "/api/v1/groups/c", a.op, `{"state":"retired"}`, nil); code != http.StatusOK {
		t.Fatalf("PUT group c retired = %d, want 200", code)
	}
	c2 := start(t, groupCfg(dsn, "c2", "c"))
	waitStatus(t, c2, http.StatusOK, 5*time.Second)
	if g := listGroups(t, a, a.op)["c"]; g.State != "retired" || !g.ActiveServer {
		t.Fatalf("group c = %+v, want retired with its server back", g)
	}
	for i := 4; i < 8; i++ {
		id := fmt.Sprintf("t%d", i)
		var tj struct{ Group string }
		if code := a.api(t, "POST", "/api/v1/tenants", a.op, `{"id":"`+id+`","name":"x"}`, &tj); code != http.StatusCreated {
			t.Fatalf("POST tenant %s = %d", id, code)
		}
		if tj.Group == "c" {
			t.Fatalf("tenant %s placed on the retired group c", id)
		}
	}
	e = apiErr{}
	if code := a.api(t, "POST", "/api/v1/tenants/demo/move", a.op, `{"group":"c"}`, &e); code != http.StatusConflict || !strings.Contains(e.Error.Message, "retired") {
		t.Fatalf("POST move to the retired group c = %d %+v, want 409 retired", code, e)
	}
	gs := listGroups(t, a, a.op)
	if gs["c"].Tenants != 0 || gs["b"].Tenants+gs["default"].Tenants != 9 {
		t.Fatalf("groups = %+v, want the 9 tenants on b and default, none on c", gs)
	}
}

// TestGroupsDrainAndRetire runs docs/ha.md's "retire a group": drain it
// (it keeps serving its tenants and takes no new one), move its tenants
// away (each served on its new group with its lease), retire it (refused
// while a tenant is left), stop its server: no tenant is stranded.
func TestGroupsDrainAndRetire(t *testing.T) {
	a, b := groupPair(t)
	var e apiErr
	ctx, held := acmeOnB(t, a, b)

	// 1. Drain.
	var g groupView
	if code := a.api(t, "PUT", "/api/v1/groups/b", a.op, `{"state":"draining"}`, &g); code != http.StatusOK || g.State != "draining" {
		t.Fatalf("PUT group b draining = %d %+v", code, g)
	}
	if _, err := b.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"}); err != nil {
		t.Fatalf("a draining group stopped serving its tenant: %v", err)
	}
	var tj struct{ Group string }
	if code := a.api(t, "POST", "/api/v1/tenants", a.op, `{"id":"new1","name":"x"}`, &tj); code != http.StatusCreated || tj.Group != "default" {
		t.Fatalf("POST tenant with b draining = %d %+v, want it on default", code, tj)
	}
	if code := a.api(t, "POST", "/api/v1/tenants", a.op, `{"id":"new2","name":"x","group":"b"}`, &e); code != http.StatusConflict || !strings.Contains(e.Error.Message, "draining") {
		t.Fatalf("POST tenant on the draining group = %d %+v, want 409 draining", code, e)
	}
	if code := a.api(t, "POST", "/api/v1/tenants/demo/move", a.op, `{"group":"b"}`, &e); code != http.StatusConflict || !strings.Contains(e.Error.Message, "draining") {
		t.Fatalf("POST move to the draining group = %d %+v, want 409 draining", code, e)
	}
	// Retiring a group that still has a tenant is refused.
	if code := a.api(t, "PUT", "/api/v1/groups/b", a.op, `{"state":"retired"}`, &e); code != http.StatusConflict || !strings.Contains(e.Error.Message, "1 tenant placed") {
		t.Fatalf("PUT group b retired with a tenant on it = %d %+v, want 409 naming it", code, e)
	}

	// 2. Move its tenants away.
	var left struct{ Tenants []struct{ ID string } }
	if code := a.api(t, "GET", "/api/v1/tenants?group=b", a.op, "", &left); code != http.StatusOK || len(left.Tenants) != 1 || left.Tenants[0].ID != "acme" {
		t.Fatalf("GET tenants?group=b = %d %+v, want acme", code, left)
	}
	if code := b.api(t, "POST", "/api/v1/tenants/acme/move", a.op, `{"group":"default"}`, nil); code != http.StatusOK {
		t.Fatalf("POST move acme to default = %d", code)
	}
	hl := held.GetLease()
	testenv.Eventually(t, 5*time.Second, "the default group to serve acme with its lease", func() bool {
		_, err := a.pool.Renew(ctx, &repoolv1.RenewRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), TtlSeconds: 60})
		return err == nil
	})

	// 3. Retire, 4. stop its server.
	if code := a.api(t, "PUT", "/api/v1/groups/b", a.op, `{"state":"retired"}`, &g); code != http.StatusOK || g.State != "retired" || g.Tenants != 0 {
		t.Fatalf("PUT group b retired once empty = %d %+v", code, g)
	}
	b.stop(t)
	for _, tn := range []string{"demo", "acme", "new1"} {
		if g := tenantGroup(t, a, a.op, tn); g != "default" {
			t.Fatalf("tenant %s on group %q after b was retired, want default", tn, g)
		}
	}
	if _, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); err == nil {
		t.Fatal("Acquire(r1) granted while the lease from group b is held: capacity 1 exceeded")
	}
	if _, err := a.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
		t.Fatalf("Release(lease from b) on the default group = %v", err)
	}
	if code := a.api(t, "POST", "/api/v1/tenants", a.op, `{"id":"new3","name":"x","group":"b"}`, &e); code != http.StatusConflict || !strings.Contains(e.Error.Message, "retired") {
		t.Fatalf("POST tenant on the retired group = %d %+v, want 409 retired", code, e)
	}
	if code := a.api(t, "PUT", "/api/v1/groups/default", a.op, `{"state":"retired"}`, &e); code != http.StatusBadRequest {
		t.Fatalf("PUT group default retired = %d %+v, want 400", code, e)
	}
	if code := a.api(t, "PUT", "/api/v1/groups/nosuch", a.op, `{"state":"draining"}`, &e); code != http.StatusNotFound {
		t.Fatalf("PUT unknown group = %d %+v, want 404", code, e)
	}
	wantNamesGroups(t, "PUT unknown group", e.Error.Message, "b", "default")
}

// TestGroupsRecoverAStrandedTenant: group b's only server dies (its leader
// session ends, as when its host does) with a tenant placed there that
// holds an acknowledged lease. The operator recovers the tenant onto the
// default group (refused while b had an active server): the default group
// serves it with its resources and the lease b acknowledged (renewable,
// its capacity-1 resource not granted twice, tokens above it); b's epoch
// is raised, so a server of b still writing on its old epoch is fenced;
// b's server, back, does not serve the tenant; the recovery is audited.
func TestGroupsRecoverAStrandedTenant(t *testing.T) {
	dsn := testenv.Postgres(t)
	a := start(t, groupCfg(dsn, "a", ""))
	waitStatus(t, a, http.StatusOK, 5*time.Second)
	bcfg := groupCfg(dsn, "b", "b")
	bcfg.HASessionTimeout = 3 * time.Second // its pause after losing its session: time to recover meanwhile
	b := start(t, bcfg)
	waitStatus(t, b, http.StatusOK, 5*time.Second)
	ctx, held := acmeOnB(t, a, b)
	hl := held.GetLease()
	if _, err := b.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r2", Capacity: 5}}}); err != nil {
		t.Fatal(err)
	}

	var e apiErr
	if code := a.api(t, "POST", "/api/v1/groups/default/recover", a.op, `{"tenant":"acme"}`, &e); code != http.StatusConflict || !strings.Contains(e.Error.Message, "has an active server") {
		t.Fatalf("recover acme while b has an active server = %d %+v, want 409", code, e)
	}
	if _, err := b.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"}); err != nil {
		t.Fatalf("a refused recovery changed where acme is served: %v", err)
	}
	oldEpoch := listGroups(t, a, a.op)["b"].Epoch

	// b's host dies: its leader session ends.
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'repool-leader:b'`); err != nil {
		t.Fatal(err)
	}
	waitLockFree(t, dsn, "b")
	if g := listGroups(t, a, a.op)["b"]; g.ActiveServer {
		t.Fatalf("group b = %+v once its lock is free, want no active server", g)
	}
	for _, bad := range []struct {
		path, body string
		code       int
	}{
		{"/api/v1/groups/nosuch/recover", `{"tenant":"acme"}`, http.StatusBadRequest},
		{"/api/v1/groups/b/recover", `{"tenant":"acme"}`, http.StatusBadRequest},
		{"/api/v1/groups/default/recover", `{"tenant":"nobody"}`, http.StatusNotFound},
	} {
		if code := a.api(t, "POST", bad.path, a.op, bad.body, &e); code != bad.code {
			t.Fatalf("POST %s %s = %d %+v, want %d", bad.path, bad.body, code, e, bad.code)
		}
	}
	var rec struct {
		Tenant      struct{ Group string }
		From        string
		FencedEpoch uint32 `json:"fenced_epoch"`
	}
	if code := a.api(t, "POST", "/api/v1/groups/default/recover", a.op, `{"tenant":"acme"}`, &rec); code != http.StatusOK {
		t.Fatalf("recover acme onto default = %d, want 200", code)
	}
	if rec.Tenant.Group != "default" || rec.From != "b" || rec.FencedEpoch <= oldEpoch {
		t.Fatalf("recover answer = %+v, want acme on default, from b, b's epoch raised above %d", rec, oldEpoch)
	}

	// The default group serves it with everything b acknowledged.
	testenv.Eventually(t, 5*time.Second, "the default group to serve the recovered tenant", func() bool {
		_, err := a.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r2"})
		return err == nil
	})
	if _, err := a.pool.Renew(ctx, &repoolv1.RenewRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), TtlSeconds: 60}); err != nil {
		t.Fatalf("Renew(lease b acknowledged) on the default group = %v", err)
	}
	for i := 0; i < 3; i++ {
		l, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
		if err != nil {
			t.Fatalf("Acquire %d after the recovery = %v", i, err)
		}
		if l.GetLease().GetResourceId() == "r1" {
			t.Fatal("r1 granted again while the lease b acknowledged is held: capacity 1 exceeded")
		}
		if l.GetLease().GetFencingToken() <= hl.GetFencingToken() {
			t.Fatalf("token after the recovery %d, before %d: tokens must keep increasing", l.GetLease().GetFencingToken(), hl.GetFencingToken())
		}
	}

	// A server of b still running on its old epoch writes nothing.
	zombie, err := postgres.Open(context.Background(), dsn, store.Options{Group: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	zombie.SetFence(oldEpoch)
	lid, err := strconv.ParseUint(hl.GetLeaseId(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := zombie.WriteLeases(context.Background(), "acme", nil, []uint64{lid}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("WriteLeases(acme) by b on its old epoch = %v, want ErrFenced", err)
	}

	// b's server takes its group's lock again, and a new server of b
	// starts: neither serves acme.
	waitStatus(t, b, http.StatusOK, 10*time.Second)
	// Until its election settles (a loaded machine can cost it a 1 s
	// session and a step-down) it may answer "not the active server";
	// what it may never do is serve acme.
	var last error
	testenv.Eventually(t, 10*time.Second, "b's server, back, to refuse the recovered tenant as served by default", func() bool {
		_, last = b.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"})
		if last == nil {
			t.Fatal("b's server, back, serves the recovered tenant")
		}
		g, ok := elsewhereGroup(last)
		return ok && g == "default"
	})
	b.stop(t)
	b2 := start(t, groupCfg(dsn, "b2", "b"))
	waitStatus(t, b2, http.StatusOK, 5*time.Second)
	if _, err := b2.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"}); err == nil {
		t.Fatal("a restarted server of b serves the recovered tenant")
	}
	if _, err := a.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
		t.Fatalf("Release(lease b acknowledged) on the default group = %v", err)
	}

	var audit struct {
		Entries []struct{ Actor, Action, Detail string }
	}
	if code := a.api(t, "GET", "/api/v1/tenants/acme/audit", a.op, "", &audit); code != http.StatusOK {
		t.Fatalf("GET acme audit = %d", code)
	}
	found := false
	for _, en := range audit.Entries {
		if en.Action == "tenant.recover" && en.Actor == "operator" && strings.Contains(en.Detail, `from="b" to="default"`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("acme's audit = %+v, want a tenant.recover entry from b to default", audit.Entries)
	}
}

// acmeOnB creates tenant acme on group b through b's server (with a's
// operator token), registers resource r1 once b serves it, and leases it:
// the caller's context (acme's key) and the lease.
func acmeOnB(t *testing.T, a, b *running) (context.Context, *repoolv1.AcquireResponse) {
	t.Helper()
	if code := b.api(t, "POST", "/api/v1/tenants", a.op, `{"id":"acme","name":"Acme","group":"b"}`, nil); code != http.StatusCreated {
		t.Fatalf("POST tenant acme on b = %d", code)
	}
	var key struct{ Key string }
	if code := b.api(t, "POST", "/api/v1/tenants/acme/keys", a.op, `{"name":"k"}`, &key); code != http.StatusCreated {
		t.Fatalf("POST acme key = %d", code)
	}
	ctx := withKey(key.Key)
	testenv.Eventually(t, 5*time.Second, "group b to serve acme", func() bool {
		_, err := b.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}})
		return err == nil
	})
	held, err := b.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, held
}
