package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/lb/agent"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

// readyz returns the status and body of GET path on r's HTTP port (0 and
// the error when there is no answer).
func readyz(r *running, path string) (int, string) {
	resp, err := http.Get("http://" + r.s.HTTPAddr() + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// agentCheck is what HAProxy's agent check reads on r's HTTP port
// (package agent), without the line end.
func agentCheck(t *testing.T, r *running) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.s.HTTPAddr(), 5*time.Second)
	if err != nil {
		t.Fatalf("agent check: dial %s = got error %v, want nil", r.s.HTTPAddr(), err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, agent.Hello); err != nil {
		t.Fatalf("agent check: send = got error %v, want nil", err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("agent check: read = got %q, error %v, want nil", b, err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// waitReadyz waits until GET path answers code with a body that starts
// with prefix, and returns the body.
func waitReadyz(t *testing.T, r *running, path string, code int, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, body := readyz(r, path)
		if got == code && strings.HasPrefix(body, prefix) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d %q after %v, want %d %q…", path, got, body, within, code, prefix)
		}
		time.Sleep(10 * time.Millisecond) // a poll interval, as testenv.Eventually's
	}
}

// grpcHealth is r's gRPC health status (service "").
func grpcHealth(t *testing.T, r *running) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health Check = %v", err)
	}
	return resp.GetStatus()
}

// notWritableReason returns the message of an UNAVAILABLE refusal with
// the STORE_NOT_WRITABLE detail, and false for any other answer.
func notWritableReason(err error) (string, bool) {
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		return "", false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == repoolv1.ErrorDomain && info.GetReason() == repoolv1.ReasonStoreNotWritable {
			return st.Message(), true
		}
	}
	return "", false
}

// cycle acquires a lease of ctxName and releases it: two lease journal
// writes.
func cycle(ctx context.Context, r *running, ctxName string) error {
	a, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: ctxName, TtlSeconds: 30})
	if err != nil {
		return err
	}
	_, err = r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: a.GetLease().GetLeaseId(), FencingToken: a.GetLease().GetFencingToken()})
	return err
}

// fillFS writes path until the file system it is on has no space left.
func fillFS(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the file system: %v", err)
			}
			break
		}
	}
	// Then ever smaller writes take what is left, so that no page stays
	// free.
	for _, n := range []int{64 << 10, 4 << 10, 512, 1} {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
}

// TestStoreNotWritableSQLite: a server whose SQLite store's file system
// fills up turns not ready (/readyz and /readyz/active 503 "store not
// writable: …", gRPC health NOT_SERVING) by itself, without traffic; its
// data-plane writes that fail answer UNAVAILABLE with the same reason
// (STORE_NOT_WRITABLE), not "not the active server"; once space is freed
// it is ready again by itself and serves.
//
// The store lives on a 16 MiB tmpfs that the test mounts (root only) and
// fills: the real ENOSPC of a full disk. A read-only remount, the other
// way a disk stops taking writes, is refused by the kernel (EBUSY) while
// the server holds its files open for writing, so it cannot be staged
// without faking the file system.
func TestStoreNotWritableSQLite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting the tmpfs the test fills needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=16m,mode=0700"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v; detaching it", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	r := start(t, Config{Store: "sqlite:" + filepath.Join(dir, "store", "repool.db"), StoreProbeInterval: 50 * time.Millisecond})
	ctx := withKey(r.key)
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1", Capacity: 4}}}); err != nil {
		t.Fatal(err)
	}
	if err := cycle(ctx, r, "c"); err != nil {
		t.Fatal(err)
	}
	if code, body := readyz(r, "/readyz/active"); code != http.StatusOK {
		t.Fatalf("/readyz/active = %d %q before the disk filled, want 200", code, body)
	}

	filler := filepath.Join(dir, "filler")
	fillFS(t, filler)
	// The probe's row fails in SQLite when its WAL must grow, its scratch
	// file when the WAL had room: either says the disk is full.
	full := map[string]bool{
		"store not writable: the database refused the write: database or disk is full (13)": true,
		"store not writable: the file system refused the write: no space left on device":    true,
	}
	t0 := time.Now()
	body := waitReadyz(t, r, "/readyz", http.StatusServiceUnavailable, "store not writable: ", 10*time.Second)
	t.Logf("not ready %v after the disk filled, without traffic: %s", time.Since(t0).Round(time.Millisecond), body)
	if !full[body] {
		t.Errorf("/readyz = 503 %q, want one of %v", body, full)
	}
	if code, body := readyz(r, "/readyz/active"); code != http.StatusServiceUnavailable || !full[body] {
		t.Errorf("/readyz/active = %d %q, want 503 and one of %v", code, body, full)
	}
	if st := grpcHealth(t, r); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health = %v while the store is not writable, want NOT_SERVING", st)
	}
	// Data-plane writes: a lease journal append may still fit in the last
	// block of the lease log; the first one that does not is refused with
	// the reason.
	var refused error
	for i := 0; i < 10000 && refused == nil; i++ {
		refused = cycle(ctx, r, "c")
	}
	if msg, ok := notWritableReason(refused); !ok || !full[msg] {
		t.Fatalf("a lease cycle on a full disk = %v, want UNAVAILABLE STORE_NOT_WRITABLE \"store not writable: …\"", refused)
	} else {
		t.Logf("data plane: %s", msg)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	waitReadyz(t, r, "/readyz/active", http.StatusOK, "active", 10*time.Second)
	t.Logf("ready again %v after space was freed", time.Since(t0).Round(time.Millisecond))
	if code, body := readyz(r, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q once writable, want 200", code, body)
	}
	if st := grpcHealth(t, r); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health = %v once writable, want SERVING", st)
	}
	if err := cycle(ctx, r, "c"); err != nil {
		t.Errorf("a lease cycle once writable: %v", err)
	}
}

