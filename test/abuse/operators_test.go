package abuse

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// Careless operators, against the real binaries on a PostgreSQL store of
// their own (testenv): a tenant sent to a group no server runs, a group
// drained and retired, a group's only server lost with a tenant on it, and
// a database that stops taking writes.

func TestMain(m *testing.M) { testenv.Main(m) }

// startOn runs cmd/server on the PostgreSQL store dsn with more flags and
// waits until it is active (/readyz/active 200). The store's first server
// (first) prints the demo key and the operator token before it listens;
// startOn waits for them in its output too, since the copy of a child's
// output into ours can lag its readiness on a busy machine (a Register
// once went out with no key and was answered UNAUTHENTICATED).
func startOn(t *testing.T, bins binaries, name, dsn string, first bool, flags ...string) *server {
	t.Helper()
	s := &server{bins: bins, store: dsn, grpcAddr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
	port := testenv.FreePort(t)
	s.httpAddr = net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	s.httpURL = "http://" + s.httpAddr
	args := append([]string{"run", "--grpc-addr", s.grpcAddr, "--http-addr", s.httpAddr, "--store", dsn,
		"--checkpoint-interval", "1h", "--log-level", "warn"}, flags...)
	s.proc = run(t, name, bins.server, args...)
	testenv.Eventually(t, 30*time.Second, name+" to be ready", func() bool {
		if s.exited() {
			t.Fatalf("%s exited:\n%s", name, s.out.String())
		}
		code, _ := get(s.httpURL + "/readyz/active")
		return code == 200 && (!first || tokenRE.MatchString(s.out.String()) && keyRE.MatchString(s.out.String()))
	})
	if first {
		out := s.out.String()
		s.key, s.token = keyRE.FindStringSubmatch(out)[1], tokenRE.FindStringSubmatch(out)[1]
	}
	return s
}

// waitActive waits until s is active (/readyz/active 200) before a step
// whose premise that is. A leader that cannot confirm its session with the
// database in time steps down and campaigns again; with both cores of
// this machine busy, its PostgreSQL has gone unanswered that long, and the
// group had no active server for a moment.
func (s *server) waitActive(t *testing.T, before string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, s.httpURL+" to be active before "+before, func() bool {
		code, _ := get(s.httpURL + "/readyz/active")
		return code == 200
	})
}

// get returns a GET's status and body, 0 if the server did not answer.
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, strings.TrimSpace(b.String())
}

