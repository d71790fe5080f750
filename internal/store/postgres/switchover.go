package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
)

// ElectionApp starts the application_name of every session of the leader
// election (internal/ha): "repool-leader:" and the server's --ha-name. A
// server's session is how the database, the switchover and an operator
// reading pg_stat_activity tell the servers of a group apart.
const ElectionApp = "repool-leader:"

// Querier is what the switchover's queries run on: a connection of the
// election's own (*pgx.Conn) or a pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// lockSessionsSQL lists the election's sessions on the advisory lock $1
// (its 64-bit key is classid, the high half, and objid, the low half):
// each server's name and whether it holds the lock (granted) or waits for
// it.
const lockSessionsSQL = `
SELECT substr(a.application_name, length($2) + 1), l.granted
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 1
  AND l.classid = (($1::bigint >> 32) & x'ffffffff'::bigint)::oid
  AND l.objid = ($1::bigint & x'ffffffff'::bigint)::oid
  AND a.application_name LIKE $2 || '%'
ORDER BY l.granted DESC, a.query_start`

// Election is who takes part in the election on one leader lock now: the
// active server's name ("" when none holds the lock) and the standbys
// waiting for it, in the database's order. A standby between two waits
// (one ended at its lock_timeout, the next not sent yet) is missing for
// that moment.
type Election struct {
	Active   string
	Standbys []string
}

// ReadElection reads the election on the leader lock lockID.
func ReadElection(ctx context.Context, q Querier, lockID int64) (Election, error) {
	rows, err := q.Query(ctx, lockSessionsSQL, lockID, ElectionApp)
	if err != nil {
		return Election{}, classify(err)
	}
	var e Election
	for rows.Next() {
		var name string
		var granted bool
		if err := rows.Scan(&name, &granted); err != nil {
			rows.Close()
			return Election{}, classify(err)
		}
		if granted {
			e.Active = name
		} else {
			e.Standbys = append(e.Standbys, name)
		}
	}
	return e, classify(rows.Err())
}

// PendingSwitchoverSQL is a scalar subquery: the candidate of the
// switchover requested for the group electing on the lock $1, NULL if none
// is (or the request expired). The leader's check embeds it.
const PendingSwitchoverSQL = `(SELECT candidate FROM ha_switchover WHERE lock_id = $1 AND expires_at > now())`

// PendingSwitchover returns the candidate of the switchover requested for
// the group electing on lockID, "" if none is (or the request expired).
func PendingSwitchover(ctx context.Context, q Querier, lockID int64) (string, error) {
	var candidate string
	err := q.QueryRow(ctx, `SELECT coalesce(`+PendingSwitchoverSQL+`, '')`, lockID).Scan(&candidate)
	return candidate, classify(err)
}

// EndSwitchover deletes the switchover request of lockID if it names
// candidate: the candidate took the lock, or it is gone and another
// standby took it.
func EndSwitchover(ctx context.Context, q Querier, lockID int64, candidate string) error {
	_, err := q.Exec(ctx, `DELETE FROM ha_switchover WHERE lock_id = $1 AND candidate = $2`, lockID, candidate)
	return classify(err)
}

