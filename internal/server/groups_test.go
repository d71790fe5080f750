package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

// groupPair starts the active servers of two groups, "default" (a, which
// creates the demo tenant) and "b", on one fresh PostgreSQL database.
func groupPair(t testing.TB) (a, b *running) {
	t.Helper()
	return groupPairWith(t, func(*Config) {})
}

// groupPairWith is groupPair with both servers' configuration changed by
// edit.
func groupPairWith(t testing.TB, edit func(*Config)) (a, b *running) {
	t.Helper()
	dsn := testenv.Postgres(t)
	cfg := func(name, group string) Config {
		c := Config{Store: dsn, HA: true, HAName: name, Group: group, HASessionTimeout: time.Second,
			HAInterval: 100 * time.Millisecond, PlacementInterval: 50 * time.Millisecond, CheckpointInterval: time.Hour}
		edit(&c)
		return c
	}
	a = start(t, cfg("a", ""))
	waitStatus(t, a, http.StatusOK, 5*time.Second)
	b = start(t, cfg("b", "b"))
	waitStatus(t, b, http.StatusOK, 5*time.Second)
	return a, b
}

// elsewhereGroup returns the group an UNAVAILABLE TENANT_ELSEWHERE refusal
// names, and false for any other answer.
func elsewhereGroup(err error) (string, bool) {
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		return "", false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == repoolv1.ReasonTenantElsewhere {
			return info.Metadata[repoolv1.ErrorInfoGroup], true
		}
	}
	return "", false
}

// TestGroupsIssueTokenNamesTheTenant: an IssueToken that reaches a group
// that does not serve the key's tenant (a client that did not know its
// tenant, so the front end sent it to the default group) is refused as
// TENANT_ELSEWHERE naming the group and the caller's own tenant, so that
// the client can send it again with the tenant's route entry; an unknown
// key learns nothing.
func TestGroupsIssueTokenNamesTheTenant(t *testing.T) {
	a, b := groupPair(t)
	_, err := b.authc.IssueToken(withKey(a.key), &repoolv1.IssueTokenRequest{})
	var info *errdetails.ErrorInfo
	for _, d := range status.Convert(err).Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if status.Code(err) != codes.Unavailable || info.GetReason() != repoolv1.ReasonTenantElsewhere ||
		info.GetMetadata()[repoolv1.ErrorInfoTenant] != "demo" || info.GetMetadata()[repoolv1.ErrorInfoGroup] != "default" {
		t.Fatalf("IssueToken(demo's key) on group b = %v (%v), want UNAVAILABLE TENANT_ELSEWHERE naming tenant demo and group default", err, info)
	}
	if _, err := b.authc.IssueToken(withKey("rpk_notakey"), &repoolv1.IssueTokenRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("IssueToken(unknown key) on group b = %v, want UNAUTHENTICATED", err)
	}
	if resp, err := a.authc.IssueToken(withKey(a.key), &repoolv1.IssueTokenRequest{}); err != nil || resp.GetTenant() != "demo" {
		t.Fatalf("IssueToken(demo's key) on the default group = %v, %v; want a token for demo", resp, err)
	}
}

