package ha

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/clock"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/postgres"
	"github.com/repool/repool/internal/testenv"
)

// database returns a fresh PostgreSQL database with the store's schema
// (the switchover's request table is in it), as every server of a group
// finds it: a server opens (and migrates) the store before it campaigns.
func database(t *testing.T) string {
	t.Helper()
	dsn := testenv.Postgres(t)
	s, err := postgres.Open(context.Background(), dsn, store.Options{})
	if err != nil {
		t.Fatalf("postgres.Open = got error %v, want nil", err)
	}
	s.Close()
	return dsn
}

// noRequest fails the test if a switchover request is pending.
func noRequest(ctx context.Context, t *testing.T, obs *pgx.Conn, when string) {
	t.Helper()
	if to, err := postgres.PendingSwitchover(ctx, obs, LockID); err != nil || to != "" {
		t.Fatalf("the switchover request %s = got %q, %v, want none", when, to, err)
	}
}

// TestSwitchoverToTheNamedStandby: a leader "a" and two standbys, "b"
// first in the database's queue for the lock and "c" after it. A
// switchover to c reaches a's term (Switchover names c) while a still
// leads; when a resigns, c takes the lock, not b, though b waited first;
// b waits on; the request is gone once c holds the lock.
func TestSwitchoverToTheNamedStandby(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)

	a := lead(ctx, t, dsn, nil)
	defer a.Resign()
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	bWon := campaign(bctx, elector(t, dsn, "b", nil))
	waitForLock(ctx, t, obs, "b")
	cWon := campaign(ctx, elector(t, dsn, "c", nil))
	waitForLock(ctx, t, obs, "c")

	done := make(chan error, 1)
	var from string
	var lines []string
	op := observer(ctx, t, dsn) // the operator's session
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		from, _, err = postgres.Switchover(ctx, op, store.DefaultGroup, "c", 20*time.Second, func(s string) { lines = append(lines, s) })
		done <- err
	})
	// On a failure the switchover is ended before the cleanup closes
	// its session (a pgx.Conn is one goroutine's).
	defer func() { cancel(); wg.Wait() }()
	select {
	case to := <-a.Switchover():
		if to != "c" {
			t.Fatalf("a's term: Switchover = got %q, want c", to)
		}
	case <-time.After(10 * time.Second): // a test timeout, not a measure
		t.Fatal("a's term was not asked to switch over within 10s")
	}
	if err := a.Err(); err != nil {
		t.Fatalf("a's term after the request = ended with %v, want it to last until a resigns", err)
	}
	a.Resign()
	c := await(t, cWon, 10*time.Second, "a resigned for a switchover to c")
	defer c.Resign()
	if err := <-done; err != nil || from != "a" || len(lines) != 1 || !strings.Contains(lines[0], "hand over to c") {
		t.Fatalf("Switchover(to c) = got from %q, %v, progress %q; want from a, nil, one line", from, err, lines)
	}
	select {
	case r := <-bWon:
		t.Fatalf("b won the lock (%v, %v) while the switchover named c", r.term, r.err)
	default:
	}
	waitForLock(ctx, t, obs, "b")
	noRequest(ctx, t, obs, "once c leads")
}

