// Package ha elects the active server among several that share one
// PostgreSQL, Ceph-MGR style: the active one holds a session advisory lock
// on a dedicated connection. Losing that session — the process dies, it is
// paused past the session timeout, or the network drops — frees the lock
// for a standby, and the former leader notices at its next check and steps
// down. A standby waits for the lock in the database (pg_advisory_lock
// under a lock_timeout), so it takes a freed lock as soon as the database
// has freed it, not at its next poll. Writes are fenced separately, by
// epoch, in the store (store.HA), so a leader that has not noticed yet can
// never overwrite its successor.
//
// A switchover (server switchover, postgres.Switchover) directs the
// election: the leader sees the request at a check and hands over (its
// Term's Switchover), and a standby that wins the lock while the request
// names another server still there leaves the lock to it.
package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/status"
	"github.com/repool/repool/internal/store/postgres"
)

// LockID is the advisory lock key of the default group's leader election:
// the store's writer lock, so that a server outside the group and the
// group's active server never write at once. Other groups elect on their
// own key (Config.LockID, postgres.GroupLockID).
const LockID = postgres.WriterLockID

// Config tunes an Elector. DSN is required; zero durations take defaults.
type Config struct {
	// DSN of the shared PostgreSQL.
	DSN string
	// Name identifies this server in pg_stat_activity (application_name).
	Name string
	// Interval between session checks of the leader, and the pause of a
	// standby before it connects again after its session failed. It also
	// bounds a standby's wait for the lock on one query (lockTimeout, at
	// most 500ms), but it does not pace takeover: a waiting standby gets a
	// freed lock at once. Zero means 250ms; negative is an error.
	Interval time.Duration
	// SessionTimeout is how long the database keeps the leader's session
	// (and so the lock) when the leader stops talking: PostgreSQL's
	// idle_session_timeout on the dedicated session. A leader paused or cut
	// off for longer loses the lock. Zero means 2s; negative is an error;
	// it must exceed Interval.
	SessionTimeout time.Duration
	// Clock paces the leader's checks and the standby's reconnects; nil
	// means the wall clock. A standby's wait for the lock is the
	// database's (lock_timeout), and the bounds on each round trip to the
	// database (SessionTimeout, the check bound) stay on real time: they
	// race the database's own timeouts, which no fake clock moves.
	Clock clock.Clock
	// Log receives transitions.
	Log *slog.Logger
	// LockID is the advisory lock the group's servers compete for; zero
	// means LockID (the default group's).
	LockID int64
	// Reachable, when set, is told after each exchange of the election
	// with the database whether the database answered: true after a wait
	// for the lock (a standby's, or the winning one) or a leader's check
	// answered, held or not; false after a connection, a wait or a check
	// failed or went unanswered within its bound. An attempt that ctx
	// ended tells nothing. A standby
	// calls it about every lockTimeout, a leader every Interval, a server
	// that cannot reach the database every Interval: it says whether the
	// database can be reached from this server, whatever its role.
	Reachable func(ok bool)
}

// Elector campaigns for leadership. Campaign is for one goroutine at a
// time; State is safe for concurrent use.
type Elector struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	state status.Election
}

// State says what the election is doing now: status.ElectionLeader while a
// term lasts, ElectionWaiting while a standby waits on the lock on an open
// session, ElectionReconnecting (with the last attempt's error) between a
// failed attempt and the next session, ElectionStopped otherwise.
func (e *Elector) State() status.Election {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state
}

// setState records a change of state; the same state keeps its Since.
func (e *Elector) setState(state string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if e.state.State != state {
		e.state.Since = e.cfg.Clock.Now()
	}
	e.state.State, e.state.Error = state, msg
}

