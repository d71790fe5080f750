package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	rpstatus "github.com/repool/repool/internal/status"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/postgres"
)

// TestSwitchoverHandsOverInPlace: a leads, b and c stand by (b first in
// the queue for the lock). While a client acquires leases from a as fast
// as it answers, a switchover to c: a stops taking calls (refused as a
// standby refuses them), and every lease a acknowledged is c's to renew
// once c leads (a drained its calls and checkpointed before it gave up the
// lock); c leads under a higher epoch, b still stands by, and a, still
// running, stands by again.
func TestSwitchoverHandsOverInPlace(t *testing.T) {
	dsn, a, b := haPair(t)
	c := startWith(t, Config{Store: dsn, HA: true, HAName: "c", HASessionTimeout: time.Second, HAInterval: 100 * time.Millisecond, CheckpointInterval: time.Hour}, Options{})
	waitStatus(t, c, http.StatusNotFound, 5*time.Second)
	ctx := withKey(a.key)
	var res []*repoolv1.Resource
	for i := range 400 {
		res = append(res, &repoolv1.Resource{Id: fmt.Sprintf("r%d", i), Capacity: 1})
	}
	if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: res}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	epoch := func() int64 {
		t.Helper()
		var e int64
		if err := conn.QueryRow(context.Background(), `SELECT value FROM server_counters WHERE name = $1`, store.EpochCounter(store.DefaultGroup)).Scan(&e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	epochBefore := epoch()

	// The client: acquires on a until a refuses as a standby.
	var mu sync.Mutex
	var acked []*repoolv1.Lease
	var other []error
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			resp, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
			mu.Lock()
			switch {
			case err == nil:
				acked = append(acked, resp.GetLease())
			case status.Code(err) == codes.Unavailable && status.Convert(err).Message() == "not the active server":
				mu.Unlock()
				return
			default:
				other = append(other, err)
			}
			mu.Unlock()
		}
	}()

	from, took, err := postgres.Switchover(context.Background(), conn, store.DefaultGroup, "c", 20*time.Second, func(string) {})
	if err != nil || from != "a" {
		t.Fatalf("Switchover(to c) = got from %q, %v, want from a", from, err)
	}
	t.Logf("c led %v after the request", took.Round(time.Millisecond))
	<-stopped
	if len(other) > 0 {
		t.Fatalf("calls to a during the switchover failed otherwise than refused as a standby: %v", other)
	}
	if len(acked) == 0 {
		t.Fatal("no lease acquired from a before the switchover: the client measured nothing")
	}
	waitStatus(t, c, http.StatusOK, 5*time.Second)
	waitStatus(t, a, http.StatusNotFound, 5*time.Second)
	if activeStatus(t, b) != http.StatusNotFound {
		t.Fatalf("b's /readyz/active = %d after a switchover to c, want 404", activeStatus(t, b))
	}
	if e := epoch(); e <= epochBefore {
		t.Fatalf("c's epoch = %d, want above a's %d", e, epochBefore)
	}
	for _, l := range acked {
		if _, err := c.pool.Renew(ctx, &repoolv1.RenewRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), TtlSeconds: 60}); err != nil {
			t.Fatalf("Renew(lease %s, acknowledged by a) on c = %v: a lease acknowledged before the switchover is lost", l.GetLeaseId(), err)
		}
	}
	t.Logf("%d leases acknowledged by a, all renewed on c", len(acked))
	if st := a.s.mode.(*elected).ha.elector.State(); st.State != rpstatus.ElectionWaiting {
		t.Fatalf("a's election after the switchover = %+v, want it waiting for the lock (standing by)", st)
	}
}
