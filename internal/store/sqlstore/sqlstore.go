// Package sqlstore holds the SQL that the PostgreSQL and SQLite stores
// share: tenants, API keys, limits, audit entries, the signing key and the
// epoch. Each statement is written once, with $N placeholders, which both
// drivers bind by number (pgx natively, modernc.org/sqlite as the named
// parameter "$N").
//
// A dialect (internal/store/postgres, internal/store/sqlite) gives a Store
// its connections and transactions (Conn, Config.InTx) and the few
// spellings that differ (Dialect): row-locking clauses, how a time is
// stored, how an error is classified. What only one database can do
// (COPY, array upserts, advisory locks, the SQLite lease log, checkpoint
// generations) stays in the dialect's package.
package sqlstore

import (
	"context"
	"time"

	"github.com/repool/repool/internal/store"
)

// Row is a result row to scan: pgx.Row, pgx.Rows, *sql.Row, *sql.Rows.
type Row interface {
	Scan(dest ...any) error
}

// Stmt is one statement with its arguments.
type Stmt struct {
	SQL  string
	Args []any
}

// Conn runs statements on a database handle or in a transaction. Its
// errors are the driver's, unclassified: Store classifies them once
// (Dialect.Classify).
type Conn interface {
	// Exec runs sql and returns the number of rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
	// QueryRow runs sql; a missing row is sql.ErrNoRows at Scan (pgx's
	// ErrNoRows wraps it).
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// Query runs sql and calls each for every row, stopping at the first
	// error.
	Query(ctx context.Context, each func(Row) error, sql string, args ...any) error
	// ExecAll runs stmts in order and stops at the first error (PostgreSQL
	// sends them in one round trip).
	ExecAll(ctx context.Context, stmts []Stmt) error
}

// Dialect is what differs between the databases in the shared SQL.
type Dialect struct {
	// ForShare and ForUpdate are the row-locking clauses a SELECT ends
	// with: "" where a write transaction locks the whole database.
	ForShare, ForUpdate string
	// Time encodes a (non-zero) time as a statement argument.
	Time func(time.Time) any
	// TimeDest is the scan destination of a time column that sets *t,
	// in UTC; NULL sets the zero time.
	TimeDest func(t *time.Time) any
	// Classify wraps the errors that mean "the database cannot serve
	// right now" in store.ErrUnavailable; it passes others through.
	Classify func(error) error
	// IsUnique reports whether err is a unique (or primary key)
	// violation.
	IsUnique func(error) bool
	// LiveGroups returns, as of now, whether a server holds each group's
	// leader lock (PostgreSQL: its session advisory lock). Nil for a store
	// of one server: the default group is live, no other is.
	LiveGroups func(ctx context.Context, c Conn) (func(group string) bool, error)
}

// Config is a Store's dialect and connections.
type Config struct {
	Dialect
	// Read runs the reads, Write the writes outside a transaction (the
	// same Conn where the database has one pool).
	Read, Write Conn
	// InTx runs fn in a write transaction and commits if fn returns nil.
	// With fenced it first checks the fence (store.HA.SetFence) and fails
	// with store.ErrFenced. It returns fn's error unchanged and
	// classifies its own.
	InTx func(ctx context.Context, fenced bool, fn func(tx Conn) error) error
	// Options are the store's options (clock, read-only).
	Options store.Options
	// CheckFence checks the fence (as InTx does with fenced) inside a
	// transaction InTx runs unfenced, for a transaction that must take
	// other locks first. Nil: such transactions are fenced by InTx
	// (a database whose write transactions lock it whole).
	CheckFence func(ctx context.Context, tx Conn) error
	// EpochFloor, when set, returns the lowest epoch BumpEpoch may hand
	// out now (PostgreSQL's guard against a store restored from an older
	// copy). Nil: no floor.
	EpochFloor func() uint32
}

// Store implements the tenant, key, limit, audit, signing-key and epoch
// methods of store.Store over a Config. The dialects embed it.
type Store struct {
	c Config
}

// New returns a Store over c.
func New(c Config) *Store { return &Store{c: c} }

func (s *Store) classify(err error) error { return s.c.Classify(err) }

// Rows is a result set: pgx.Rows, *sql.Rows.
type Rows interface {
	Row
	Next() bool
	Err() error
}

// Each calls each for every row of rows, stopping at the first error; the
// caller closes rows. It is Conn.Query's loop.
func Each(rows Rows, each func(Row) error) error {
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