// New returns an Elector, or an error naming the bad field: an empty DSN,
// a negative Interval or SessionTimeout, or a SessionTimeout that does not
// exceed Interval.
func New(cfg Config) (*Elector, error) {
	if cfg.DSN == "" {
		return nil, errors.New("ha: Config.DSN is empty")
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("ha: Config.Interval %v: want > 0 (zero means 250ms)", cfg.Interval)
	}
	if cfg.SessionTimeout < 0 {
		return nil, fmt.Errorf("ha: Config.SessionTimeout %v: want > 0 (zero means 2s)", cfg.SessionTimeout)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 2 * time.Second
	}
	if cfg.SessionTimeout <= cfg.Interval {
		return nil, fmt.Errorf("ha: Config.SessionTimeout %v must exceed Config.Interval %v", cfg.SessionTimeout, cfg.Interval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.LockID == 0 {
		cfg.LockID = LockID
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Reachable == nil {
		cfg.Reachable = func(bool) {}
	}
	e := &Elector{cfg: cfg, log: cfg.Log.With("component", "ha")}
	e.setState(status.ElectionStopped, nil)
	return e, nil
}

// Term is one period of leadership. Done is closed when it ends: the
// session was lost, a check failed, or Resign was called.
type Term struct {
	done       chan struct{}
	cancel     context.CancelFunc
	why        error
	switchover chan string
}

// Switchover receives, once, the name of the standby a switchover asks
// this leader to hand over to (server switchover): the server stops
// serving, checkpoints and then resigns, and the candidate, waiting for
// the lock, takes it. The term goes on until Resign.
func (t *Term) Switchover() <-chan string { return t.switchover }

// Done is closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.done }

// Err says why the term ended (nil while it lasts).
func (t *Term) Err() error {
	select {
	case <-t.done:
		return t.why
	default:
		return nil
	}
}

// Resign ends the term and releases the lock.
func (t *Term) Resign() {
	t.cancel()
	<-t.done
}

// Campaign blocks until this server holds the leader lock, or ctx ends.
//
// A standby keeps one session and waits on it for the lock in the
// database: pg_advisory_lock, which the database grants the moment the
// lock is freed (the leader's session ended), under the session's
// lock_timeout (lockTimeout). A wait that times out is asked again at once
// on the same session; the timeout is caught in the database (lock), so a
// healthy standby's waits leave nothing in the database's log. The standby
// drops the session and connects anew, after Interval, only when an
// attempt fails otherwise (the session broke, or the database took longer
// than SessionTimeout to answer). The session that wins the lock is the
// one the Term keeps: the lock belongs to it. When ctx ends, a waiting
// attempt is cancelled (pgx cancels the query and closes the connection)
// and the session is closed.
//
// A database that cannot be reached (a failover of the database tier,
// when HAProxy has no primary to send the session to) is logged once, at
// the first failed attempt, and its end once, with the number of failed
// attempts and how long they lasted: not once per attempt.
func (e *Elector) Campaign(ctx context.Context) (_ *Term, err error) {
	defer func() {
		if err != nil {
			e.setState(status.ElectionStopped, nil)
		}
	}()
	var conn *pgx.Conn
	var failed int             // attempts failed in a row
	var failingSince time.Time // the first of them
	for {
		var err error
		if conn == nil {
			conn, err = e.connect(ctx)
			if err == nil && failed > 0 {
				e.log.Info("leader election: database reachable again", "failed_attempts", failed,
					"after", time.Since(failingSince).Round(time.Millisecond))
				failed = 0
			}
		}
		if err == nil {
			e.setState(status.ElectionWaiting, nil)
			var held bool
			sent := time.Now()
			held, err = e.lock(ctx, conn)
			if ctx.Err() == nil {
				e.cfg.Reachable(err == nil)
			}
			if err == nil && held {
				if to, yield := e.yieldTo(ctx, conn); yield {
					// Left to the switchover's candidate, which waits for
					// it; this standby waits again after a pause, so that
					// it does not win the lock back in the moment the
					// candidate is between two waits.
					if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, e.cfg.LockID); err != nil {
						conn.Close(context.WithoutCancel(ctx)) // the lock goes with the session
						conn = nil
					}
					e.log.Info("left the leader lock to the switchover's candidate", "candidate", to)
					if err := clock.Sleep(ctx, e.cfg.Clock, e.cfg.Interval); err != nil {
						if conn != nil {
							conn.Close(context.WithoutCancel(ctx))
						}
						return nil, err
					}
					continue
				}
				e.log.Info("acquired the leader lock")
				return e.hold(conn, sent), nil
			}
			if err == nil && ctx.Err() == nil {
				continue // not yet: wait again on the same session
			}
			if err == nil {
				err = ctx.Err()
			}
			conn.Close(context.WithoutCancel(ctx))
			conn = nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.cfg.Reachable(false)
		if failed == 0 {
			failingSince = time.Now()
			e.log.Warn("leader election: database unreachable; retrying every interval, logged again when it answers",
				"err", err, "interval", e.cfg.Interval)
		}
		failed++
		e.setState(status.ElectionReconnecting, err)
		if err := clock.Sleep(ctx, e.cfg.Clock, e.cfg.Interval); err != nil {
			return nil, err
		}
	}
}

// yieldTo is asked by a standby that has just won the lock: it says
// whether to leave the lock to a switchover's candidate, another server
// waiting for the lock now (postgres.PendingSwitchover, ReadElection). The
// candidate itself ends the request when it wins; so does a standby that
// does not find the candidate waiting within candidateLookup (gone, or
// paused: a candidate that cannot take the lock must not hold the group
// without a leader), and takes the lock. Errors (a schema without
// the request table, a failed query) leave nothing to yield to: the
// switchover only directs an election, whose safety is the lock's and the
// epoch's.
func (e *Elector) yieldTo(ctx context.Context, conn *pgx.Conn) (string, bool) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.SessionTimeout)
	defer cancel()
	to, err := postgres.PendingSwitchover(cctx, conn, e.cfg.LockID)
	if err != nil || to == "" {
		return "", false
	}
	if to == e.cfg.Name {
		e.log.Info("took the leader lock as the switchover's candidate")
		_ = postgres.EndSwitchover(cctx, conn, e.cfg.LockID, to)
		return "", false
	}
	// A live candidate is out of the queue for a moment between two of
	// its waits: it is looked for again before it is taken for gone or
	// paused.
	_, waiting, err := postgres.LookForStandby(cctx, conn, e.cfg.LockID, to, e.candidateLookup(), nil)
	if err != nil {
		return "", false
	}
	if !waiting {
		e.log.Warn("the switchover's candidate is not waiting for the leader lock (gone, or paused); taking the lock", "candidate", to)
		_ = postgres.EndSwitchover(cctx, conn, e.cfg.LockID, to)
		return "", false
	}
	return to, true
}

// candidateLookup is how long a standby that won the lock looks for a
// switchover's candidate among the sessions waiting: one of the
// candidate's waits and one interval (its next wait is sent one round trip
// after the last ended), at least 250 ms, for a busy machine's round
// trips. A candidate that is gone costs the group this much more time
// without a leader.
func (e *Elector) candidateLookup() time.Duration {
	return max(e.lockTimeout()+e.cfg.Interval, 250*time.Millisecond)
}

// confirmedFor is how long a leader may serve on one confirmation that its
// session held the lock, counted from when that confirmation's query (the
// check, or the lock attempt that won) was sent. The database frees the
// lock of a silent session SessionTimeout after the session's last query
// ended (idle_session_timeout), and that query ended after it was sent, so
// the lock is the leader's until at least sent + SessionTimeout; the
// leader stops serving Interval before that, as margin for its own step
// down. 1.75 s with the defaults. A check is waited for until the last
// confirmation runs out, not for a fixed share of the period: an answer
// that comes late but says the lock is held proves the session was busy,
// not idle, so a slow database or a starved process (both cores busy, a
// long GC pause) does not end a term the database has not ended.
func (e *Elector) confirmedFor() time.Duration {
	return e.cfg.SessionTimeout - e.cfg.Interval
}

// maxLockTimeout caps lockTimeout at half of PostgreSQL's default
// deadlock_timeout (1s), so that a standby's wait never lasts long enough
// to run the database's deadlock check or, with log_lock_waits on, to log
// "still waiting for AdvisoryLock".
const maxLockTimeout = 500 * time.Millisecond

// lockTimeout is the lock_timeout of the election's sessions: how long one
// pg_advisory_lock of a standby waits before the database gives up on it
// and the standby asks again. Takeover does not wait for it — the database
// grants a freed lock to a waiting session at once — and a wait that times
// out logs nothing (lock catches it in the database). What it sets:
//   - round trips: one per lockTimeout per standby, each a short PL/pgSQL
//     block and a look at the session's own rows of pg_locks; longer is
//     cheaper;
//   - how long a wait can outlive its client: a standby whose network
//     vanished without a reset stays queued until its wait times out (the
//     database does not read the socket while the statement waits), and
//     if it wins the lock in that window the lock stays with a session
//     nobody serves from until the database's idle_session_timeout
//     (SessionTimeout) or keepalives end it, as with an answer lost in
//     flight when standbys polled; shorter is safer.
//
// Interval keeps that window as short as the leader's check period, and
// is the knob an operator already has; SessionTimeout/2 caps it so that
// the attempt's client-side bound (SessionTimeout, in lock) always leaves
// at least as long again for the answer to arrive; maxLockTimeout keeps it
// below the database's default deadlock_timeout. 250 ms with the defaults;
// never below 1 ms, since 0 would disable the timeout.
func (e *Elector) lockTimeout() time.Duration {
	return max(time.Millisecond, min(e.cfg.Interval, e.cfg.SessionTimeout/2, maxLockTimeout))
}

// heldQuery is the query that says whether the session holds the advisory
// lock whose key is the SQL expression key.
func heldQuery(key string) string {
	return `SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objid = (` + key + `::bigint & x'ffffffff'::bigint)::oid AND granted`
}

// lockSQL is one attempt of lock, sent as one simple-protocol query string
// (one round trip): a DO block that waits for the lock and catches the
// wait's timeout (lock_not_available), then the check's query. A DO block
// takes no parameters, so the key is in the text: an int64 formatted by
// %d, quoted so that even math.MinInt64 reads as a bigint. The string
// runs as one implicit transaction and the block in a subtransaction of it
// (its EXCEPTION clause); the lock it takes is a session lock, which no
// (sub)transaction's end releases (TestLockAttempt).
func (e *Elector) lockSQL() string {
	key := fmt.Sprintf("'%d'", e.cfg.LockID)
	return `DO $$BEGIN PERFORM pg_advisory_lock(` + key + `::bigint); EXCEPTION WHEN lock_not_available THEN NULL; END$$; ` + heldQuery(key)
}

// lock waits on conn, up to lockTimeout in the database, for the leader
// lock, and says whether this session holds it when the wait ended: held
// is false, with no error, when the wait timed out. The wait's timeout is
// caught inside the database (lockSQL), so PostgreSQL does not log it as
// an ERROR, as it would a statement failing on lock_timeout. The attempt
// is bounded on the client too, by SessionTimeout (above lockTimeout, so a
// healthy database always answers first), so a kept session whose network
// vanished without a reset fails the attempt (and is replaced) instead of
// stalling the campaign until the kernel gives up on the connection. The
// session's idle_session_timeout does not run while the query waits; that
// is fine for a standby, which holds no lock for it to free.
func (e *Elector) lock(ctx context.Context, conn *pgx.Conn) (held bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.SessionTimeout)
	defer cancel()
	results, err := conn.PgConn().Exec(cctx, e.lockSQL()).ReadAll()
	for _, r := range results {
		if err == nil {
			err = r.Err
		}
	}
	if err != nil {
		return false, err
	}
	if len(results) != 2 || len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 1 {
		return false, fmt.Errorf("ha: lock attempt: got %d results, want the DO block's and one row of one column", len(results))
	}
	switch v := string(results[1].Rows[0][0]); v {
	case "t":
		return true, nil
	case "f":
		return false, nil
	default:
		return false, fmt.Errorf("ha: lock attempt: got %q, want a boolean", v)
	}
}