// TestGroupsMoveATenantLive: a tenant is served by its group's active
// server only (the other group refuses it, retryably, naming the group);
// moved to the other group, it is refused by the source from then on and
// served by the target with everything it had: its resources and
// statistics, and the lease held across the move, with the same id, token
// and capacity (no second grant of a capacity-1 resource), renewable and
// releasable there; fencing tokens keep increasing; and it moves back.
func TestGroupsMoveATenantLive(t *testing.T) {
	a, b := groupPair(t)
	ctx := withKey(a.key)
	if _, err := b.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); err == nil {
		t.Fatal("Acquire(demo tenant) on group b = nil error, want it refused: the tenant is placed on the default group")
	} else if g, ok := elsewhereGroup(err); !ok || g != "default" {
		t.Fatalf("Acquire(demo tenant) on group b = %v, want UNAVAILABLE TENANT_ELSEWHERE naming group default", err)
	}
	if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}}); err != nil {
		t.Fatal(err)
	}
	held, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil || held.GetLease().GetResourceId() != "r1" {
		t.Fatalf("Acquire(r1) = %v, %v", held, err)
	}
	if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r2", Capacity: 5}}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := a.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: "r2", Context: "x", Outcome: repoolv1.Outcome_FAILURE}); err != nil {
			t.Fatal(err)
		}
	}
	r1Info, err := a.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	r1Registered := r1Info.GetResource().GetRegisteredAt().AsTime()

	var moved struct {
		Tenant struct {
			ID    string `json:"id"`
			Group string `json:"group"`
		} `json:"tenant"`
		From      string `json:"from"`
		RefusedMS int64  `json:"refused_ms"`
	}
	tenant := "demo"
	if code := a.api(t, "POST", "/api/v1/tenants/"+tenant+"/move", a.op, `{"group":"b"}`, &moved); code != http.StatusOK {
		t.Fatalf("POST move to b = %d, want 200", code)
	}
	if moved.Tenant.Group != "b" || moved.From != "default" {
		t.Fatalf("move answer = %+v, want the tenant on b, from default", moved)
	}
	t.Logf("the source refused the tenant's calls for %d ms", moved.RefusedMS)
	if _, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); err == nil {
		t.Fatal("Acquire on the source after the move = nil error, want it refused")
	} else if g, ok := elsewhereGroup(err); !ok || g != "b" {
		t.Fatalf("Acquire on the source after the move = %v, want UNAVAILABLE TENANT_ELSEWHERE naming group b", err)
	}

	// The target serves it within its placement interval.
	var info *repoolv1.GetResourceResponse
	testenv.Eventually(t, 5*time.Second, "group b to serve the moved tenant", func() bool {
		info, err = b.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r2"})
		return err == nil
	})
	if f := info.GetResource().GetAggregate().GetFailures(); f < 2.9 {
		t.Fatalf("r2's failures on the target = %v, want the 3 reported on the source", f)
	}
	if rf := info.GetResource().GetAggregate().GetRecentFailures(); rf != 3 {
		t.Fatalf("r2's recent failures on the target = %d, want the 3 reported on the source", rf)
	}
	// r1's uses and registration time move with it (they retire it).
	if r1, err := b.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"}); err != nil || r1.GetResource().GetUses() != 1 ||
		!r1.GetResource().GetRegisteredAt().AsTime().Equal(r1Registered) {
		t.Fatalf("r1 on the target = %v, %v; want 1 use, registered at %v", r1, err, r1Registered)
	}
	// r1 (capacity 1) is still leased: r2 is the only resource to grant.
	for i := 0; i < 5; i++ {
		l, err := b.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
		if err != nil {
			t.Fatalf("Acquire %d on the target = %v", i, err)
		}
		if l.GetLease().GetResourceId() == "r1" {
			t.Fatalf("Acquire on the target granted r1 again while its lease from the source is held: capacity 1 exceeded")
		}
		if l.GetLease().GetFencingToken() <= held.GetLease().GetFencingToken() {
			t.Fatalf("token on the target %d, before the move %d: tokens must keep increasing", l.GetLease().GetFencingToken(), held.GetLease().GetFencingToken())
		}
	}
	hl := held.GetLease()
	if _, err := b.pool.Renew(ctx, &repoolv1.RenewRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), TtlSeconds: 60}); err != nil {
		t.Fatalf("Renew(lease from the source) on the target = %v", err)
	}
	if _, err := b.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
		t.Fatalf("Release(lease from the source) on the target = %v", err)
	}

	// A move is the source's to make; the operator API names the group.
	var apiErr struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if code := a.api(t, "POST", "/api/v1/tenants/"+tenant+"/move", a.op, `{"group":"default"}`, &apiErr); code != http.StatusConflict || apiErr.Error.Code != "tenant_elsewhere" {
		t.Fatalf("POST move on the old source = %d %+v, want 409 tenant_elsewhere", code, apiErr)
	}
	if code := a.api(t, "PUT", "/api/v1/tenants/"+tenant+"/limits", a.op, `{"rate_per_second":5}`, &apiErr); code != http.StatusConflict || apiErr.Error.Code != "tenant_elsewhere" {
		t.Fatalf("PUT limits on the old source = %d %+v, want 409 tenant_elsewhere", code, apiErr)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"group":"b"}`, "invalid_argument"},
		{`{"group":"Not A Group"}`, "invalid_argument"},
		{`{}`, "invalid_argument"},
	} {
		if code := b.api(t, "POST", "/api/v1/tenants/"+tenant+"/move", a.op, bad.body, &apiErr); code != http.StatusBadRequest || apiErr.Error.Code != bad.want {
			t.Fatalf("POST move %s = %d %+v, want 400 %s", bad.body, code, apiErr, bad.want)
		}
	}
	var groups struct {
		Groups []struct {
			Name    string `json:"name"`
			Tenants int    `json:"tenants"`
			This    bool   `json:"this_server"`
			Holds   *struct {
				Tenants, Resources int
			} `json:"holds"`
		} `json:"groups"`
	}
	if code := b.api(t, "GET", "/api/v1/groups", a.op, "", &groups); code != http.StatusOK || len(groups.Groups) != 2 {
		t.Fatalf("GET groups = %d %+v, want both groups", code, groups)
	}
	if g := groups.Groups[0]; g.Name != "b" || g.Tenants != 1 || !g.This || g.Holds == nil || g.Holds.Resources != 2 {
		t.Fatalf("GET groups on b: b = %+v, want 1 tenant placed, held here with its 2 resources", g)
	}

	// And back.
	if code := b.api(t, "POST", "/api/v1/tenants/"+tenant+"/move", a.op, `{"group":"default"}`, &moved); code != http.StatusOK {
		t.Fatalf("POST move back = %d, want 200", code)
	}
	testenv.Eventually(t, 5*time.Second, "the default group to serve the tenant again", func() bool {
		_, err = a.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"})
		return err == nil
	})
	last, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if last.GetLease().GetFencingToken() <= hl.GetFencingToken() {
		t.Fatalf("token after moving back %d, first %d: tokens must keep increasing", last.GetLease().GetFencingToken(), hl.GetFencingToken())
	}
}

// TestGroupsMovesUnderLoad moves a tenant back and forth between two
// groups while 16 clients lease and release its capacity-1 resources as
// fast as they can, retrying a refused call on the other group's server as
// a client behind the front end would. No call fails for any other reason,
// no resource is ever held by two clients at once, every lease a client
// was granted is still there to release after the moves (none lost), and
// each resource's fencing tokens only increase.
func TestGroupsMovesUnderLoad(t *testing.T) {
	a, b := groupPair(t)
	ctx := withKey(a.key)
	servers := []*running{a, b}
	const resources, workers, moves = 20, 16, 6
	var res []*repoolv1.Resource
	for i := 0; i < resources; i++ {
		res = append(res, &repoolv1.Resource{Id: fmt.Sprintf("r%02d", i)})
	}
	if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: res}); err != nil {
		t.Fatal(err)
	}
	if code := a.api(t, "PUT", "/api/v1/tenants/demo/limits", a.op, `{"rate_per_second":1000000,"burst":1000000}`, nil); code != http.StatusOK {
		t.Fatalf("PUT limits = %d", code)
	}
	var (
		mu        sync.Mutex
		holder    = map[string]int{}
		lastToken = map[string]uint64{}
		failures  []string
		granted   atomic.Int64
		refusals  atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// call runs fn on the server that serves the tenant, switching servers
	// on a TENANT_ELSEWHERE (or not-active) refusal.
	// It gives up after 10 s of refusals, the bound of the test's other
	// waits: a move refuses for tens of milliseconds, but on a loaded
	// machine a group's election can take a second session timeout more.
	call := func(at *int, fn func(c repoolv1.PoolServiceClient) error) error {
		deadline := time.Now().Add(10 * time.Second)
		for try := 0; ; try++ {
			err := fn(servers[*at].pool)
			_, elsewhere := elsewhereGroup(err)
			if !elsewhere && status.Code(err) != codes.Unavailable {
				return err
			}
			refusals.Add(1)
			*at = 1 - *at
			if time.Now().After(deadline) {
				return fmt.Errorf("still refused after %d tries in 10s: %v", try, err)
			}
			time.Sleep(5 * time.Millisecond) // the other group takes the tenant in on its own schedule (real time)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			at := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				var l *repoolv1.Lease
				err := call(&at, func(c repoolv1.PoolServiceClient) error {
					r, err := c.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
					l = r.GetLease()
					return err
				})
				if status.Code(err) == codes.ResourceExhausted {
					continue
				}
				if err != nil {
					fail("worker %d: Acquire = %v", w, err)
					return
				}
				granted.Add(1)
				mu.Lock()
				if h, ok := holder[l.GetResourceId()]; ok {
					failures = append(failures, fmt.Sprintf("%s granted to worker %d while worker %d holds it", l.GetResourceId(), w, h))
				}
				if l.GetFencingToken() <= lastToken[l.GetResourceId()] {
					failures = append(failures, fmt.Sprintf("%s: token %d after %d", l.GetResourceId(), l.GetFencingToken(), lastToken[l.GetResourceId()]))
				}
				holder[l.GetResourceId()], lastToken[l.GetResourceId()] = w, l.GetFencingToken()
				mu.Unlock()
				mu.Lock()
				delete(holder, l.GetResourceId())
				mu.Unlock()
				err = call(&at, func(c repoolv1.PoolServiceClient) error {
					_, err := c.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS})
					return err
				})
				if err != nil {
					mu.Lock()
					holder[l.GetResourceId()] = w // not released: still held
					mu.Unlock()
					fail("worker %d: Release(%s token %d) = %v (a granted lease lost?)", w, l.GetResourceId(), l.GetFencingToken(), err)
					return
				}
			}
		})
	}
	var windows []int64
	from := 0
	for i := 0; i < moves; i++ {
		to := []string{"b", "default"}[i%2]
		var moved struct {
			RefusedMS int64 `json:"refused_ms"`
		}
		if code := servers[from].api(t, "POST", "/api/v1/tenants/demo/move", a.op, `{"group":"`+to+`"}`, &moved); code != http.StatusOK {
			t.Errorf("move %d to %s = %d, want 200", i, to, code)
			break
		}
		windows = append(windows, moved.RefusedMS)
		from = 1 - from
		target := servers[from]
		testenv.Eventually(t, 10*time.Second, "the target group to serve the moved tenant", func() bool {
			_, err := target.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r00"})
			return err == nil
		})
		before := granted.Load()
		// Not testenv.Eventually: when the leases do not come back, what the
		// workers met says why (they stop at their first failure).
		for deadline := time.Now().Add(10 * time.Second); granted.Load() <= before+workers; {
			if time.Now().After(deadline) {
				mu.Lock()
				seen := append([]string(nil), failures...)
				mu.Unlock()
				close(stop)
				wg.Wait()
				t.Fatalf("move %d to %s: waited 10s for leases to be granted again (%d since the move, %d refusals retried); the workers met: %v",
					i, to, granted.Load()-before, refusals.Load(), seen)
			}
			time.Sleep(10 * time.Millisecond) // a poll of the workers' counter
		}
	}
	close(stop)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d moves, source refusal windows %v ms, %d leases granted, %d refusals retried", len(windows), windows, granted.Load(), refusals.Load())
}

// TestGroupsMoveInterrupted: a move that cannot complete leaves the tenant
// where it was, served, with its state. (1) The handover's transaction
// cannot get the tenant's row (held by another session) before the move's
// deadline: the move fails and is rolled back, and the source serves the
// tenant again, the lease held before the move included. (2) The source
// dies while its move waits (its leader session ends): the move either
// commits before the default group's standby takes over (the takeover
// waits for the move's transaction, which holds the group's epoch row),
// and group b serves the tenant, or it is fenced, and the new active
// server of the default group serves it; either way exactly one group
// serves it, with its lease.
func TestGroupsMoveInterrupted(t *testing.T) {
	dsn := testenv.Postgres(t)
	cfg := func(name, group string) Config {
		return Config{Store: dsn, HA: true, HAName: name, Group: group, HASessionTimeout: time.Second,
			HAInterval: 100 * time.Millisecond, PlacementInterval: 50 * time.Millisecond, CheckpointInterval: time.Hour}
	}
	a := start(t, cfg("a", ""))
	waitStatus(t, a, http.StatusOK, 5*time.Second)
	a2 := start(t, cfg("a2", ""))
	waitStatus(t, a2, http.StatusNotFound, 5*time.Second)
	b := start(t, cfg("b", "b"))
	waitStatus(t, b, http.StatusOK, 5*time.Second)
	ctx := withKey(a.key)
	if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}}); err != nil {
		t.Fatal(err)
	}
	held, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	hl := held.GetLease()
	lockRow := func() (unlock func()) {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(context.Background(), `SELECT 1 FROM tenants WHERE id = 'demo' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		return func() { tx.Rollback(context.Background()); conn.Close(context.Background()) }
	}

	// (1) Rolled back.
	unlock := lockRow()
	mctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = a.s.tenants.MoveOut(mctx, "demo", "b")
	cancel()
	unlock()
	if err == nil {
		t.Fatal("MoveOut with the tenant's row held elsewhere past its deadline = nil error, want it failed")
	}
	if _, err := a.pool.Renew(ctx, &repoolv1.RenewRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), TtlSeconds: 60}); err != nil {
		t.Fatalf("Renew on the source after a failed move = %v, want the tenant served again with its lease", err)
	}
	if _, err := b.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"}); err == nil {
		t.Fatal("group b serves the tenant after a failed move")
	}

	// (2) The source dies while its move waits for the row.
	unlock = lockRow()
	moved := make(chan error, 1)
	go func() {
		_, err := a.s.tenants.MoveOut(context.Background(), "demo", "b")
		moved <- err
	}()
	testenv.Eventually(t, 5*time.Second, "the move to refuse the tenant's calls on the source", func() bool {
		_, err := a.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"})
		_, elsewhere := elsewhereGroup(err)
		return elsewhere
	})
	endLeaderSession(t, dsn) // the source's leader session, as when its host dies
	// The move's transaction holds the group's epoch row: the successor's
	// takeover waits for it to end, so the move either commits before the
	// takeover (the move completes) or sees the new epoch (it is fenced).
	unlock()
	var moveErr error
	select {
	case moveErr = <-moved:
	case <-time.After(20 * time.Second):
		t.Fatal("the dying source's move did not end")
	}
	waitStatus(t, a2, http.StatusOK, 10*time.Second)
	serving, other := a2, b
	switch {
	case moveErr == nil:
		serving, other = b, a2
		t.Log("the move committed before the successor took over: group b serves the tenant")
	case errors.Is(moveErr, store.ErrFenced):
		t.Log("the move was fenced: the default group's new active server serves the tenant")
	default:
		t.Fatalf("the dying source's move = %v, want it completed or fenced", moveErr)
	}
	testenv.Eventually(t, 5*time.Second, "the tenant's group to serve it", func() bool {
		_, err := serving.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"})
		return err == nil
	})
	if _, err := serving.pool.Renew(ctx, &repoolv1.RenewRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), TtlSeconds: 60}); err != nil {
		t.Fatalf("Renew where the tenant is served = %v, want its lease there", err)
	}
	if _, err := other.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"}); err == nil {
		t.Fatal("both groups serve the tenant")
	}
}

