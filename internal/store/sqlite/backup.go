package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/repool/repool/internal/store"
)

// backupAttempts bounds how many times Backup takes its copy again when a
// fold of the lease log moved rows into the table while it was taken (a
// compaction, every --checkpoint-interval; a copy takes a second or two).
const backupAttempts = 5

// BackupInfo is what a backup holds.
type BackupInfo struct {
	// Tenants, Resources and Leases count the copy's tenants (deleted
	// ones' tombstones left out), resources and journaled leases (the
	// lease log's records folded in; expired ones included, as a
	// restore drops them).
	Tenants, Resources, Leases int
	// LogRecords is how many lease-log records were folded into the
	// copy's lease_journal table.
	LogRecords int
	// Bytes is the copy's size; Attempts how many copies were taken
	// (more than one when a fold of the log met the first).
	Bytes    int64
	Attempts int
}

// Backup writes a consistent copy of the SQLite store at path to target
// while a server may be serving it, and returns what the copy holds.
//
// The database is copied by SQLite itself (VACUUM INTO, on a read-only
// connection: one read transaction, so one snapshot of every table,
// whatever the server commits meanwhile). The leases journaled since the
// last fold live in the lease log beside the database, not in it: Backup
// reads the log after the snapshot and folds its records into the copy's
// lease_journal table, so the copy is one self-contained file. A fold by
// the server between the snapshot and the read of the log would move
// records from the log into the table after the snapshot; Backup then
// finds the live table no longer the copy's and takes the copy again. So
// the copy holds the tenants, keys, limits, resources and statistics
// committed at the snapshot (statistics: up to the server's last
// checkpoint flush before it), and every lease journaled up to the read of
// the log, a moment later (a lease on a resource registered in between is
// dropped at restore, as the resource is not in the copy).
//
// target must not exist, nor its -wal, -shm or -leases files (a server
// would read them with it); the copy is written to a new file in target's
// directory, mode 0600, synced, and linked to target only once whole. An
// error changes nothing: no target is made.
func Backup(ctx context.Context, path, target string) (BackupInfo, error) {
	return backup(ctx, path, target, nil)
}

// backup is Backup; afterCopy, if not nil, runs after each copy of the
// database and before the lease log is read (tests fold the log there).
func backup(ctx context.Context, path, target string, afterCopy func(attempt int)) (BackupInfo, error) {
	if err := CheckPath(path); err != nil {
		return BackupInfo{}, err
	}
	if path == Memory {
		return BackupInfo{}, fmt.Errorf("%w: a %s store lives in its server's process and cannot be backed up from another", store.ErrInvalid, Memory)
	}
	if err := checkBackupTarget(target); err != nil {
		return BackupInfo{}, err
	}
	src, err := openReadOnly(ctx, path, fmt.Sprintf("_pragma=busy_timeout(%d)", busyTimeout.Milliseconds()), store.Options{})
	if err != nil {
		return BackupInfo{}, err
	}
	defer src.Close()
	// VACUUM INTO writes only its target, but query_only, which the
	// read-only store's connections set, refuses it: one connection of
	// its own, read-only by its mode.
	abs, err := filepath.Abs(path)
	if err != nil {
		return BackupInfo{}, err
	}
	snap, err := sql.Open("sqlite", "file:"+(&url.URL{Path: abs}).EscapedPath()+fmt.Sprintf("?mode=ro&_pragma=busy_timeout(%d)", busyTimeout.Milliseconds()))
	if err != nil {
		return BackupInfo{}, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	defer snap.Close()
	snap.SetMaxOpenConns(1)
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".partial-*")
	if err != nil {
		return BackupInfo{}, fmt.Errorf("%w: backup: cannot write in %s: %v", store.ErrInvalid, filepath.Dir(target), errors.Unwrap(err))
	}
	tmpPath := tmp.Name()
	tmp.Close()
	done := false
	defer func() {
		if !done {
			os.Remove(tmpPath)
		}
	}()
	var info BackupInfo
	for info.Attempts = 1; ; info.Attempts++ {
		ok, err := copyOnce(ctx, src.r, snap, src.logPath, tmpPath, &info, afterCopy)
		if err != nil {
			return BackupInfo{}, err
		}
		if ok {
			break
		}
		if info.Attempts == backupAttempts {
			return BackupInfo{}, fmt.Errorf("%w: backup: the server folded its lease log during each of %d copies; try again", store.ErrUnavailable, backupAttempts)
		}
	}
	if err := syncFile(tmpPath); err != nil {
		return BackupInfo{}, err
	}
	// A link, unlike a rename, never replaces a target made meanwhile.
	if err := os.Link(tmpPath, target); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return BackupInfo{}, fmt.Errorf("%w: backup: %s was made while the backup ran; nothing was written over it", store.ErrInvalid, target)
		}
		return BackupInfo{}, fmt.Errorf("%w: backup: %v", store.ErrUnavailable, err)
	}
	done = true
	os.Remove(tmpPath)
	if err := syncDir(filepath.Dir(target)); err != nil {
		return BackupInfo{}, err
	}
	fi, err := os.Stat(target)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("%w: backup: %v", store.ErrUnavailable, err)
	}
	info.Bytes = fi.Size()
	return info, nil
}

