package ha

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// interval is the electors' Interval in these tests.
const interval = 20 * time.Millisecond

// TestStandbyKeepsOneSession: a standby retries the lock on one session
// instead of connecting for every attempt; when the leader's session ends
// that same session wins the lock and is the one the term keeps; a campaign
// that is cancelled closes its session.
func TestStandbyKeepsOneSession(t *testing.T) {
	const polls = 10
	dsn := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)

	leader, err := elector(t, dsn, "a", nil).Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign(a) = got error %v, want a term", err)
	}
	defer leader.Resign()

	// The standby's attempts are paced by a fake clock: each Advance is
	// one more attempt, and the armed wait after it says it is over.
	fake := clock.NewFake(time.Unix(0, 0))
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	won := campaign(bctx, elector(t, dsn, "b", fake))

	// Every attempt restarts query_start of the backend it runs on.
	pids, starts := map[int32]bool{}, map[time.Time]bool{}
	for range polls {
		if err := fake.Wait(ctx, 1); err != nil {
			t.Fatalf("standby b: waiting for its next attempt = got error %v, want nil", err)
		}
		for _, s := range sessions(ctx, t, obs, "b") {
			pids[s.pid] = true
			if s.queryStart != nil {
				starts[*s.queryStart] = true
			}
		}
		fake.Advance(interval)
	}
	if len(starts) < polls || len(pids) != 1 {
		t.Fatalf("standby b: saw %d attempts on %d backends, want at least %d attempts on 1 backend", len(starts), len(pids), polls)
	}
	var standbyPID int32
	for pid := range pids {
		standbyPID = pid
	}

	leader.Resign()
	// The database frees a's lock once it has seen a's session end, which
	// is its own business: b's attempts go on, one per Advance, until one
	// wins.
	var term *Term
	deadline := time.After(10 * time.Second)
	for term == nil {
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		armed := fake.Wait(wctx, 1) == nil
		wcancel()
		if armed {
			fake.Advance(interval)
		}
		select {
		case r := <-won:
			if r.err != nil {
				t.Fatalf("Campaign(b) = got error %v, want a term once a resigns", r.err)
			}
			term = r.term
		case <-deadline:
			t.Fatal("Campaign(b) did not win the lock within 10s of a resigning")
		default:
		}
	}
	defer term.Resign()
	if got := holder(ctx, t, obs); got != standbyPID {
		t.Fatalf("leader lock holder = got pid %d, want the standby's session %d", got, standbyPID)
	}
	if err := term.Err(); err != nil {
		t.Fatalf("term.Err() = got %v, want nil while b leads", err)
	}

	cctx, ccancel := context.WithCancel(ctx)
	lost := campaign(cctx, elector(t, dsn, "c", nil))
	waitSessions(ctx, t, obs, "c", 1)
	ccancel()
	if r := <-lost; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Campaign(c) after cancel = got %v, %v, want context.Canceled", r.term, r.err)
	}
	waitSessions(ctx, t, obs, "c", 0)
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

type session struct {
	pid        int32
	queryStart *time.Time
}

// sessions lists the backends of the elector named name.
func sessions(ctx context.Context, t *testing.T, obs *pgx.Conn, name string) []session {
	t.Helper()
	rows, err := obs.Query(ctx, `SELECT pid, query_start FROM pg_stat_activity WHERE application_name = $1`, "repool-leader:"+name)
	if err != nil {
		t.Fatalf("query pg_stat_activity = got error %v, want nil", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (session, error) {
		var s session
		return s, r.Scan(&s.pid, &s.queryStart)
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
// tries every interval; the database keeps its idle session for 5s.
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
	dsn := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)
	fake := clock.NewFake(time.Unix(0, 0))
	term, err := elector(t, dsn, "a", fake).Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign(a) = got error %v, want a term", err)
	}
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
	dsn := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)
	term, err := elector(t, dsn, "a", clock.NewFake(time.Unix(0, 0))).Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign(a) = got error %v, want a term", err)
	}
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