// setReadOnly sets (or resets) default_transaction_read_only for the
// whole PostgreSQL cluster of dsn and reloads its configuration: every
// session, the servers' open ones included, then refuses writes (or takes
// them again). The cluster is this test binary's own, and the tests of
// this package do not run in parallel.
func setReadOnly(t *testing.T, dsn string, on bool) {
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

// TestStoreNotWritablePostgresHA: when PostgreSQL refuses writes
// (default_transaction_read_only, as on a database turned read-only), the
// active server of an HA pair turns 503 on /readyz/active ("store not
// writable: …"), so HAProxy marks it DOWN, its gRPC health NOT_SERVING,
// its data-plane writes UNAVAILABLE with the reason; the standby stays a
// healthy standby (404). Once the database takes writes again the active
// server is 200 again by itself and serves.
func TestStoreNotWritablePostgresHA(t *testing.T) {
	dsn := testenv.Postgres(t)
	cfg := func(name string) Config {
		return Config{Store: dsn, HA: true, HAName: name, HASessionTimeout: time.Second, HAInterval: 100 * time.Millisecond,
			CheckpointInterval: time.Hour, StoreProbeInterval: 50 * time.Millisecond}
	}
	a := start(t, cfg("a"))
	waitStatus(t, a, http.StatusOK, 5*time.Second)
	b := start(t, cfg("b"))
	waitStatus(t, b, http.StatusNotFound, 5*time.Second)
	ctx := withKey(a.key)
	if _, err := a.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1", Capacity: 4}}}); err != nil {
		t.Fatal(err)
	}
	if err := cycle(ctx, a, "c"); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { setReadOnly(t, dsn, false) })
	setReadOnly(t, dsn, true)
	const want = "store not writable: the database refused the write: cannot execute INSERT in a read-only transaction (SQLSTATE 25006)"
	t0 := time.Now()
	waitReadyz(t, a, "/readyz/active", http.StatusServiceUnavailable, "store not writable: ", 10*time.Second)
	t.Logf("active server 503 %v after the database turned read-only, without traffic", time.Since(t0).Round(time.Millisecond))
	// The probe's own failure names the probe's statement; wait for it in
	// case a write of another statement failed first.
	waitReadyz(t, a, "/readyz/active", http.StatusServiceUnavailable, want, 5*time.Second)
	if code, body := readyz(a, "/readyz"); code != http.StatusServiceUnavailable || body != want {
		t.Errorf("active server's /readyz = %d %q, want 503 %q", code, body, want)
	}
	if st := grpcHealth(t, a); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("active server's gRPC health = %v, want NOT_SERVING", st)
	}
	if code, body := readyz(b, "/readyz/active"); code != http.StatusNotFound {
		t.Errorf("standby's /readyz/active = %d %q, want 404", code, body)
	}
	// HAProxy's agent check agrees with /readyz/active.
	if got := agentCheck(t, a); got != agent.Down(want) {
		t.Errorf("active server's agent = got %q, want %q", got, agent.Down(want))
	}
	if got := agentCheck(t, b); got != agent.Standby {
		t.Errorf("standby's agent = got %q, want %q", got, agent.Standby)
	}
	err := cycle(ctx, a, "c")
	msg, ok := notWritableReason(err)
	if !ok || !strings.HasPrefix(msg, "store not writable: the database refused the write: ") || !strings.Contains(msg, "read-only transaction (SQLSTATE 25006)") {
		t.Fatalf("a lease cycle on a read-only database = %v, want UNAVAILABLE STORE_NOT_WRITABLE naming the read-only transaction", err)
	}
	t.Logf("data plane: %s", msg)

	setReadOnly(t, dsn, false)
	t0 = time.Now()
	waitReadyz(t, a, "/readyz/active", http.StatusOK, "active", 10*time.Second)
	t.Logf("active again %v after the database took writes again", time.Since(t0).Round(time.Millisecond))
	if st := grpcHealth(t, a); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health = %v once writable, want SERVING", st)
	}
	if err := cycle(ctx, a, "c"); err != nil {
		t.Errorf("a lease cycle once writable: %v", err)
	}
	if got := agentCheck(t, a); got != agent.Active {
		t.Errorf("active server's agent once writable = got %q, want %q", got, agent.Active)
	}
	if code, body := readyz(b, "/readyz/active"); code != http.StatusNotFound {
		t.Errorf("standby's /readyz/active = %d %q, want 404", code, body)
	}
}