// TestSwitchoverWaitsForACandidateBetweenWaits: the candidate "c" is a
// slow standby, out of the queue for the lock for 100 ms between two of
// its waits (a busy machine's round trip). The leader "a" resigns for a
// switchover to c just as c's wait has ended; "b", waiting, wins the lock
// while c is not in the queue, looks for c again, finds it waiting, and
// leaves the lock to it: c takes over, b does not.
func TestSwitchoverWaitsForACandidateBetweenWaits(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)

	a := lead(ctx, t, dsn, nil)
	defer a.Resign()
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	bWon := campaign(bctx, elector(t, dsn, "b", nil))
	waitForLock(ctx, t, obs, "b")

	// c: an election session of c's (connect: its name, its lock_timeout)
	// that waits as a standby does but pauses 100 ms between two waits,
	// saying so on paused; won is closed once it holds the lock.
	ce := elector(t, dsn, "c", nil)
	cconn, err := ce.connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cconn.Close(context.Background())
	paused, won := make(chan struct{}, 1), make(chan struct{})
	cctx, ccancel := context.WithCancel(ctx)
	var cwg sync.WaitGroup
	cwg.Go(func() {
		for cctx.Err() == nil {
			held, err := ce.lock(cctx, cconn)
			if err != nil {
				return
			}
			if held {
				close(won)
				return
			}
			select {
			case paused <- struct{}{}:
			default:
			}
			if clock.Sleep(cctx, clock.Real{}, 100*time.Millisecond) != nil { // the slow re-issue this test is about
				return
			}
		}
	})
	defer func() { ccancel(); cwg.Wait() }()
	waitForLock(ctx, t, obs, "c")

	op := observer(ctx, t, dsn) // the operator's session
	var wg sync.WaitGroup
	done := make(chan error, 1)
	wg.Go(func() {
		_, _, err := postgres.Switchover(ctx, op, store.DefaultGroup, "c", 20*time.Second, func(string) {})
		done <- err
	})
	defer func() { cancel(); wg.Wait() }()
	select {
	case <-a.Switchover():
	case <-time.After(10 * time.Second): // a test timeout, not a measure
		t.Fatal("a's term was not asked to switch over within 10s")
	}
	// Resign as c's wait has just ended: b wins while c is out of the
	// queue.
	for len(paused) > 0 {
		<-paused
	}
	<-paused
	a.Resign()
	select {
	case <-won:
	case r := <-bWon:
		t.Fatalf("b won the lock (%v, %v) while the switchover named c, which was between two waits", r.term, r.err)
	case <-time.After(10 * time.Second): // a test timeout, not a measure
		t.Fatal("c did not take the lock within 10s of a's resignation")
	}
	if err := <-done; err != nil {
		t.Fatalf("Switchover(to c) = %v, want c to take over", err)
	}
	select {
	case r := <-bWon:
		t.Fatalf("b won the lock (%v, %v) after c took it", r.term, r.err)
	default:
	}
}

// TestSwitchoverToAGoneCandidate: the candidate's session ends after the
// request (its server died): the standby that wins the lock finds the
// candidate not waiting for it, takes over and ends the request.
func TestSwitchoverToAGoneCandidate(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)

	a := lead(ctx, t, dsn, nil)
	defer a.Resign()
	bWon := campaign(ctx, elector(t, dsn, "b", nil))
	waitForLock(ctx, t, obs, "b")
	cctx, ccancel := context.WithCancel(ctx)
	cWon := campaign(cctx, elector(t, dsn, "c", nil))
	waitForLock(ctx, t, obs, "c")

	op := observer(ctx, t, dsn) // the operator's session
	swctx, swcancel := context.WithCancel(ctx)
	withdrawn := make(chan error, 1)
	go func() {
		_, _, err := postgres.Switchover(swctx, op, store.DefaultGroup, "c", 20*time.Second, func(string) {})
		withdrawn <- err
	}()
	defer func() {
		// The operator gives up waiting: the request is withdrawn.
		swcancel()
		if err := <-withdrawn; !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "withdrawn") {
			t.Errorf("Switchover(to c, gone) once cancelled = got %v, want ErrUnavailable saying it is withdrawn", err)
		}
	}()
	select {
	case <-a.Switchover():
	case <-time.After(10 * time.Second): // a test timeout, not a measure
		t.Fatal("a's term was not asked to switch over within 10s")
	}
	ccancel()
	if r := <-cWon; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Campaign(c) after its cancel = got %v, %v", r.term, r.err)
	}
	waitSessions(ctx, t, obs, "c", 0)
	a.Resign()
	b := await(t, bWon, 10*time.Second, "a resigned and the candidate c is gone")
	defer b.Resign()
	noRequest(ctx, t, obs, "once b leads")
}

// TestSwitchoverRefusals: no active server, the active server named, and
// a name no standby has are refused, each saying why, and leave no
// request behind.
func TestSwitchoverRefusals(t *testing.T) {
	dsn := database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(ctx, t, dsn)
	refused := func(to, want string) {
		t.Helper()
		_, _, err := postgres.Switchover(ctx, obs, store.DefaultGroup, to, 5*time.Second, func(string) {})
		if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Switchover(to %s) = got %v, want ErrConflict saying %q", to, err, want)
		}
		noRequest(ctx, t, obs, "after a refusal")
	}
	refused("b", "has no active server")
	a := lead(ctx, t, dsn, nil)
	defer a.Resign()
	refused("a", "a is already the active server")
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	campaign(bctx, elector(t, dsn, "b", nil))
	waitForLock(ctx, t, obs, "b")
	refused("x", "x is not standing by in group \"default\"")
	for _, bad := range []struct{ group, to string }{{"", ""}, {"no such group!", "b"}} {
		if _, _, err := postgres.Switchover(ctx, obs, bad.group, bad.to, time.Second, func(string) {}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Switchover(group %q, to %q) = got %v, want ErrInvalid", bad.group, bad.to, err)
		}
	}
}