// Switchover asks the active server of group to hand leadership to the
// standby named to, and waits up to timeout for to to hold the lock
// (server switchover). It refuses, changing nothing, when the group has no
// active server, when to is the active server, and when to is not waiting
// for the lock (it looks for up to standbyLookup: a standby between two
// waits is missing for a moment), naming the standbys there are. The
// request lasts timeout: if to has not taken over by then, Switchover
// withdraws it and says so, and the group elects as it would have. progress
// receives a line when the request is written.
func Switchover(ctx context.Context, q Querier, group, to string, timeout time.Duration, progress func(string)) (from string, took time.Duration, err error) {
	if err := store.ValidateGroup(group); err != nil {
		return "", 0, err
	}
	if to == "" {
		return "", 0, fmt.Errorf("%w: switchover: the candidate's name (--to, its --ha-name) is empty", store.ErrInvalid)
	}
	if timeout <= 0 {
		return "", 0, fmt.Errorf("%w: switchover: timeout %v: want a positive duration", store.ErrInvalid, timeout)
	}
	lockID := GroupLockID(group)
	e, waiting, err := LookForStandby(ctx, q, lockID, to, standbyLookup, func(e Election) error {
		switch {
		case e.Active == "":
			return fmt.Errorf("%w: group %q has no active server: there is nothing to switch over (a standby takes the free lock by itself)", store.ErrConflict, group)
		case e.Active == to:
			return fmt.Errorf("%w: %s is already the active server of group %q", store.ErrConflict, to, group)
		}
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	if !waiting {
		standbys := "none"
		if len(e.Standbys) > 0 {
			standbys = strings.Join(e.Standbys, ", ")
		}
		return "", 0, fmt.Errorf("%w: %s is not standing by in group %q (no session of it waits for the group's leader lock); standbys waiting now: %s", store.ErrConflict, to, group, standbys)
	}
	from = e.Active
	if _, err := q.Exec(ctx, `
INSERT INTO ha_switchover (lock_id, candidate, expires_at) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
ON CONFLICT (lock_id) DO UPDATE SET candidate = excluded.candidate, requested_at = now(), expires_at = excluded.expires_at`,
		lockID, to, timeout.Milliseconds()); err != nil {
		return "", 0, classify(err)
	}
	start := time.Now()
	progress(fmt.Sprintf("asked %s, the active server of group %s, to hand over to %s (waiting up to %v)", from, group, to, timeout))
	for {
		e, err := ReadElection(ctx, q, lockID)
		if err == nil && e.Active == to {
			return from, time.Since(start), nil
		}
		if time.Since(start) > timeout || ctx.Err() != nil {
			// Withdrawn on a context of its own: ctx may be what ended.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			withdrawn := "the request is withdrawn"
			if werr := EndSwitchover(wctx, q, lockID, to); werr != nil {
				withdrawn = fmt.Sprintf("withdrawing the request failed (it expires by itself): %v", werr)
			}
			why := fmt.Sprintf("within %v", timeout)
			if ctx.Err() != nil {
				why = fmt.Sprintf("before the wait ended (%v)", ctx.Err())
			}
			return from, time.Since(start), fmt.Errorf("%w: %s did not take over group %q %s (active now: %q); %s", store.ErrUnavailable, to, group, why, e.Active, withdrawn)
		}
		_ = clock.Sleep(ctx, clock.Real{}, 20*time.Millisecond) // an ended ctx withdraws the request above
	}
}

// standbyLookup is how long Switchover looks for the candidate among the
// sessions waiting for the lock.
const standbyLookup = time.Second

// LookForStandby reads the election on lockID until name is among the
// standbys waiting for the lock, for up to within: a standby between two
// of its waits (one ended at its lock_timeout, the next not sent yet) is
// missing for a moment, and a moment longer on a busy machine. It returns
// the last election read and whether name was waiting in it; refuse, when
// set, is asked about every election read, and its error ends the look.
func LookForStandby(ctx context.Context, q Querier, lockID int64, name string, within time.Duration, refuse func(Election) error) (Election, bool, error) {
	deadline := time.Now().Add(within)
	for {
		e, err := ReadElection(ctx, q, lockID)
		if err != nil {
			return e, false, err
		}
		if refuse != nil {
			if err := refuse(e); err != nil {
				return e, false, err
			}
		}
		if waiting := slices.Contains(e.Standbys, name); waiting || time.Now().After(deadline) {
			return e, waiting, nil
		}
		if err := clock.Sleep(ctx, clock.Real{}, standbyLookPause); err != nil {
			return e, false, err
		}
	}
}

// standbyLookPause paces LookForStandby's reads.
const standbyLookPause = 20 * time.Millisecond
