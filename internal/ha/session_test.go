package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/status"
	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// interval is the electors' Interval in these tests.
const interval = 20 * time.Millisecond

// TestStandbyKeepsOneSession: a standby waits for the lock on one session,
// asking again on it each time its lock_timeout expires, instead of
// connecting for every attempt, and without waiting on its clock; when the
// leader resigns that same session wins the lock and is the one the term
// keeps.
func TestStandbyKeepsOneSession(t *testing.T) {
	const waits = 10
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)

	leader := lead(ctx, t, dsn, nil)
	defer leader.Resign()

	// The standby's clock never moves: its waits are the database's
	// (lock_timeout, here interval), and each one that expires is followed
	// at once by the next, which restarts query_start of its backend.
	start := time.Unix(0, 0)
	fake := clock.NewFake(start)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	won := campaign(bctx, elector(t, dsn, "b", fake))
	pids, starts := map[int32]bool{}, map[time.Time]bool{}
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("standby b to wait for the lock %d times", waits), func() bool {
		for _, s := range sessions(ctx, t, obs, "b") {
			pids[s.pid] = true
			if s.queryStart != nil {
				starts[*s.queryStart] = true
			}
		}
		return len(starts) >= waits || len(pids) > 1
	})
	if len(pids) != 1 {
		t.Fatalf("standby b: saw %d waits on %d backends, want at least %d waits on 1 backend", len(starts), len(pids), waits)
	}
	var standbyPID int32
	for pid := range pids {
		standbyPID = pid
	}

	leader.Resign()
	term := await(t, won, 10*time.Second, "a resigns")
	defer term.Resign()
	if got := holder(ctx, t, obs); got != standbyPID {
		t.Fatalf("leader lock holder = got pid %d, want the standby's session %d", got, standbyPID)
	}
	if err := term.Err(); err != nil {
		t.Fatalf("term.Err() = got %v, want nil while b leads", err)
	}
	if now := fake.Now(); !now.Equal(start) {
		t.Fatalf("standby b's clock = got %v, want %v: nothing advanced it", now, start)
	}
}

// TestStandbyWaitLogsNothing: a standby waiting for the lock through many
// lock_timeout expiries writes nothing to the server's log — no "lock
// timeout" ERROR, no line of its backend at all — even with log_lock_waits
// on, while the log does get what the server reports (a WARNING raised
// after the waits shows up).
func TestStandbyWaitLogsNothing(t *testing.T) {
	const waits = 10
	dsn := database(t)
	logPath := testenv.PostgresLog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)
	fi, err := os.Stat(logPath)
	if err != nil {
		t.Fatalf("stat the server log = got error %v, want nil", err)
	}
	from := fi.Size() // the log of this test only: the cluster is shared

	leader := lead(ctx, t, dsn, nil)
	defer leader.Resign()

	// log_lock_waits as many operators set it (superuser, as in these
	// tests, may set it per session).
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	won := campaign(bctx, elector(t, dsn+"&log_lock_waits=on", "b", nil))
	pids, starts := map[int32]bool{}, map[time.Time]bool{}
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("standby b to wait for the lock %d times", waits), func() bool {
		for _, s := range sessions(ctx, t, obs, "b") {
			pids[s.pid] = true
			if s.queryStart != nil {
				starts[*s.queryStart] = true
			}
		}
		return len(starts) > waits
	})
	if len(pids) != 1 {
		t.Fatalf("standby b: saw %d waits on %d backends, want them on 1 backend", len(starts), len(pids))
	}
	select {
	case r := <-won:
		t.Fatalf("Campaign(b) = got %v, %v while a leads, want it waiting", r.term, r.err)
	default:
	}

	// A backend writes its log lines before its client hears of them, so
	// once the marker is in the log every earlier wait's line would be.
	marker := fmt.Sprintf("repool-ha-test-marker-%d", time.Now().UnixNano())
	if _, err := obs.Exec(ctx, `DO $$BEGIN RAISE WARNING '`+marker+`'; END$$`); err != nil {
		t.Fatalf("RAISE WARNING = got error %v, want nil", err)
	}
	var lines []string
	testenv.Eventually(t, 10*time.Second, "the marker in the server log", func() bool {
		lines = readLog(t, logPath, from)
		for _, l := range lines {
			if strings.Contains(l, marker) {
				return true
			}
		}
		return false
	})
	var standbyPID int32
	for pid := range pids {
		standbyPID = pid
	}
	tag := fmt.Sprintf("[%d]", standbyPID)
	var bad []string
	for _, l := range lines {
		if strings.Contains(l, "lock timeout") || strings.Contains(l, tag) {
			bad = append(bad, l)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("server log during %d waits of standby b = got %d lines of its backend (pid %d) or about a lock timeout, first %q, want none", len(starts), len(bad), standbyPID, bad[:min(4, len(bad))])
	}
}