// connect opens a session for the election: named in pg_stat_activity, with
// the session timeouts and keepalives that let the database free the lock
// of a leader that stopped talking, and the lock_timeout that bounds a
// standby's wait for the lock.
func (e *Elector) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(e.cfg.DSN)
	if err != nil {
		return nil, errors.New("ha: cannot parse the connection string")
	}
	cfg.RuntimeParams["application_name"] = postgres.ElectionApp + e.cfg.Name
	ms := e.cfg.SessionTimeout.Milliseconds()
	cfg.RuntimeParams["idle_session_timeout"] = fmt.Sprint(ms)
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(ms)
	cfg.RuntimeParams["lock_timeout"] = fmt.Sprint(e.lockTimeout().Milliseconds())
	secs := max(1, int(e.cfg.SessionTimeout.Seconds()/2))
	cfg.RuntimeParams["tcp_keepalives_idle"] = fmt.Sprint(secs)
	cfg.RuntimeParams["tcp_keepalives_interval"] = "1"
	cfg.RuntimeParams["tcp_keepalives_count"] = "2"
	cctx, cancel := context.WithTimeout(ctx, e.cfg.SessionTimeout)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}

// hold keeps the session alive and watches it. Each check confirms the
// lock for confirmedFor from when it was sent, and passes a switchover's
// request on to the term (Switchover), once; a check that fails, says the
// lock is not held, or has no answer when the last confirmation runs out
// ends the term at once, so that the leader stops serving before the
// database could have handed the lock to another. sent is when the lock
// attempt that won was sent: the first confirmation. The confirmations run
// on real time (time.Now), not on Config.Clock: they race the database's
// own timeout.
func (e *Elector) hold(conn *pgx.Conn, sent time.Time) *Term {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Term{done: make(chan struct{}), cancel: cancel, switchover: make(chan string, 1)}
	until := sent.Add(e.confirmedFor())
	asked := false // a switchover was passed on
	e.setState(status.ElectionLeader, nil)
	go func() {
		defer close(t.done)
		defer e.setState(status.ElectionStopped, nil)
		defer conn.Close(context.Background())
		clock.Every(ctx, e.cfg.Clock, e.cfg.Interval, func(ctx context.Context) bool {
			sent := time.Now()
			held, to, err := e.check(ctx, conn, until)
			if ctx.Err() != nil {
				return false // resigned
			}
			e.cfg.Reachable(err == nil)
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				t.why = fmt.Errorf("leader session unconfirmed: no answer from the database within %v of sending the last check it answered, and it may soon free the lock", e.confirmedFor())
			case err != nil || !held:
				t.why = fmt.Errorf("leader session lost: %v", errOr(err, "lock not held"))
			default:
				until = sent.Add(e.confirmedFor())
				if !asked && to != "" && to != e.cfg.Name {
					e.log.Info("switchover requested: handing over", "candidate", to)
					t.switchover <- to
					asked = true
				}
				return true
			}
			e.log.Error("stepping down", "why", t.why)
			return false
		})
		if t.why == nil {
			t.why = errors.New("resigned")
		}
	}()
	return t
}

// check asks whether conn still holds the leader lock, and which server a
// switchover requested for the lock names ("" if none), in one round
// trip, waiting for the answer until the deadline until (the last
// confirmation's end). The request's table is the store's (migrated before
// a server campaigns).
func (e *Elector) check(ctx context.Context, conn *pgx.Conn, until time.Time) (held bool, switchoverTo string, err error) {
	cctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	err = conn.QueryRow(cctx, checkSQL, e.cfg.LockID).Scan(&held, &switchoverTo)
	return held, switchoverTo, err
}

// checkSQL is the leader's check: heldQuery's answer and the pending
// switchover's candidate.
var checkSQL = `SELECT (` + heldQuery("$1") + `), coalesce(` + postgres.PendingSwitchoverSQL + `, '')`

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}
