package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/storetest"
)

func TestFence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	storetest.Fence(t, openTest(t, path, store.Options{}), openTest(t, path, store.Options{}))
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("Stat(%s) = got error %v, want nil", path, err)
	}
	return fi.Mode().Perm()
}

// TestFilesArePrivate: a new store's directory is 0700 and its database,
// -wal and -shm files 0600, whatever the umask lets through.
func TestFilesArePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, "repool.db")
	s := openTest(t, path, store.Options{})
	if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	claim, err := s.LockWriter(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Release()
	if got := mode(t, dir); got != 0o700 {
		t.Errorf("mode of the store's new directory = got %04o, want 0700", got)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + ".lock", path + leaseLogSuffix} {
		if got := mode(t, p); got != 0o600 {
			t.Errorf("mode of %s = got %04o, want 0600", filepath.Base(p), got)
		}
	}
}

// TestRefusesFilesOthersCanRead: a database file (or its -wal, or its lease
// log) that other
// users may read is refused with a message that names the file and both
// ways out, unless Options.SharedFiles says it is meant.
func TestRefusesFilesOthersCanRead(t *testing.T) {
	for _, suffix := range []string{"", "-wal", leaseLogSuffix} {
		t.Run("file"+suffix, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "repool.db")
			s := openTest(t, path, store.Options{})
			if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: "acme", Name: "Acme"}); err != nil {
				t.Fatal(err)
			}
			claim, err := s.LockWriter(t.Context()) // creates the lease log
			if err != nil {
				t.Fatal(err)
			}
			claim.Release()
			if err := os.Chmod(path+suffix, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = Open(context.Background(), path, store.Options{})
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), path+suffix) ||
				!strings.Contains(err.Error(), "chmod 600") || !strings.Contains(err.Error(), "--store-shared-files") {
				t.Fatalf("Open(file of mode 0644) = got %v, want ErrInvalid naming the file, chmod 600 and --store-shared-files", err)
			}
			shared, err := Open(context.Background(), path, store.Options{SharedFiles: true})
			if err != nil {
				t.Fatalf("Open(file of mode 0644, SharedFiles) = got error %v, want nil", err)
			}
			shared.Close()
		})
	}
}

// TestOneWriter: a second claim on the same file fails at once with
// ErrLocked and names the holder's process; once released, it succeeds.
func TestOneWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	a, b := openTest(t, path, store.Options{}), openTest(t, path, store.Options{})
	ca, err := a.LockWriter(t.Context())
	if err != nil {
		t.Fatalf("LockWriter(first) = got error %v, want nil", err)
	}
	_, err = b.LockWriter(t.Context())
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), path) {
		t.Fatalf("LockWriter(second) = got %v, want ErrLocked naming the store and process %d", err, os.Getpid())
	}
	if err := ca.Check(t.Context()); err != nil {
		t.Fatalf("Check() of a held claim = got %v, want nil", err)
	}
	ca.Release()
	cb, err := b.LockWriter(t.Context())
	if err != nil {
		t.Fatalf("LockWriter(after release) = got error %v, want nil", err)
	}
	cb.Release()
}

// TestClaimLost: the claim fails its check once the database file is
// replaced or removed, or its lock file is removed.
func TestClaimLost(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		do         func(path string) error
	}{
		{"database replaced", "database file", func(p string) error {
			if err := os.WriteFile(p+".new", nil, 0o600); err != nil {
				return err
			}
			return os.Rename(p+".new", p)
		}},
		{"database removed", "removed", func(p string) error { return os.Remove(p) }},
		{"lock removed", "lock file", func(p string) error { return os.Remove(p + ".lock") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "repool.db")
			s := openTest(t, path, store.Options{})
			c, err := s.LockWriter(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Release()
			if err := tc.do(path); err != nil {
				t.Fatal(err)
			}
			if err := c.Check(t.Context()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check() after %s = got %v, want an error naming the %s", tc.name, err, tc.want)
			}
		})
	}
}

// TestFsync: commits sync the log (synchronous FULL) only with
// Options.Fsync; by default (NORMAL) a commit survives a crash of the
// process, which the crash harness in test/crash checks.
func TestFsync(t *testing.T) {
	for _, tc := range []struct {
		fsync bool
		want  int
	}{{false, 1}, {true, 2}} {
		s := openTest(t, filepath.Join(t.TempDir(), "repool.db"), store.Options{Fsync: tc.fsync})
		var got int
		if err := s.w.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("PRAGMA synchronous with Fsync %v = got %d, want %d", tc.fsync, got, tc.want)
		}
	}
}