// readLog returns the lines of the file at path from offset from on.
func readLog(t *testing.T, path string, from int64) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open the server log = got error %v, want nil", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, from, 1<<40))
	if err != nil {
		t.Fatalf("read the server log = got error %v, want nil", err)
	}
	return strings.Split(string(b), "\n")
}

// TestLockAttempt: one attempt of a standby on a free lock takes it, and the
// lock, taken inside the attempt's PL/pgSQL block (a subtransaction), stays
// with the session after the attempt and its next statements; an attempt
// on a taken lock ends at lock_timeout with held false and no error,
// leaving the session idle and usable, and holding nothing.
func TestLockAttempt(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)
	e := elector(t, dsn, "a", nil)
	a, err := e.connect(ctx)
	if err != nil {
		t.Fatalf("connect = got error %v, want nil", err)
	}
	defer a.Close(context.Background())
	held, err := e.lock(ctx, a)
	if err != nil || !held {
		t.Fatalf("lock on a free lock = got %v, %v, want true, nil", held, err)
	}
	for i := range 2 { // the attempt's transaction and a later one ended
		if got := holder(ctx, t, obs); got != int32(a.PgConn().PID()) {
			t.Fatalf("leader lock holder after %d statements = got pid %d, want a's session %d", i, got, a.PgConn().PID())
		}
		if held, _, err := e.check(ctx, a, time.Now().Add(time.Minute)); err != nil || !held {
			t.Fatalf("check after %d statements = got %v, %v, want true, nil", i, held, err)
		}
	}

	b, err := e.connect(ctx)
	if err != nil {
		t.Fatalf("connect = got error %v, want nil", err)
	}
	defer b.Close(context.Background())
	for range 3 {
		held, err := e.lock(ctx, b)
		if err != nil || held {
			t.Fatalf("lock on a held lock = got %v, %v, want false, nil", held, err)
		}
		if st := b.PgConn().TxStatus(); st != 'I' {
			t.Fatalf("b's transaction status after a timed-out attempt = got %q, want 'I' (idle)", st)
		}
	}
	if held, _, err := e.check(ctx, b, time.Now().Add(time.Minute)); err != nil || held {
		t.Fatalf("check of b = got %v, %v, want false, nil", held, err)
	}
	if got := holder(ctx, t, obs); got != int32(a.PgConn().PID()) {
		t.Fatalf("leader lock holder = got pid %d, want a's session %d", got, a.PgConn().PID())
	}
}

