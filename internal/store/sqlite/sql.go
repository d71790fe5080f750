package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/repool/repool/internal/store/sqlstore"
)

// The CRUD shared with PostgreSQL (tenants, keys, limits, audit, the
// signing key, the epoch) is internal/store/sqlstore's, run through
// database/sql: reads on the read-only connections, writes on the writer.

// dialect is SQLite's sqlstore.Dialect: a write transaction (BEGIN
// IMMEDIATE) locks the whole database, so no row-locking clauses; times
// are unix microseconds.
var dialect = sqlstore.Dialect{
	Time:     func(t time.Time) any { return micros(t) },
	TimeDest: func(t *time.Time) any { return timeDest{t} },
	Classify: classify,
	IsUnique: isUnique,
}

// newSQL returns the shared CRUD over s's connections.
func (s *Store) newSQL() *sqlstore.Store {
	return sqlstore.New(sqlstore.Config{Dialect: dialect, Read: conn{s.r}, Write: conn{s.w}, InTx: s.inSQLTx, Options: s.opts})
}

// inSQLTx is sqlstore's transaction: a write transaction, fenced on
// demand.
func (s *Store) inSQLTx(ctx context.Context, fenced bool, fn func(sqlstore.Conn) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if fenced {
			if err := s.checkFence(ctx, tx); err != nil {
				return err
			}
		}
		return fn(conn{tx})
	})
}

// DeleteTenant implements store.Store; it also drops the tenant from the
// lease log.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	if err := s.Store.DeleteTenant(ctx, id); err != nil {
		return err
	}
	if l := s.log.Load(); l != nil {
		l.forget(id)
	}
	return nil
}

// txOf returns the transaction of a Conn that inSQLTx made.
func txOf(c sqlstore.Conn) *sql.Tx { return c.(conn).q.(*sql.Tx) }

// conn is a sqlstore.Conn on a database handle or a transaction.
type conn struct{ q querier }

func (c conn) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c conn) QueryRow(ctx context.Context, sql string, args ...any) sqlstore.Row {
	return c.q.QueryRowContext(ctx, sql, args...)
}

func (c conn) Query(ctx context.Context, each func(sqlstore.Row) error, sql string, args ...any) error {
	rows, err := c.q.QueryContext(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlstore.Each(rows, each)
}

func (c conn) ExecAll(ctx context.Context, stmts []sqlstore.Stmt) error {
	for _, st := range stmts {
		if _, err := c.q.ExecContext(ctx, st.SQL, st.Args...); err != nil {
			return err
		}
	}
	return nil
}

// timeDest scans unix microseconds (micros), NULL and 0 as the zero time.
type timeDest struct{ t *time.Time }

func (d timeDest) Scan(v any) error {
	var n sql.NullInt64
	if err := n.Scan(v); err != nil {
		return err
	}
	*d.t = fromMicros(n)
	return nil
}
