package ha

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestStandbyKeepsOneSession: a standby retries the lock on one session
// instead of connecting for every attempt; when the leader's session ends
// that same session wins the lock and is the one the term keeps; a campaign
// that is cancelled closes its session.
func TestStandbyKeepsOneSession(t *testing.T) {
	const polls = 10
	dsn := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	elector := func(name string) *Elector {
		t.Helper()
		e, err := New(Config{DSN: dsn, Name: name, Interval: 20 * time.Millisecond, SessionTimeout: time.Second})
		if err != nil {
			t.Fatalf("New(%s) = got error %v, want nil", name, err)
		}
		return e
	}
	obs, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgx.Connect = got error %v, want nil", err)
	}
	defer obs.Close(context.Background())

	leader, err := elector("a").Campaign(ctx)
	if err != nil {
		t.Fatalf("Campaign(a) = got error %v, want a term", err)
	}
	defer leader.Resign()

	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	won := campaign(bctx, elector("b"))

	// Every attempt restarts query_start of the backend it runs on. The
	// deadline only bounds a broken elector: under a full CI run, with the
	// database shared by other packages' tests, attempts 20ms apart have
	// been seen 2s apart.
	pids, starts := map[int32]bool{}, map[time.Time]bool{}
	for deadline := time.Now().Add(45 * time.Second); len(starts) < polls && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, s := range sessions(ctx, t, obs, "b") {
			pids[s.pid] = true
			if s.queryStart != nil {
				starts[*s.queryStart] = true
			}
		}
	}
	if len(starts) < polls || len(pids) != 1 {
		t.Fatalf("standby b: saw %d attempts on %d backends, want at least %d attempts on 1 backend", len(starts), len(pids), polls)
	}
	var standbyPID int32
	for pid := range pids {
		standbyPID = pid
	}

	leader.Resign()
	var term *Term
	select {
	case r := <-won:
		if r.err != nil {
			t.Fatalf("Campaign(b) = got error %v, want a term once a resigns", r.err)
		}
		term = r.term
	case <-time.After(10 * time.Second):
		t.Fatal("Campaign(b) did not win the lock within 10s of a resigning")
	}
	defer term.Resign()
	var holder int32
	err = obs.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = ($1::bigint & x'ffffffff'::bigint)::oid AND granted`, LockID).Scan(&holder)
	if err != nil || holder != standbyPID {
		t.Fatalf("leader lock holder = got pid %d (%v), want the standby's session %d", holder, err, standbyPID)
	}
	if err := term.Err(); err != nil {
		t.Fatalf("term.Err() = got %v, want nil while b leads", err)
	}

	cctx, ccancel := context.WithCancel(ctx)
	lost := campaign(cctx, elector("c"))
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := len(sessions(ctx, t, obs, name))
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions of %s = got %d, want %d", name, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