// TestWriteFaultClassifies: which failed writes make the store not
// writable, and the reason given, which names no path.
func TestWriteFaultClassifies(t *testing.T) {
	unavailable := func(err error) error { return fmt.Errorf("%w: %w", store.ErrUnavailable, err) }
	for _, tc := range []struct {
		name   string
		err    error
		reason string // "" for not a fault
	}{
		{"read-only transaction", unavailable(&pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}),
			"the database refused the write: cannot execute INSERT in a read-only transaction (SQLSTATE 25006)"},
		{"disk full", unavailable(&pgconn.PgError{Code: "53100", Message: "could not extend file"}), "the database refused the write: could not extend file (SQLSTATE 53100)"},
		{"lock not available", unavailable(&pgconn.PgError{Code: "55P03"}), ""},
		{"serialization failure", unavailable(&pgconn.PgError{Code: "40001"}), ""},
		{"lease log on a full disk", fmt.Errorf("write lease journal: %w", unavailable(&fs.PathError{Op: "write", Path: "/secret/path/repool.db-leases", Err: syscall.ENOSPC})),
			"the file system refused the write: no space left on device"},
		{"read-only file system", unavailable(&fs.PathError{Op: "open", Path: "/secret/path/repool.db-probe", Err: syscall.EROFS}),
			"the file system refused the write: read-only file system"},
		{"database unreachable", unavailable(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), "the database cannot be reached"},
		{"probe too slow", fmt.Errorf("%w: a probe write took over 5s: %w", store.ErrUnavailable, context.DeadlineExceeded), "the store did not take a write in time"},
		{"other unavailable", unavailable(errors.New("store closed at /secret/path")), "the store is unavailable"},
		{"fenced", fmt.Errorf("write: %w", store.ErrFenced), ""},
		{"not found", store.ErrNotFound, ""},
		{"caller's deadline", context.DeadlineExceeded, ""},
		{"canceled", unavailable(context.Canceled), ""},
		{"not a store error", errors.New("boom"), ""},
	} {
		reason, ok := writeFault(tc.err)
		if reason != tc.reason || ok != (tc.reason != "") {
			t.Errorf("%s: writeFault(%v) = %q, %v, want %q", tc.name, tc.err, reason, ok, tc.reason)
		}
		if strings.Contains(reason, "/secret") {
			t.Errorf("%s: reason %q names a path", tc.name, reason)
		}
	}
}
