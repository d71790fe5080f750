// Package postgres implements store.Store on PostgreSQL with pgx (pgxpool,
// no database/sql on the data path). Several server instances may share one
// database: every multi-statement change runs in one transaction with the
// row locks it needs, and migrations take a session advisory lock.
//
// Full checkpoints are written with COPY; incremental ones as array
// (unnest) upserts. Fencing tokens and the epoch are stored as bigint, so
// FencingHWM is limited to store.MaxFencingHWM.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/sqlstore"
)

// rollbackTimeout bounds a rollback after a failed transaction.
const rollbackTimeout = 5 * time.Second

//go:embed migrations/*.sql
var migrations embed.FS

// Store is the PostgreSQL store. It is safe for concurrent use. Close it
// when done.
type Store struct {
	*sqlstore.Store // tenants, keys, limits, audit, signing key, epoch

	pool  *pgxpool.Pool
	opts  store.Options
	dsn   string
	fence atomic.Uint32 // epoch the active server's writes must still hold; 0: unfenced
}

var (
	_ store.Store = (*Store)(nil)
	_ store.HA    = (*Store)(nil)
)

// Open connects to the database at dsn (a postgres:// URL or a libpq
// key=value string; pool settings such as pool_max_conns are honoured),
// checks that it answers, and applies the embedded migrations under a
// session advisory lock, so instances starting together migrate once (with
// store.Options ReadOnly: checks that the schema is there instead). A
// malformed dsn returns store.ErrInvalid; a database that cannot be reached
// returns store.ErrUnavailable.
func Open(ctx context.Context, dsn string, opts store.Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error may quote the DSN, password included.
		return nil, fmt.Errorf("%w: postgres: cannot parse the connection string", store.ErrInvalid)
	}
	if opts.ReadOnly {
		// Every transaction of every connection is read-only: a write
		// fails in the database, whatever the code tries.
		cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", classify(err))
	}
	s := &Store{pool: pool, opts: opts, dsn: dsn}
	s.Store = s.newSQL()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open: %w", classify(err))
	}
	if opts.ReadOnly {
		if err := s.checkSchema(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres: open: %w", err)
		}
		return s, nil
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	return s, nil
}

// checkSchema is a read-only store's check, in place of the migrations,
// that repool's tables are there.
func (s *Store) checkSchema(ctx context.Context) error {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM server_secrets`).Scan(&n)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w: no repool store in this database (no schema); a server creates it on its first start", store.ErrNotFound)
	}
	return classify(err)
}

// migrate applies the embedded migrations through a database/sql view of
// the pool (goose needs one), holding a session advisory lock.
func (s *Store) migrate(ctx context.Context) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return dialect.Migrate(ctx, db, goose.DialectPostgres, migrations, goose.WithSessionLocker(locker))
}

// Close closes every connection of the pool, waiting for acquired ones to
// be released.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// classify wraps errors that mean "the database cannot serve right now" in
// store.ErrUnavailable: failed connects (refused, bad credentials, missing
// database), lost connections, server shutdown or overload, lock and
// statement timeouts, serialization failures and deadlocks (retrying
// helps). Context errors and every other error pass through unchanged.
func classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

func unavailable(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),  // insufficient resources
			strings.HasPrefix(pe.Code, "57P"), // admin/crash shutdown, cannot connect now
			pe.Code == "57014",                // statement timeout
			pe.Code == "55P03",                // lock not available
			pe.Code == "40001",                // serialization failure
			pe.Code == "40P01",                // deadlock detected
			pe.Code == "25006":                // read-only transaction (a standby)
			return true
		}
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		strings.Contains(err.Error(), "closed pool")
}

// isUnique reports whether err is a unique violation.
func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// inTx runs fn in a read-committed transaction and commits if fn returns
// nil.
func (s *Store) inTx(ctx context.Context, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		return classify(err)
	}
	if err := fn(tx); err != nil {
		// Roll back even if ctx is done, so the connection stays usable,
		// but never wait long for a server that has gone away.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		tx.Rollback(rctx)
		return err
	}
	return classify(tx.Commit(ctx))
}