// attackGroupsOfACarelessOperator: two groups of real servers on one
// PostgreSQL store, default (server a) and b. The operator sends a tenant
// to a group no server has run (a typo), drains and retires b, and loses
// b's only server (SIGKILL, as when its host dies) with a tenant and its
// lease on it. Before groups were known, a tenant created or moved to an
// unknown group was accepted and served by no server, a group could not
// be drained or retired, and a stranded tenant had no way back.
func attackGroupsOfACarelessOperator(t *testing.T, bins binaries) {
	dsn := testenv.Postgres(t)
	// The leaders' session check as shipped (--ha-interval, --ha-session-timeout
	// defaults): with a session timeout halved, both leaders stepped down
	// in a run with both cores busy, their checks unanswered for 900 ms.
	a := startOn(t, bins, "server-a", dsn, true, "--ha", "--ha-name", "a")
	b := startOn(t, bins, "server-b", dsn, false, "--ha", "--ha-name", "b", "--group", "b")
	b.token = a.token

	// A typo: no tenant is created, none moved; the message names the
	// groups that exist.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/tenants", `{"id":"typo","name":"Typo","group":"bb"}`},
		{"POST", "/api/v1/tenants/demo/move", `{"group":"bb"}`},
	} {
		code, body := a.control(t, c.method, c.path, a.token, c.body)
		if code != 400 || !strings.Contains(body, `\"bb\" is not a known group`) || !strings.Contains(body, "default (") || !strings.Contains(body, "b (") {
			t.Errorf("%s %s %s = got %d %s, want 400 saying bb is not a known group and naming default and b", c.method, c.path, c.body, code, body)
		}
	}
	if code, _ := a.control(t, "GET", "/api/v1/tenants/typo", a.token, ""); code != 404 {
		t.Errorf("GET the tenant refused on an unknown group = got %d, want 404", code)
	}

	// acme on b, with a lease b acknowledged.
	if code, body := a.control(t, "POST", "/api/v1/tenants", a.token, `{"id":"acme","name":"Acme","group":"b"}`); code != 201 {
		t.Fatalf("creating acme on group b = got %d %s, want 201", code, body)
	}
	// acme's own requests go to its group's server.
	code, body := b.control(t, "POST", "/api/v1/tenants/acme/keys", a.token, `{"name":"k"}`)
	key := between(body, `"key":"`, `"`)
	if code != 201 || key == "" {
		t.Fatalf("creating acme's key = got %d %s, want 201 with a key", code, body)
	}
	onB := b.pool(t)
	var held *repoolv1.AcquireResponse
	testenv.Eventually(t, 10*time.Second, "group b to serve acme", func() bool {
		if _, err := onB.Register(withKey(key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1", Capacity: 1}}}); err != nil {
			return false
		}
		var err error
		held, err = onB.Acquire(withKey(key), &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 120})
		return err == nil
	})

	// Drain b: it still serves acme, takes no new tenant; retiring it
	// while acme is there is refused.
	if code, body := b.control(t, "PUT", "/api/v1/groups/b", a.token, `{"state":"draining"}`); code != 200 || !strings.Contains(body, `"draining"`) {
		t.Fatalf("draining group b = got %d %s, want 200 draining", code, body)
	}
	if code, body := a.control(t, "POST", "/api/v1/tenants", a.token, `{"id":"late","name":"Late","group":"b"}`); code != 409 || !strings.Contains(body, "draining") {
		t.Errorf("creating a tenant on the draining group = got %d %s, want 409 draining", code, body)
	}
	if code, body := a.control(t, "PUT", "/api/v1/groups/b", a.token, `{"state":"retired"}`); code != 409 || !strings.Contains(body, "1 tenant placed") {
		t.Errorf("retiring group b with acme on it = got %d %s, want 409 naming its tenant", code, body)
	}
	b.waitActive(t, "the draining group to serve acme")
	if _, err := onB.GetResource(withKey(key), &repoolv1.GetResourceRequest{Id: "r1"}); err != nil {
		t.Errorf("the draining group serving acme = got %v, want success", err)
	}

	// b's host dies with acme on it: recover acme onto default.
	b.waitActive(t, "a recovery to be refused while b has an active server")
	if code, body := a.control(t, "POST", "/api/v1/groups/default/recover", a.token, `{"tenant":"acme"}`); code != 409 {
		t.Errorf("recovering acme while b has an active server = got %d %s, want 409", code, body)
	}
	b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.done
	testenv.Eventually(t, 10*time.Second, "group b's leader lock to be free", func() bool {
		var n int
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		err = conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'repool-leader:b'`).Scan(&n)
		return err == nil && n == 0
	})
	if code, body := a.control(t, "POST", "/api/v1/groups/default/recover", a.token, `{"tenant":"acme"}`); code != 200 || !strings.Contains(body, `"fenced_epoch"`) {
		t.Fatalf("recovering acme onto default after b's server died = got %d %s, want 200", code, body)
	}
	onA := a.pool(t)
	hl := held.GetLease()
	testenv.Eventually(t, 10*time.Second, "the default group to serve acme with the lease b acknowledged", func() bool {
		_, err := onA.Renew(withKey(key), &repoolv1.RenewRequest{LeaseId: hl.GetLeaseId(), FencingToken: hl.GetFencingToken(), TtlSeconds: 60})
		return err == nil
	})
	if _, err := onA.Acquire(withKey(key), &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("acquiring r1 (capacity 1) again on default while b's lease is held = got %v, want RESOURCE_EXHAUSTED", err)
	}
	if code, body := a.control(t, "PUT", "/api/v1/groups/b", a.token, `{"state":"retired"}`); code != 200 || !strings.Contains(body, `"retired"`) {
		t.Errorf("retiring group b once empty = got %d %s, want 200 retired", code, body)
	}
	if code, body := a.control(t, "POST", "/api/v1/tenants/demo/move", a.token, `{"group":"b"}`); code != 409 || !strings.Contains(body, "retired") {
		t.Errorf("moving a tenant to the retired group = got %d %s, want 409 retired", code, body)
	}
}

// between returns the text of s between the first open and the next
// close after it ("" if absent).
func between(s, open, close string) string {
	_, rest, ok := strings.Cut(s, open)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, close)
	return v
}

// attackStoreStopsTakingWrites: the database under a real server turns
// read-only (default_transaction_read_only, as a database failed over to a
// read-only replica or out of disk does). The server must say it cannot
// serve: /readyz and /readyz/active 503 "store not writable: REASON", its
// data-plane writes UNAVAILABLE with the reason, and be ready again by
// itself once the database takes writes. Before, it stayed ready (200)
// and every write failed as INTERNAL.
func attackStoreStopsTakingWrites(t *testing.T, bins binaries) {
	dsn := testenv.Postgres(t)
	srv := startOn(t, bins, "server", dsn, true, "--store-probe-interval", "100ms")
	pc := srv.pool(t)
	ctx := withKey(srv.key)
	if _, err := pc.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1", Capacity: 4}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setClusterReadOnly(t, dsn, false) })
	setClusterReadOnly(t, dsn, true)
	const want = "store not writable: the database refused the write: cannot execute INSERT in a read-only transaction (SQLSTATE 25006)"
	start := time.Now()
	testenv.Eventually(t, 10*time.Second, "/readyz to say the store is not writable", func() bool {
		code, body := get(srv.httpURL + "/readyz")
		return code == 503 && body == want
	})
	t.Logf("not ready %v after the database turned read-only", time.Since(start).Round(time.Millisecond))
	if code, body := get(srv.httpURL + "/readyz/active"); code != 503 || body != want {
		t.Errorf("/readyz/active = got %d %q, want 503 %q", code, body, want)
	}
	_, err := pc.Acquire(ctx, &repoolv1.AcquireRequest{Context: "c", TtlSeconds: 30})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "store not writable: the database refused the write: ") {
		t.Errorf("an Acquire on the read-only database = got %v, want UNAVAILABLE saying the store is not writable", err)
	}
	setClusterReadOnly(t, dsn, false)
	start = time.Now()
	testenv.Eventually(t, 10*time.Second, "the server to be ready again by itself", func() bool {
		code, body := get(srv.httpURL + "/readyz/active")
		return code == 200 && body == "active"
	})
	t.Logf("ready again %v after the database took writes", time.Since(start).Round(time.Millisecond))
	if _, err := pc.Acquire(ctx, &repoolv1.AcquireRequest{Context: "c", TtlSeconds: 30}); err != nil {
		t.Errorf("an Acquire once the database takes writes = got %v, want success", err)
	}
}

// setClusterReadOnly sets (or resets) default_transaction_read_only for
// the test binary's own PostgreSQL cluster and reloads its configuration:
// every session, the server's open ones included, then refuses writes (or
// takes them again). The attacks do not run in parallel.
func setClusterReadOnly(t *testing.T, dsn string, on bool) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stmt := `ALTER SYSTEM RESET default_transaction_read_only`
	if on {
		stmt = `ALTER SYSTEM SET default_transaction_read_only = on`
	}
	for _, q := range []string{`SET default_transaction_read_only = off`, stmt, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