// TestStandbyTakesAFreedLockAtOnce: a standby waiting for the lock gets it
// as soon as the leader's session ends (here: terminated, as when the
// leader's process is killed), in the wait it had started before, with no
// tick of its clock and long before its lock_timeout.
func TestStandbyTakesAFreedLockAtOnce(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)

	// The leader's checks are on a clock that never moves: it does not
	// notice it lost its session, as a killed process would not.
	leader := lead(ctx, t, dsn, clock.NewFake(time.Unix(0, 0)))
	defer leader.Resign()
	leaderPID := holder(ctx, t, obs)

	// A lock_timeout (Interval) far beyond the test's bounds: b can only
	// win within them in the wait it is in when a's session ends.
	start := time.Unix(0, 0)
	fake := clock.NewFake(start)
	b := slowElector(t, dsn, "b", fake)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	won := campaign(bctx, b)
	wait := waitForLock(ctx, t, obs, "b")

	if _, err := obs.Exec(ctx, `SELECT pg_terminate_backend($1)`, leaderPID); err != nil {
		t.Fatalf("pg_terminate_backend = got error %v, want nil", err)
	}
	term := await(t, won, 5*time.Second, "a's session ended")
	defer term.Resign()
	if now := fake.Now(); !now.Equal(start) {
		t.Fatalf("standby b's clock = got %v, want %v: the takeover waits for no tick", now, start)
	}
	if got := holder(ctx, t, obs); got != wait.pid {
		t.Fatalf("leader lock holder = got pid %d, want the standby's session %d", got, wait.pid)
	}
	// The session that waited is the one that won (after its win it asks
	// whether a switchover names another server, so its last query is
	// not the wait any more).
	if s := sessions(ctx, t, obs, "b"); len(s) != 1 || s[0].pid != wait.pid {
		t.Fatalf("sessions of b = got %+v, want one: the session %d that waited", s, wait.pid)
	}
}

// TestCancelEndsAWaitingCampaign: cancelling the context of a standby that
// is waiting for the lock in the database ends its Campaign, cancels the
// wait and closes the session, long before the wait would have timed out.
func TestCancelEndsAWaitingCampaign(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)

	leader := lead(ctx, t, dsn, nil)
	defer leader.Resign()

	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	lost := campaign(cctx, slowElector(t, dsn, "c", nil))
	waitForLock(ctx, t, obs, "c")
	ccancel()
	select {
	case r := <-lost:
		if !errors.Is(r.err, context.Canceled) || r.term != nil {
			t.Fatalf("Campaign(c) after cancel = got %v, %v, want context.Canceled", r.term, r.err)
		}
	case <-time.After(5 * time.Second): // a test timeout, not a measure
		t.Fatal("Campaign(c) did not return within 5s of its context's cancel")
	}
	// The wait's lock_timeout is 30s: its backend ending within 10s is the
	// query's cancellation, not its timeout.
	waitSessions(ctx, t, obs, "c", 0)
}

// slowElector returns an Elector named name on c (nil: the wall clock)
// whose waits for the lock each last 30s (lock_timeout = Interval).
func slowElector(t *testing.T, dsn, name string, c clock.Clock) *Elector {
	t.Helper()
	e, err := New(Config{DSN: dsn, Name: name, Interval: 30 * time.Second, SessionTimeout: 2 * time.Minute, Clock: c})
	if err != nil {
		t.Fatalf("New(%s) = got error %v, want nil", name, err)
	}
	return e
}

// waitForLock waits up to 10s for the elector named name to have one
// backend, waiting for an advisory lock, and returns it.
func waitForLock(ctx context.Context, t *testing.T, obs *pgx.Conn, name string) session {
	t.Helper()
	var waiting session
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("elector %s to wait for the lock", name), func() bool {
		s := sessions(ctx, t, obs, name)
		if len(s) != 1 || s[0].queryStart == nil || s[0].waitEventType == nil || s[0].waitEvent == nil {
			return false
		}
		waiting = s[0]
		return *s[0].waitEventType == "Lock" && *s[0].waitEvent == "advisory"
	})
	return waiting
}

type campaignResult struct {
	term *Term
	err  error
}

// campaign runs e.Campaign on a goroutine that ends when it returns.
func campaign(ctx context.Context, e *Elector) <-chan campaignResult {
	c := make(chan campaignResult, 1)
	go func() {
		t, err := e.Campaign(ctx)
		c <- campaignResult{t, err}
	}()
	return c
}

// await returns the term campaign b won once `after` happened, and fails
// the test if b lost or did not win within d (a test timeout, not a
// measure).
func await(t *testing.T, won <-chan campaignResult, d time.Duration, after string) *Term {
	t.Helper()
	select {
	case r := <-won:
		if r.err != nil {
			t.Fatalf("Campaign = got error %v, want a term once %s", r.err, after)
		}
		return r.term
	case <-time.After(d):
		t.Fatalf("the campaign did not win the lock within %v once %s", d, after)
	}
	return nil
}

