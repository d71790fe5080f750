package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/lb/agent"
	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func activeStatus(t testing.TB, r *running) int {
	t.Helper()
	resp, err := http.Get("http://" + r.s.HTTPAddr() + "/readyz/active")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitStatus(t testing.TB, r *running, want int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for activeStatus(t, r) != want {
		if time.Since(start) > within {
			t.Fatalf("/readyz/active of %s = %d, want %d within %v", r.s.cfg.HAName, activeStatus(t, r), want, within)
		}
		time.Sleep(20 * time.Millisecond) // a poll of another goroutine's election, which runs on real time
	}
	return time.Since(start)
}

// haPair starts two HA servers, a (active) and b (standby), on a fresh
// PostgreSQL database, with hour-long checkpoint intervals: only the
// journal makes registrations and leases durable.
func haPair(t *testing.T) (dsn string, a, b *running) {
	t.Helper()
	return haPairWith(t, Options{})
}

// haPairWith is haPair with opts for both servers (a clock they share).
func haPairWith(t *testing.T, opts Options) (dsn string, a, b *running) {
	t.Helper()
	dsn = testenv.Postgres(t)
	cfg := func(name string) Config {
		return Config{Store: dsn, HA: true, HAName: name, HASessionTimeout: time.Second, HAInterval: 100 * time.Millisecond, CheckpointInterval: time.Hour}
	}
	a = startWith(t, cfg("a"), opts)
	waitStatus(t, a, http.StatusOK, 5*time.Second)
	b = startWith(t, cfg("b"), opts)
	waitStatus(t, b, http.StatusNotFound, 5*time.Second)
	return dsn, a, b
}

// endLeaderSession ends the database session of leader a, as when its host
// dies.
func endLeaderSession(t *testing.T, dsn string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'repool-leader:a'`); err != nil {
		t.Fatal(err)
	}
}

func TestHAFailoverKeepsLeasesAndFencesTokens(t *testing.T) {
	dsn, a, b := haPair(t)
	ctx := withKey(a.key)

	_, err := b.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "not the active server" {
		t.Fatalf("Acquire on the standby = %v, want UNAVAILABLE \"not the active server\"", err)
	}
	if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}}}); err != nil {
		t.Fatal(err)
	}
	acq, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	held := acq.GetLease()

	// The leader's database session dies (as when its host does): it must
	// step down, and the standby must take over.
	endLeaderSession(t, dsn)
	took := waitStatus(t, b, http.StatusOK, 5*time.Second)
	t.Logf("standby active %v after the leader's session died", took)
	// The former leader notices at its next session check (HAInterval);
	// until then its writes are fenced in SQL.
	testenv.Eventually(t, time.Second, "the former leader to stop answering /readyz/active 200 after losing its session",
		func() bool { return activeStatus(t, a) != http.StatusOK })

	// The lease granted by the former leader holds capacity on the new one,
	// and its holder can renew and release it there.
	if _, err := b.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Acquire(r1 leased before the failover) = %v, want RESOURCE_EXHAUSTED: capacity 1 must survive the failover", err)
	}
	if _, err := b.pool.Renew(ctx, &repoolv1.RenewRequest{LeaseId: held.GetLeaseId(), FencingToken: held.GetFencingToken(), TtlSeconds: 60}); err != nil {
		t.Fatalf("Renew(lease of the former leader) on the new leader = %v", err)
	}
	if _, err := b.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: held.GetLeaseId(), FencingToken: held.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
		t.Fatalf("Release(lease of the former leader) on the new leader = %v", err)
	}
	next, err := b.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if next.GetLease().GetFencingToken() <= held.GetFencingToken() {
		t.Fatalf("token after takeover %d <= token before %d", next.GetLease().GetFencingToken(), held.GetFencingToken())
	}
	// The registration acknowledged by the former leader was not lost.
	if _, err := b.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r1"}); err != nil {
		t.Fatalf("GetResource(r1) on the new leader = %v", err)
	}
	// The former leader is a standby now and refuses the data plane.
	if _, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Acquire on the deposed leader = %v, want UNAVAILABLE", err)
	}
}

// TestFailoverKeepsALiveLeaseBesideStaleJournalRows: a resource leased,
// removed and registered again leaves its old lease in the journal; after a
// failover the successor still knows the live lease of the new resource
// (it renews), and does not lease the capacity-1 resource again once the
// stale one has expired.
func TestFailoverKeepsALiveLeaseBesideStaleJournalRows(t *testing.T) {
	// The pools' time is a fake the servers share, so that the stale lease
	// can expire without the test waiting for it; the election runs on
	// real time.
	fake := clock.NewFake(time.Now())
	dsn, a, b := haPairWith(t, Options{PoolClock: fake})
	ctx := withKey(a.key)
	register := func() {
		t.Helper()
		if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1", Capacity: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	register()
	if _, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pool.Deregister(ctx, &repoolv1.DeregisterRequest{ResourceIds: []string{"r1"}}); err != nil {
		t.Fatal(err)
	}
	register()
	acq, err := a.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	live := acq.GetLease()

	endLeaderSession(t, dsn) // b takes over
	waitStatus(t, b, http.StatusOK, 10*time.Second)
	if _, err := b.pool.Renew(ctx, &repoolv1.RenewRequest{LeaseId: live.GetLeaseId(), FencingToken: live.GetFencingToken(), TtlSeconds: 60}); err != nil {
		t.Fatalf("Renew(live lease %s) on the new leader = %v, want OK", live.GetLeaseId(), err)
	}
	fake.Advance(2500 * time.Millisecond) // the stale lease (2 s) has expired
	if got, err := b.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Acquire on the new leader = %v, %v; want RESOURCE_EXHAUSTED: lease %s still holds capacity-1 r1", got.GetLease(), err, live.GetLeaseId())
	}
}

// patientPair starts an active server a and a standby b whose graceful
// stop and idle streams last an hour: a hand-over that waits for either
// shows as a takeover that never comes.
func patientPair(t *testing.T) (a, b *running) {
	t.Helper()
	dsn := testenv.Postgres(t)
	cfg := func(name string) Config {
		return Config{Store: dsn, HA: true, HAName: name, HASessionTimeout: time.Second, HAInterval: 100 * time.Millisecond,
			CheckpointInterval: time.Hour, ShutdownGrace: time.Hour, GRPCMaxStreamIdle: time.Hour}
	}
	a = start(t, cfg("a"))
	waitStatus(t, a, http.StatusOK, 5*time.Second)
	b = start(t, cfg("b"))
	waitStatus(t, b, http.StatusNotFound, 5*time.Second)
	return a, b
}

// TestShutdownHandsOverPastIdleStreams stops the active server while a
// client holds an idle Leases stream on it (a sidecar's pool of streams at
// a quiet moment): the stream ends UNAVAILABLE and the standby takes over
// at once. Before, the graceful stop waited for the stream to end by
// itself (idle for GRPCMaxStreamIdle, or ShutdownGrace), and the leader
// lock with it; both are an hour here, so a wait shows as a takeover that
// never comes.
func TestShutdownHandsOverPastIdleStreams(t *testing.T) {
	a, b := patientPair(t)

	st, err := a.pool.Leases(withKey(a.key))
	if err != nil {
		t.Fatal(err)
	}
	// One call, so that the stream is open and admitted; then it idles.
	if err := st.Send(&repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Acquire{Acquire: &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 5}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := st.Recv()
		ended <- err
	}()

	a.cancel() // SIGTERM
	waitStatus(t, b, http.StatusOK, 30*time.Second)
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("idle Leases stream at shutdown ended with %v, want UNAVAILABLE", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the idle Leases stream did not end within 30s of the shutdown")
	}
}

// TestShutdownHandsOverBeforeTheConnectionsClose stops the active server
// while a client holds a stream open that is no data-plane call (a health
// Watch: nothing ends it but the client, or the gRPC server's hard stop):
// the standby takes over once the calls are drained and the checkpoint
// written, with the stream still open. Before, the leader lock waited for
// grpc-go's graceful stop, which waits for every stream and then for each
// client to close its connection (up to a second after the last GOAWAY:
// a TestRunbook run's SIGTERM handed over after 1.05 s); ShutdownGrace is
// an hour here, so such a wait shows as a takeover that never comes.
func TestShutdownHandsOverBeforeTheConnectionsClose(t *testing.T) {
	a, b := patientPair(t)

	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch, err := healthpb.NewHealthClient(a.conn).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil { // open, and answered once
		t.Fatal(err)
	}
	open := make(chan struct{})
	go func() {
		defer close(open)
		for {
			if _, err := watch.Recv(); err != nil {
				return
			}
		}
	}()

	a.cancel() // SIGTERM
	waitStatus(t, b, http.StatusOK, 30*time.Second)
	select {
	case <-open:
		t.Fatal("the health Watch stream had ended when the standby took over, want it open: the hand-over waited for the gRPC server's graceful stop")
	default:
	}
	wcancel() // a's graceful stop ends with it
}

// TestStoppingStandbyAnnouncesDown: a standby that stops keeps its HTTP
// port open and answers HAProxy's agent "down" for at least one agent
// interval of the inventory's default checks (100 ms), so that the front
// end marks it DOWN at its next agent check; a standby whose port closed
// within milliseconds stayed alive to HAProxy until checks.fall refused
// connections, and the cluster-down answer of a group whose servers all
// stopped waited for it.
func TestStoppingStandbyAnnouncesDown(t *testing.T) {
	_, _, b := haPair(t)
	if got := agentCheck(t, b); got != agent.Standby {
		t.Fatalf("agent answer of the standby = got %q, want %q", got, agent.Standby)
	}
	b.cancel() // SIGTERM
	var firstDown, lastDown time.Time
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		got, err := tryAgentCheck(b.s.HTTPAddr())
		if err != nil {
			break // the port closed
		}
		if strings.HasPrefix(got, "down") {
			if firstDown.IsZero() {
				firstDown = time.Now()
			}
			lastDown = time.Now()
		}
	}
	if firstDown.IsZero() {
		t.Fatal("the stopping standby's port closed before its agent answered down")
	}
	if d := lastDown.Sub(firstDown); d < 100*time.Millisecond {
		t.Fatalf("the stopping standby answered down for %v before its port closed, want at least 100 ms (one agent interval)", d)
	}
	b.stop(t)
}

// tryAgentCheck is agentCheck on addr that returns a failure instead of
// failing the test.
func tryAgentCheck(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, agent.Hello); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}
