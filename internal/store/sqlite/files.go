package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/repool/repool/internal/store"
)

// The database file holds the token signing key and every tenant's key
// digests, so it is private to the user that runs the server: its
// directory is created mode 0700, the file 0600, and SQLite gives the -wal
// and -shm files the mode of the database file.
const (
	dirMode  = 0o700
	fileMode = 0o600
)

// prepareFile creates the directory and the database file of path, private
// to this user, if they do not exist, and refuses a store file (the
// database, its -wal or -shm file, the lease log, the lock file, the epoch
// mark) that is a symbolic link or not a regular file, or that other users
// may read or write, unless sharedFiles says that is intended. SQLite opens
// the database and its -wal and -shm files itself, following links: the
// check before it does (os.Lstat) is what keeps it off a link, and Open
// checks afterwards that the file it opened is still the one checked.
func prepareFile(path string, sharedFiles bool) error {
	// Only the file's own directory is created (./data for the default
	// store): a missing parent is more likely a typo than a wish.
	if err := os.Mkdir(filepath.Dir(path), dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: creating the store's directory: %v", store.ErrUnavailable, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	if err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: creating the store's file: %v", store.ErrUnavailable, err)
	}
	for _, p := range storeFiles(path) {
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
		}
		if err := checkRegular(p, fi); err != nil {
			return err
		}
		if sharedFiles {
			continue
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			return fmt.Errorf("%w: store file %s has mode %04o, so other local users can read it, and it holds the token signing key and every API key digest: "+
				"run chmod 600 %s*, or, if other users must read it, start with --store-shared-files",
				store.ErrInvalid, p, perm, path)
		}
	}
	return nil
}

// storeFiles are the files of the store at path: the database, SQLite's
// -wal and -shm, the lease log, the claim's lock file and the epoch mark.
func storeFiles(path string) []string {
	return []string{path, path + "-wal", path + "-shm", path + leaseLogSuffix, path + ".lock", path + epochMarkSuffix}
}

// checkRegular refuses a store file that is a symbolic link or not a
// regular file. The store writes, truncates and replaces its files; a
// link would make it do so to the file the link names, anywhere.
func checkRegular(path string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%w: store file %s is a symbolic link; the store opens its files only as regular files, never through a link "+
			"(it truncates and replaces them): replace the link with the file itself, or point --store at the file's real location", store.ErrInvalid, path)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: store file %s is not a regular file", store.ErrUnavailable, path)
	}
	return nil
}

// openNoFollow opens the store file path (what it is, for errors) without
// following a symbolic link in its last element (O_NOFOLLOW), creating it
// mode 0600 with os.O_CREATE.
func openNoFollow(path string, flag int, what string) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fileMode)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%w: the store's %s %s is a symbolic link; the store opens its files only as regular files, never through a link "+
			"(it truncates and replaces them): replace the link with the file itself, or point --store at the file's real location", store.ErrInvalid, what, path)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: opening the store's %s: %v", store.ErrUnavailable, what, err)
	}
	return f, nil
}

// fileID identifies a file across renames: a replaced or recreated file has
// another one.
type fileID struct{ dev, ino uint64 }

// statID is the identity of the file named path itself: a symbolic link
// put in its place has another one.
func statID(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, err
	}
	return sysID(fi), nil
}

func sysID(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}
}

// LockWriter implements store.WriterLock. It takes an exclusive flock on
// PATH.lock (created mode 0600; it holds the owner's process id) and fails
// at once with store.ErrLocked if another process holds it. The claim's
// Check fails once the database file or the lock file is removed or
// replaced, and so does the lease log's: a server that no longer knows which
// file it writes must stop. Taking the claim opens the store's lease log
// (leaseLog), where the lease journal is written while the claim is held.
// An in-memory database is private to its process and always claimed.
func (s *Store) LockWriter(ctx context.Context) (store.Claim, error) {
	if s.path == "" {
		return nopClaim{}, nil
	}
	lockPath := s.path + ".lock"
	f, err := openNoFollow(lockPath, os.O_RDWR|os.O_CREATE, "lock file")
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner := "another process"
		if b, rerr := os.ReadFile(lockPath); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				owner = "process " + strconv.Itoa(pid)
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: store sqlite:%s is held by %s (lock %s); stop that server, or give this one its own --store",
				store.ErrLocked, s.path, owner, lockPath)
		}
		return nil, fmt.Errorf("%w: locking %s: %v", store.ErrUnavailable, lockPath, err)
	}
	fail := func(err error) (store.Claim, error) {
		f.Close() // closing the descriptor drops the flock
		return nil, fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	if err := f.Truncate(0); err != nil {
		return fail(err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return fail(err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	log, err := s.openLog(ctx)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &fileClaim{s: s, log: log, lock: f, files: []claimedFile{
		{s.path, "database file", s.fileID}, {lockPath, "lock file", sysID(fi)}, {log.path, "lease log", log.id},
	}}, nil
}

// fileClaim is a SQLite store's writer claim: the flock on the lock file,
// and the identities of the files it was taken on.
type fileClaim struct {
	s     *Store
	log   *leaseLog
	lock  *os.File
	files []claimedFile
}

type claimedFile struct {
	path, what string
	want       fileID
}

func (c *fileClaim) Check(context.Context) error {
	for _, f := range c.files {
		id, err := statID(f.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("the store's %s %s was removed", f.what, f.path)
		case err != nil:
			return fmt.Errorf("the store's %s %s: %v", f.what, f.path, err)
		case id != f.want:
			return fmt.Errorf("the store's %s %s was replaced by another file", f.what, f.path)
		}
	}
	return nil
}

// Release folds the lease log into the table (what a fold cannot write
// stays in the log, for the next writer to replay), closes it, and drops
// the flock.
func (c *fileClaim) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
	c.log.fold(ctx, c.s, nil)
	cancel()
	c.s.log.CompareAndSwap(c.log, nil)
	c.log.close()
	c.lock.Close()
}

type nopClaim struct{}

func (nopClaim) Check(context.Context) error { return nil }
func (nopClaim) Release()                    {}

var _ store.WriterLock = (*Store)(nil)
