package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/repool/repool/internal/store/sqlstore"
)

// The CRUD shared with SQLite (tenants, keys, limits, audit, the signing
// key, the epoch) is internal/store/sqlstore's, run through pgx.

// Row-locking clauses: readers of a tenant row take it FOR SHARE, and
// DeleteTenant FOR UPDATE, so a delete never interleaves with a write of
// the same tenant.
const (
	forShare  = "FOR SHARE"
	forUpdate = "FOR UPDATE"
)

// dialect is PostgreSQL's sqlstore.Dialect: times are timestamptz.
var dialect = sqlstore.Dialect{
	ForShare:   forShare,
	ForUpdate:  forUpdate,
	Time:       func(t time.Time) any { return t },
	TimeDest:   func(t *time.Time) any { return timeDest{t} },
	Classify:   classify,
	IsUnique:   isUnique,
	LiveGroups: liveGroups,
}

// liveGroupsSQL lists the session advisory locks (bigint keys: classid the
// high half, objid the low half, objsubid 1) granted in this database.
const liveGroupsSQL = `
SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// liveGroups reads which leader locks (GroupLockID) are held now: a
// group is live while a server holds its lock (its active server, or one
// taking over). A non-HA server's writer lock is the default group's.
func liveGroups(ctx context.Context, c sqlstore.Conn) (func(group string) bool, error) {
	held := map[int64]bool{}
	err := c.Query(ctx, func(row sqlstore.Row) error {
		var k int64
		if err := row.Scan(&k); err != nil {
			return err
		}
		held[k] = true
		return nil
	}, liveGroupsSQL)
	if err != nil {
		return nil, err
	}
	return func(g string) bool { return held[GroupLockID(g)] }, nil
}

// newSQL returns the shared CRUD over s's pool.
func (s *Store) newSQL() *sqlstore.Store {
	c := conn{s.pool}
	return sqlstore.New(sqlstore.Config{Dialect: dialect, Read: c, Write: c, InTx: s.inSQLTx, Options: s.opts,
		CheckFence: func(ctx context.Context, tx sqlstore.Conn) error { return s.checkFence(ctx, txOf(tx)) },
		EpochFloor: func() uint32 { return epochFloor(s.opts.Now()) }})
}

// inSQLTx is sqlstore's transaction: read committed, fenced on demand.
func (s *Store) inSQLTx(ctx context.Context, fenced bool, fn func(sqlstore.Conn) error) error {
	return s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if fenced {
			if err := s.checkFence(ctx, tx); err != nil {
				return err
			}
		}
		return fn(conn{tx})
	})
}

// txOf returns the transaction of a Conn that inSQLTx made.
func txOf(c sqlstore.Conn) pgx.Tx { return c.(conn).q.(pgx.Tx) }

// querier is what *pgxpool.Pool and pgx.Tx have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// conn is a sqlstore.Conn on the pool or a transaction.
type conn struct{ q querier }

func (c conn) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (c conn) QueryRow(ctx context.Context, sql string, args ...any) sqlstore.Row {
	return c.q.QueryRow(ctx, sql, args...)
}

func (c conn) Query(ctx context.Context, each func(sqlstore.Row) error, sql string, args ...any) error {
	rows, err := c.q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlstore.Each(rows, each)
}

// ExecAll sends stmts in one batch: one round trip.
func (c conn) ExecAll(ctx context.Context, stmts []sqlstore.Stmt) error {
	b := &pgx.Batch{}
	for _, st := range stmts {
		b.Queue(st.SQL, st.Args...)
	}
	return c.q.SendBatch(ctx, b).Close()
}

// timeDest scans a timestamptz, NULL as the zero time, in UTC.
type timeDest struct{ t *time.Time }

func (d timeDest) ScanTimestamptz(v pgtype.Timestamptz) error {
	*d.t = time.Time{}
	if v.Valid {
		*d.t = v.Time.UTC()
	}
	return nil
}
