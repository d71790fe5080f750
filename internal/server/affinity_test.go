package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// bindKeys acquires and releases (SUCCESS) one lease for each of n keys
// through pool and returns the resource each key got.
func bindKeys(t *testing.T, r *running, key string, n int) map[string]string {
	t.Helper()
	ctx := withKey(key)
	bound := map[string]string{}
	for i := range n {
		k := fmt.Sprint("session-", i)
		resp, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "login", TtlSeconds: 60, Affinity: k})
		if err != nil {
			t.Fatal(err)
		}
		l := resp.GetLease()
		bound[k] = l.GetResourceId()
		if _, err := r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
			t.Fatal(err)
		}
	}
	return bound
}

// sameBindings checks that every key still gets the resource it was bound
// to, not rebound.
func sameBindings(t *testing.T, r *running, key, when string, bound map[string]string) {
	t.Helper()
	ctx := withKey(key)
	for k, res := range bound {
		resp, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "login", TtlSeconds: 60, Affinity: k})
		if err != nil {
			t.Fatal(err)
		}
		if l := resp.GetLease(); l.GetResourceId() != res || l.GetRebound() {
			t.Fatalf("%s key %s got %s (rebound %v), want %s", when, k, l.GetResourceId(), l.GetRebound(), res)
		}
	}
}

func registerProxies(t *testing.T, r *running, key string, n int) {
	t.Helper()
	var rs []*repoolv1.Resource
	for i := range n {
		rs = append(rs, &repoolv1.Resource{Id: fmt.Sprintf("proxy-%02d", i), Capacity: 50})
	}
	if _, err := r.pool.Register(withKey(key), &repoolv1.RegisterRequest{Resources: rs}); err != nil {
		t.Fatal(err)
	}
}

// TestAffinitySurvivesARestart: through the real server on SQLite, 30 keys
// bound to resources of a pool of 12 get the same resources after the
// server is stopped and started again.
func TestAffinitySurvivesARestart(t *testing.T) {
	cfg := Config{Store: sqliteStore(t), Limits: requestLimit(1e6, 1e6)}
	r := start(t, cfg)
	registerProxies(t, r, r.key, 12)
	bound := bindKeys(t, r, r.key, 30)
	spread := map[string]bool{}
	for _, res := range bound {
		spread[res] = true
	}
	if len(spread) < 3 {
		t.Fatalf("30 keys bound to %d resources: too few to tell a kept binding from chance", len(spread))
	}
	r.stop(t)
	r2 := start(t, cfg)
	sameBindings(t, r2, r.key, "after a restart", bound)
}

// TestAffinitySurvivesAMove: keys bound on one group get the same
// resources on the group the tenant moved to (PostgreSQL).
func TestAffinitySurvivesAMove(t *testing.T) {
	a, b := groupPair(t)
	registerProxies(t, a, a.key, 12)
	bound := bindKeys(t, a, a.key, 30)
	if code := a.api(t, "POST", "/api/v1/tenants/demo/move", a.op, `{"group":"b"}`, nil); code != http.StatusOK {
		t.Fatalf("POST move to b = %d, want 200", code)
	}
	testenv.Eventually(t, 5*time.Second, "group b to serve the moved tenant", func() bool {
		_, err := b.pool.GetResource(withKey(a.key), &repoolv1.GetResourceRequest{Id: "proxy-00"})
		return err == nil
	})
	sameBindings(t, b, a.key, "after a move", bound)
}