type session struct {
	pid        int32
	queryStart *time.Time
	// waitEventType and waitEvent say what the backend waits for, if
	// anything: Lock, advisory for a wait on an advisory lock.
	waitEventType, waitEvent *string
}

// sessions lists the backends of the elector named name.
func sessions(ctx context.Context, t *testing.T, obs *pgx.Conn, name string) []session {
	t.Helper()
	rows, err := obs.Query(ctx, `SELECT pid, query_start, wait_event_type, wait_event FROM pg_stat_activity WHERE application_name = $1`, "repool-leader:"+name)
	if err != nil {
		t.Fatalf("query pg_stat_activity = got error %v, want nil", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (session, error) {
		var s session
		return s, r.Scan(&s.pid, &s.queryStart, &s.waitEventType, &s.waitEvent)
	})
	if err != nil {
		t.Fatalf("read pg_stat_activity = got error %v, want nil", err)
	}
	return out
}

// waitSessions waits up to 10s for the elector named name to have n
// backends.
func waitSessions(ctx context.Context, t *testing.T, obs *pgx.Conn, name string, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("elector %s to have %d sessions", name, n), func() bool {
		return len(sessions(ctx, t, obs, name)) == n
	})
}

// elector returns an Elector named name on c (nil: the wall clock) that
// checks every interval, and waits for the lock at most interval per query
// (lock_timeout); the database keeps its idle session for 5s.
func elector(t *testing.T, dsn, name string, c clock.Clock) *Elector {
	t.Helper()
	e, err := New(Config{DSN: dsn, Name: name, Interval: interval, SessionTimeout: 5 * time.Second, Clock: c})
	if err != nil {
		t.Fatalf("New(%s) = got error %v, want nil", name, err)
	}
	return e
}

// observer returns a session of its own on dsn, closed when the test ends.
func observer(ctx context.Context, t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	obs, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgx.Connect = got error %v, want nil", err)
	}
	t.Cleanup(func() { obs.Close(context.Background()) })
	return obs
}

