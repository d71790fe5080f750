// Package sqlite implements store.Store on an embedded SQLite database
// (modernc.org/sqlite: pure Go, no cgo, no server to run).
//
// The database runs in WAL mode with foreign keys on and a busy timeout.
// All writes go through a single connection, so writers in this process
// never see SQLITE_BUSY; reads use a separate pool of read-only connections
// and see consistent snapshots. ":memory:" gives a private in-memory
// database on one connection, meant for tests: it vanishes on Close.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pressly/goose/v3"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/sqlstore"
)

// Memory is the path that opens a private in-memory database.
const Memory = ":memory:"

// busyTimeout bounds how long a connection waits for a lock held by another
// process sharing the file (for example a CLI reading the signing key).
const busyTimeout = 5 * time.Second

//go:embed migrations/*.sql
var migrations embed.FS

// Store is the SQLite store. It is safe for concurrent use. Close it when
// done.
type Store struct {
	*sqlstore.Store // tenants, keys, limits, audit, signing key, epoch

	w    *sql.DB // exactly one connection: every write
	r    *sql.DB // read-only connections (== w for Memory)
	opts store.Options

	path   string        // the database file; "" for Memory
	fileID fileID        // the database file opened, to tell it was replaced
	fence  atomic.Uint32 // epoch this server's writes must still hold; 0: unfenced

	// log is the lease log of a file store whose writer claim is held
	// (nil before LockWriter, after the claim's Release, for Memory and
	// read-only stores); logPath names the log a read-only store reads.
	log     atomic.Pointer[leaseLog]
	logPath string

	// Prepared once on the writer connection: the fence's epoch query and
	// the lease journal's statements.
	epochQuery, leaseDel1, leaseDelN, leaseUpsert1, leaseUpsertN *sql.Stmt
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path, or a private
// in-memory one for Memory, and applies the embedded migrations; with
// store.Options ReadOnly it opens an existing file read-only instead (a
// missing file or schema is store.ErrNotFound). A path containing '?' is
// rejected with store.ErrInvalid; a database that cannot be opened returns
// store.ErrUnavailable.
func Open(ctx context.Context, path string, opts store.Options) (*Store, error) {
	if err := CheckPath(path); err != nil {
		return nil, err
	}
	if opts.GroupName() != store.DefaultGroup {
		return nil, fmt.Errorf("%w: sqlite: group %q: tenant-sharded groups need a PostgreSQL store shared by their servers", store.ErrInvalid, opts.Group)
	}
	pragmas := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busyTimeout.Milliseconds())
	if opts.ReadOnly {
		return openReadOnly(ctx, path, pragmas, opts)
	}
	s := &Store{opts: opts}
	var err error
	if path == Memory {
		s.w, err = sql.Open("sqlite", Memory+"?"+pragmas+"&_txlock=immediate")
		if err != nil {
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		s.r = s.w
	} else {
		if err := prepareFile(path, opts.SharedFiles); err != nil {
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		if s.fileID, err = statID(path); err != nil {
			return nil, fmt.Errorf("sqlite: open %s: %w: %v", path, store.ErrUnavailable, err)
		}
		s.path = path
		// In WAL mode, synchronous NORMAL makes a commit durable against a
		// crash of the process; FULL also against a power loss.
		sync := "NORMAL"
		if opts.Fsync {
			sync = "FULL"
		}
		s.w, err = sql.Open("sqlite", path+"?"+pragmas+"&_pragma=journal_mode(WAL)&_pragma=synchronous("+sync+")&_txlock=immediate")
		if err != nil {
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		s.r, err = sql.Open("sqlite", path+"?"+pragmas+"&_pragma=query_only(1)")
		if err != nil {
			s.w.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		s.r.SetMaxOpenConns(max(4, runtime.GOMAXPROCS(0)))
	}
	// One writer connection that is never recycled: writes are serialized
	// here instead of failing with SQLITE_BUSY, and an in-memory database
	// lives exactly as long as this connection.
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	s.Store = s.newSQL()

	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := s.prepareLeases(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if s.path != "" {
		// The file the migrations just opened is the one prepareFile
		// checked (a regular file, not a link), and the one whose
		// replacement under a running server the claim's Check sees.
		id, err := statID(path)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w: %v", path, store.ErrUnavailable, err)
		}
		if id != s.fileID {
			s.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w: the database file was replaced while it was opened", path, store.ErrUnavailable)
		}
	}
	return s, nil
}

// CheckPath returns store.ErrInvalid unless path is a database file name
// that Open takes (not empty, no '?': it would start the URI's parameters)
// or Memory.
func CheckPath(path string) error {
	if path == "" || strings.ContainsRune(path, '?') {
		return fmt.Errorf("%w: sqlite path %q: want a file name without '?' or %q", store.ErrInvalid, path, Memory)
	}
	return nil
}

// openReadOnly opens the existing database at path for store.Options
// ReadOnly: as a SQLite URI with mode=ro, which never creates the file, on
// read-only connections (beside a running server's, which WAL mode allows),
// without migrations. The one check is that repool's tables are there.
func openReadOnly(ctx context.Context, path, pragmas string, opts store.Options) (*Store, error) {
	if path == Memory {
		return nil, fmt.Errorf("%w: sqlite: a read-only %s database would be empty", store.ErrInvalid, Memory)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	fi, err := os.Lstat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sqlite: open %s: %w: no such file; a server creates it on its first start", path, store.ErrNotFound)
	}
	if err == nil {
		err = checkRegular(abs, fi)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	uri := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?mode=ro&" + pragmas + "&_pragma=query_only(1)"
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(max(4, runtime.GOMAXPROCS(0)))
	s := &Store{w: db, r: db, opts: opts, logPath: abs + leaseLogSuffix}
	s.Store = s.newSQL()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM server_secrets`).Scan(&n); err != nil {
		db.Close()
		if strings.Contains(err.Error(), "no such table") {
			return nil, fmt.Errorf("sqlite: open %s: %w: no repool store in it (no schema); a server creates it on its first start", path, store.ErrNotFound)
		}
		return nil, fmt.Errorf("sqlite: open %s: %w", path, classify(err))
	}
	return s, nil
}

// migrate applies the embedded migrations on the writer connection.
func (s *Store) migrate(ctx context.Context) error {
	return dialect.Migrate(ctx, s.w, goose.DialectSQLite3, migrations)
}

// Close closes the database handles and releases the lease log.
func (s *Store) Close() error {
	if l := s.log.Swap(nil); l != nil {
		l.close()
	}
	for _, st := range []*sql.Stmt{s.epochQuery, s.leaseDel1, s.leaseDelN, s.leaseUpsert1, s.leaseUpsertN} {
		if st != nil {
			st.Close()
		}
	}
	err := s.w.Close()
	if s.r != s.w {
		err = errors.Join(err, s.r.Close())
	}
	return err
}

// classify wraps errors that mean "the database cannot serve right now" in
// store.ErrUnavailable. Context errors and everything else pass through.
func classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_READONLY,
			sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOLFS, sqlite3.SQLITE_PERM:
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	if errors.Is(err, sql.ErrConnDone) || strings.Contains(err.Error(), "sql: database is closed") {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code()
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits if fn
// returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return classify(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return classify(tx.Commit())
}

// micros stores a time as unix microseconds (0 for the zero time).
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// fromMicros is the inverse of micros; NULL and 0 are the zero time.
func fromMicros(v sql.NullInt64) time.Time {
	if !v.Valid || v.Int64 == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// MoveTenant refuses: tenants move between groups of servers that share a
// PostgreSQL store, and a SQLite store has one server and one group.
func (s *Store) MoveTenant(context.Context, string, string) error {
	return fmt.Errorf("%w: sqlite: moving a tenant to another group needs a PostgreSQL store shared by the groups' servers", store.ErrInvalid)
}
