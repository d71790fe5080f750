package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/repool/repool/internal/store"
)

// Restore makes the backup from (a file Backup wrote) the database of the
// SQLite store at path, which no server may be running on: it takes the
// store's writer claim (the flock on PATH.lock) for its whole run, so a
// server that starts meanwhile waits for it; checks that from is a whole
// repool store; moves the store's database, -wal, -shm and -leases files,
// those that exist, into a new directory beside it, PATH.before-restore-
// TIME, which it returns ("" when there were none); and copies from into place (mode 0600, synced,
// renamed over nothing). The epoch mark (PATH-epoch) stays, so that the
// next start hands out tokens above every one handed out before.
//
// A refusal (a server holds the store, from is not a whole repool store
// or has a -wal or -leases file beside it, which a backup never has)
// changes nothing. A failure after the move leaves the moved files in the
// returned directory and no database at path.
func Restore(ctx context.Context, path, from string) (aside string, err error) {
	if err := CheckPath(path); err != nil || path == Memory {
		return "", fmt.Errorf("%w: restore: store path %q: want a file name without '?'", store.ErrInvalid, path)
	}
	if err := checkBackupFile(ctx, from); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("%w: restore: the store's directory %s: %v", store.ErrInvalid, filepath.Dir(path), errors.Unwrap(err))
	}
	lockPath := path + ".lock"
	lock, err := openNoFollow(lockPath, os.O_RDWR|os.O_CREATE, "lock file")
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return "", heldError(path, lockPath, err)
	}
	// A server holds its lease log locked too, even if its lock file was
	// removed by hand.
	if lf, err := openNoFollow(path+leaseLogSuffix, os.O_RDONLY, "lease log"); err == nil {
		err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		defer lf.Close()
		if err != nil {
			return "", heldError(path, lockPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := lock.Truncate(0); err == nil {
		lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}

	aside = path + ".before-restore-" + time.Now().UTC().Format("20060102T150405Z")
	if err := os.Mkdir(aside, dirMode); err != nil {
		return "", fmt.Errorf("%w: restore: making %s for the store's current files: %v", store.ErrUnavailable, aside, errors.Unwrap(err))
	}
	moved := 0
	for _, p := range []string{path, path + "-wal", path + "-shm", path + leaseLogSuffix} {
		err := os.Rename(p, filepath.Join(aside, filepath.Base(p)))
		switch {
		case err == nil:
			moved++
		case !errors.Is(err, fs.ErrNotExist):
			return aside, fmt.Errorf("%w: restore: moving %s into %s: %v (the files moved so far are there)", store.ErrUnavailable, p, aside, errors.Unwrap(err))
		}
	}
	if moved == 0 { // a new store: nothing to keep
		os.Remove(aside)
		aside = ""
	}
	tmp := path + ".restore-tmp"
	if err := copyInto(from, tmp); err != nil {
		os.Remove(tmp)
		return aside, fmt.Errorf("%w: restore: copying %s: %v (the store's previous files are in %s)", store.ErrUnavailable, from, err, aside)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return aside, fmt.Errorf("%w: restore: %v (the store's previous files are in %s)", store.ErrUnavailable, err, aside)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return aside, err
	}
	return aside, nil
}

// heldError says that a server holds the store at path.
func heldError(path, lockPath string, err error) error {
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("%w: restore: locking %s: %v", store.ErrUnavailable, lockPath, err)
	}
	owner := "a running server"
	if b, rerr := os.ReadFile(lockPath); rerr == nil {
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
			owner = "a running server (process " + strconv.Itoa(pid) + ")"
		}
	}
	return fmt.Errorf("%w: restore: store sqlite:%s is held by %s; stop it first (nothing was changed)", store.ErrLocked, path, owner)
}

// checkBackupFile refuses a from that is not a whole repool store by
// itself: missing, not SQLite, without repool's tables, failing SQLite's
// check, or with a -wal or -leases file beside it (a store's live files,
// not a backup).
func checkBackupFile(ctx context.Context, from string) error {
	for _, p := range []string{from + "-wal", from + leaseLogSuffix} {
		if fi, err := os.Lstat(p); err == nil && fi.Size() > 0 {
			return fmt.Errorf("%w: restore: %s has %s beside it: it is a store's live database, not a file \"server backup\" wrote; back it up first and restore the backup", store.ErrInvalid, from, p)
		}
	}
	if fi, err := os.Stat(from); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: restore: %s: not a file (%v)", store.ErrInvalid, from, err)
	}
	b, err := openReadOnly(ctx, from, fmt.Sprintf("_pragma=busy_timeout(%d)", busyTimeout.Milliseconds()), store.Options{})
	if err != nil {
		return fmt.Errorf("%w: restore: %s is not a repool store: %v", store.ErrInvalid, from, err)
	}
	defer b.Close()
	var check string
	if err := b.r.QueryRowContext(ctx, `PRAGMA quick_check`).Scan(&check); err != nil || check != "ok" {
		return fmt.Errorf("%w: restore: %s does not pass SQLite's check (%q, %v)", store.ErrInvalid, from, check, err)
	}
	return nil
}

// copyInto copies the file from to the new file to, mode 0600, synced.
func copyInto(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}