// holder returns the backend that holds the leader lock, 0 if none does.
func holder(ctx context.Context, t *testing.T, obs *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	err := obs.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND objid = ($1::bigint & x'ffffffff'::bigint)::oid AND granted`, LockID).Scan(&pid)
	if err != nil {
		t.Fatalf("query pg_locks = got error %v, want nil", err)
	}
	return pid
}

// TestLeaderChecksEveryIntervalAndStepsDown: the leader checks its session
// at each interval of its clock and keeps the term while it holds the lock;
// once its session is gone the next check ends the term, and Resign of an
// ended term returns.
func TestLeaderChecksEveryIntervalAndStepsDown(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)
	fake := clock.NewFake(time.Unix(0, 0))
	term := lead(ctx, t, dsn, fake)
	defer term.Resign()
	s := sessions(ctx, t, obs, "a")
	if len(s) != 1 || s[0].queryStart == nil {
		t.Fatalf("sessions of a = got %+v, want one that has run its lock attempt", s)
	}
	leader, attempt := s[0].pid, *s[0].queryStart

	if err := fake.Wait(ctx, 1); err != nil {
		t.Fatalf("waiting for the leader's check ticker = got error %v, want nil", err)
	}
	fake.Advance(interval)
	testenv.Eventually(t, 10*time.Second, "the leader's first check", func() bool {
		s := sessions(ctx, t, obs, "a")
		return len(s) == 1 && s[0].queryStart != nil && s[0].queryStart.After(attempt)
	})
	if err := term.Err(); err != nil {
		t.Fatalf("term.Err() after a check that holds = got %v, want nil", err)
	}
	if got := holder(ctx, t, obs); got != leader {
		t.Fatalf("leader lock holder = got pid %d, want the leader's session %d", got, leader)
	}

	if _, err := obs.Exec(ctx, `SELECT pg_terminate_backend($1)`, leader); err != nil {
		t.Fatalf("pg_terminate_backend = got error %v, want nil", err)
	}
	fake.Advance(interval)
	select {
	case <-term.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the term did not end at the first check after its session was terminated")
	}
	if err := term.Err(); err == nil || !strings.Contains(err.Error(), "leader session lost") {
		t.Fatalf("term.Err() = got %v, want leader session lost", err)
	}
}

// TestResignReleasesTheLock: Resign ends the term, says so, and frees the
// lock at once for another campaign.
func TestResignReleasesTheLock(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)
	term := lead(ctx, t, dsn, clock.NewFake(time.Unix(0, 0)))
	term.Resign()
	if err := term.Err(); err == nil || err.Error() != "resigned" {
		t.Fatalf("term.Err() after Resign = got %v, want resigned", err)
	}
	waitSessions(ctx, t, obs, "a", 0)
	if got := holder(ctx, t, obs); got != 0 {
		t.Fatalf("leader lock holder after Resign = got pid %d, want none", got)
	}
	next, err := elector(t, dsn, "b", nil).Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign(b) after a resigned = got error %v, want a term", err)
	}
	next.Resign()
}

// lead campaigns as "a" with clk (nil: the wall clock) and fails the test
// unless it wins the lock.
func lead(ctx context.Context, t *testing.T, dsn string, clk clock.Clock) *Term {
	t.Helper()
	term, err := elector(t, dsn, "a", clk).Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign(a) = got error %v, want a term", err)
	}
	return term
}

// gate is a TCP proxy to a PostgreSQL address that drops every connection
// until it is opened, as a database tier without a primary does.
type gate struct {
	ln     net.Listener
	target string
	open   atomic.Bool
	tries  atomic.Int64 // connections dropped
}

// attempts is the number of connections the gate dropped.
func (g *gate) attempts() int64 { return g.tries.Load() }

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !g.open.Load() {
				g.tries.Add(1)
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	return g
}

// TestUnreachableDatabaseLoggedOnce: a campaign against a database that
// drops every connection for a while logs that once, not per attempt, and
// logs once that it answers again, with the failed attempts counted; then
// it takes the lock.
func TestUnreachableDatabaseLoggedOnce(t *testing.T) {
	dsn := database(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(t, u.Host)
	u.Host = g.ln.Addr().String()
	var logs syncBuffer
	e, err := New(Config{DSN: u.String(), Name: "gated", Interval: interval, SessionTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, nil)), LockID: 0x6c6f67})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan *Term, 1)
	go func() {
		term, err := e.Campaign(ctx)
		if err != nil {
			t.Errorf("Campaign() = got error %v, want a term once the database answers", err)
		}
		done <- term
	}()
	testenv.Eventually(t, 10*time.Second, "10 failed attempts", func() bool {
		return strings.Count(logs.String(), "database unreachable") == 1 && g.attempts() >= 10
	})
	g.open.Store(true)
	term := <-done
	if term == nil {
		t.Fatal("no term")
	}
	defer term.Resign()
	out := logs.String()
	if n := strings.Count(out, "database unreachable"); n != 1 {
		t.Errorf("log has %d lines saying the database is unreachable over %d failed attempts, want 1:\n%s", n, g.attempts(), out)
	}
	if n := strings.Count(out, "database reachable again"); n != 1 || !strings.Contains(out, "failed_attempts=") {
		t.Errorf("log has %d lines saying the database answers again, want 1 with failed_attempts:\n%s", n, out)
	}
}

// reports records what an elector told Config.Reachable.
type reports struct {
	mu  sync.Mutex
	got []bool
}

func (r *reports) add(ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ok)
}

// count returns how many reports said ok and how many did not.
func (r *reports) count() (yes, no int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ok := range r.got {
		if ok {
			yes++
		} else {
			no++
		}
	}
	return yes, no
}

// last returns the latest report (false if none).
func (r *reports) last() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got) > 0 && r.got[len(r.got)-1]
}

// TestReachable: the election tells Config.Reachable whether the database
// answered, whatever the server's role: false at every attempt while
// nothing listens at the DSN's address; true at each answered wait of a
// standby and each check of the leader; false once the leader's check
// fails (its session terminated).
func TestReachable(t *testing.T) {
	var down reports
	dead := fmt.Sprintf("postgres://nobody@127.0.0.1:%d/repool?sslmode=disable&connect_timeout=1", testenv.FreePort(t))
	e, err := New(Config{DSN: dead, Name: "x", Interval: interval, SessionTimeout: 5 * time.Second, Reachable: down.add})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = e.Campaign(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign with nothing listening = got error %v, want the context's deadline", err)
	}
	if yes, no := down.count(); yes != 0 || no < 2 {
		t.Fatalf("reports with nothing listening = %d true, %d false; want none true and a false per attempt (at least 2 in 500 ms at a %v interval)", yes, no, interval)
	}

	dsn := database(t)
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)
	var leaderR, standbyR reports
	fake := clock.NewFake(time.Unix(0, 0))
	a, err := New(Config{DSN: dsn, Name: "a", Interval: interval, SessionTimeout: 5 * time.Second, Clock: fake, Reachable: leaderR.add})
	if err != nil {
		t.Fatal(err)
	}
	term, err := a.Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign(a) = got error %v, want a term", err)
	}
	defer term.Resign()
	if yes, no := leaderR.count(); yes != 1 || no != 0 {
		t.Fatalf("leader's reports after winning the lock = %d true, %d false; want 1 true (its lock attempt)", yes, no)
	}

	b, err := New(Config{DSN: dsn, Name: "b", Interval: interval, SessionTimeout: 5 * time.Second, Reachable: standbyR.add})
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if term, err := b.Campaign(bctx); err == nil {
			term.Resign()
		}
	}()
	testenv.Eventually(t, 30*time.Second, "the standby's waits to be reported reachable 3 times", func() bool {
		yes, _ := standbyR.count()
		return yes >= 3
	})
	bcancel()
	<-done
	if _, no := standbyR.count(); no != 0 {
		t.Errorf("standby's reports = %d false, want none: the database answered every wait", no)
	}

	if err := fake.Wait(ctx, 1); err != nil {
		t.Fatalf("waiting for the leader's check ticker = got error %v, want nil", err)
	}
	fake.Advance(interval)
	testenv.Eventually(t, 10*time.Second, "the leader's check to be reported reachable", func() bool {
		yes, _ := leaderR.count()
		return yes >= 2
	})
	s := sessions(ctx, t, obs, "a")
	if len(s) != 1 {
		t.Fatalf("sessions of a = got %+v, want one", s)
	}
	if _, err := obs.Exec(ctx, `SELECT pg_terminate_backend($1)`, s[0].pid); err != nil {
		t.Fatalf("pg_terminate_backend = got error %v, want nil", err)
	}
	fake.Advance(interval)
	select {
	case <-term.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the term did not end at the first check after its session was terminated")
	}
	if leaderR.last() {
		t.Errorf("leader's last report after its check failed = true, want false")
	}
}

// TestState: State says stopped before a campaign, waiting while a standby
// waits on the lock on its session, leader once it holds it, and stopped
// again when the term or the campaign ends.
func TestState(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)

	leader := lead(ctx, t, dsn, nil)
	b := slowElector(t, dsn, "b", nil)
	if got := b.State().State; got != status.ElectionStopped {
		t.Fatalf("State before Campaign = got %q, want %q", got, status.ElectionStopped)
	}
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	won := campaign(bctx, b)
	waitForLock(ctx, t, obs, "b")
	testenv.Eventually(t, 10*time.Second, "b's State to say waiting", func() bool { return b.State().State == status.ElectionWaiting })
	leader.Resign()
	term := await(t, won, 10*time.Second, "a resigned")
	if got := b.State().State; got != status.ElectionLeader {
		t.Fatalf("State while b leads = got %q, want %q", got, status.ElectionLeader)
	}
	term.Resign()
	if got := b.State().State; got != status.ElectionStopped {
		t.Fatalf("State after Resign = got %q, want %q", got, status.ElectionStopped)
	}
}