// checkBackupTarget refuses a target that exists, or beside which a -wal,
// -shm or -leases file exists, or whose directory does not.
func checkBackupTarget(target string) error {
	if err := CheckPath(target); err != nil || target == Memory {
		return fmt.Errorf("%w: backup: target %q: want a file name without '?'", store.ErrInvalid, target)
	}
	for _, p := range []string{target, target + "-wal", target + "-shm", target + leaseLogSuffix} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%w: backup: %s exists; a backup never writes over a file: name a new one", store.ErrInvalid, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: backup: %v", store.ErrInvalid, err)
		}
	}
	dir := filepath.Dir(target)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: backup: the directory %s of %s does not exist; make it first", store.ErrInvalid, dir, target)
	}
	return nil
}

// copyOnce copies the database into tmp (which it empties first) and folds
// the lease log at logPath into the copy: snap takes the copy, r reads the
// live table. It returns false, with nothing wrong, when the server folded
// the log during the copy and it must be taken again.
func copyOnce(ctx context.Context, r, snap *sql.DB, logPath, tmp string, info *BackupInfo, afterCopy func(int)) (bool, error) {
	if err := os.Truncate(tmp, 0); err != nil {
		return false, fmt.Errorf("%w: backup: %v", store.ErrUnavailable, err)
	}
	if _, err := snap.ExecContext(ctx, `VACUUM INTO ?`, tmp); err != nil {
		return false, fmt.Errorf("backup: copying the database: %w", classify(err))
	}
	if afterCopy != nil {
		afterCopy(info.Attempts)
	}
	recs, err := readLeaseLog(logPath)
	if err != nil {
		return false, fmt.Errorf("backup: %w", err)
	}
	live, err := journalRows(ctx, r)
	if err != nil {
		return false, fmt.Errorf("backup: reading the lease journal: %w", err)
	}
	abs, err := filepath.Abs(tmp)
	if err != nil {
		return false, err
	}
	cp, err := sql.Open("sqlite", "file:"+(&url.URL{Path: abs}).EscapedPath()+"?_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		return false, fmt.Errorf("backup: opening the copy: %w", err)
	}
	defer cp.Close()
	cp.SetMaxOpenConns(1)
	copied, err := journalRows(ctx, cp)
	if err != nil {
		return false, fmt.Errorf("backup: reading the copy's lease journal: %w", err)
	}
	// Folds only ever change the table (new leases, later expiries,
	// removals): if it is what the snapshot holds, none ran since.
	if !slices.Equal(live, copied) {
		return false, nil
	}
	tx, err := cp.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("backup: %w", classify(err))
	}
	defer tx.Rollback()
	for _, r := range recs {
		for _, id := range r.del {
			if _, err := tx.ExecContext(ctx, leaseDeleteSQL(1), r.tenant, int64(id)); err != nil {
				return false, fmt.Errorf("backup: folding the lease log into the copy: %w", classify(err))
			}
		}
		for _, l := range r.put {
			if _, err := tx.ExecContext(ctx, leaseUpsertSQL(1), r.tenant, int64(l.ID), l.ResourceID, l.Context, int64(l.Token), l.ExpiresAt); err != nil {
				return false, fmt.Errorf("backup: folding the lease log into the copy: %w", classify(err))
			}
		}
	}
	for _, q := range []struct {
		n     *int
		query string
	}{
		{&info.Tenants, `SELECT count(*) FROM tenants WHERE status <> 'deleted'`},
		{&info.Resources, `SELECT count(*) FROM resources`},
		{&info.Leases, `SELECT count(*) FROM lease_journal`},
	} {
		if err := tx.QueryRowContext(ctx, q.query).Scan(q.n); err != nil {
			return false, fmt.Errorf("backup: counting the copy's rows: %w", classify(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("backup: %w", classify(err))
	}
	var check string
	if err := cp.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil || check != "ok" {
		return false, fmt.Errorf("%w: backup: the copy does not pass SQLite's check (%q, %v)", store.ErrCorrupt, check, err)
	}
	info.LogRecords = len(recs)
	return true, nil
}

// journalRow is one row of lease_journal, compared whole.
type journalRow struct {
	tenant, resource, context string
	id, token, expires        int64
}

// journalRows reads the whole lease_journal table in key order.
func journalRows(ctx context.Context, db *sql.DB) ([]journalRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT pool_id, lease_id, resource_id, context, token, expires_at FROM lease_journal ORDER BY pool_id, lease_id`)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []journalRow
	for rows.Next() {
		var r journalRow
		if err := rows.Scan(&r.tenant, &r.id, &r.resource, &r.context, &r.token, &r.expires); err != nil {
			return nil, classify(err)
		}
		out = append(out, r)
	}
	return out, classify(rows.Err())
}

// syncFile fsyncs the file at path.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: backup: %v", store.ErrUnavailable, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%w: backup: syncing %s: %v", store.ErrUnavailable, path, err)
	}
	return nil
}

// syncDir fsyncs the directory dir, so that a name made in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: backup: %v", store.ErrUnavailable, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w: backup: syncing %s: %v", store.ErrUnavailable, dir, err)
	}
	return nil
}