// TestGroupsMoveOfATenantNotTakenInYet: a move asked of the active server
// of the group a tenant was just moved to, before its placement check took
// the tenant in, is refused with a message that says so — not "served by
// group b, not by this server's group b".
func TestGroupsMoveOfATenantNotTakenInYet(t *testing.T) {
	a, b := groupPairWith(t, func(c *Config) { c.PlacementInterval = time.Hour })
	if code := a.api(t, "POST", "/api/v1/tenants/demo/move", a.op, `{"group":"b"}`, nil); code != http.StatusOK {
		t.Fatalf("POST move of demo to b = %d, want 200", code)
	}
	var refusal struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if code := b.api(t, "POST", "/api/v1/tenants/demo/move", a.op, `{"group":"default"}`, &refusal); code != http.StatusConflict {
		t.Fatalf("POST move of demo back, on b before it took demo in = %d, want 409", code)
	}
	const want = `tenant "demo" is placed on this server's group "b" but this server does not serve it yet: ` +
		`it takes the tenants placed on its group in at its next placement check (--placement-interval); retry shortly`
	if refusal.Error.Code != "tenant_elsewhere" || refusal.Error.Message != want {
		t.Errorf("refusal = %+v, want code tenant_elsewhere, message %q", refusal.Error, want)
	}
}
