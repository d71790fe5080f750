package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/repool/repool/internal/store"
)

// precious is a file outside the store that a symbolic link in the
// store's directory points to: the store must neither open nor change it.
func precious(t *testing.T) (path string, content []byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "precious")
	content = []byte("someone else's file; a store must never truncate it\n")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content
}

func checkUntouched(t *testing.T, path string, content []byte) {
	t.Helper()
	if got, err := os.ReadFile(path); err != nil || string(got) != string(content) {
		t.Fatalf("the link's target %s = got %q, %v, want it unchanged (%q)", path, got, err, content)
	}
}

func wantLinkRefused(t *testing.T, what string, err error, link string) {
	t.Helper()
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), link) {
		t.Fatalf("%s = got error %v, want ErrInvalid naming %s as a symbolic link", what, err, link)
	}
}

// TestStoreFilesAreNotFollowed: a store file that is a symbolic link (the
// database, SQLite's -wal, the lease log, the lock file, the epoch mark) is
// refused at Open, naming it, and the file it points to is untouched.
func TestStoreFilesAreNotFollowed(t *testing.T) {
	for _, suffix := range []string{"", "-wal", leaseLogSuffix, ".lock", epochMarkSuffix} {
		t.Run("repool.db"+suffix, func(t *testing.T) {
			target, content := precious(t)
			path := filepath.Join(t.TempDir(), "repool.db")
			if err := os.Symlink(target, path+suffix); err != nil {
				t.Fatal(err)
			}
			s, err := Open(t.Context(), path, store.Options{})
			if err == nil {
				s.Close()
			}
			checkUntouched(t, target, content)
			wantLinkRefused(t, "Open with "+suffix+" a symbolic link", err, path+suffix)
		})
	}
}

// TestClaimDoesNotFollowLinks: a lease log or lock file that became a
// symbolic link after Open (so prepareFile's check did not see it) is
// still refused when the claim opens it (O_NOFOLLOW), and its target is
// neither read as a log nor truncated.
func TestClaimDoesNotFollowLinks(t *testing.T) {
	for _, suffix := range []string{leaseLogSuffix, ".lock"} {
		t.Run("repool.db"+suffix, func(t *testing.T) {
			target, content := precious(t)
			path := filepath.Join(t.TempDir(), "repool.db")
			s := openTest(t, path, store.Options{})
			os.Remove(path + suffix)
			if err := os.Symlink(target, path+suffix); err != nil {
				t.Fatal(err)
			}
			c, err := s.LockWriter(t.Context())
			if err == nil {
				c.Release()
			}
			checkUntouched(t, target, content)
			wantLinkRefused(t, "LockWriter with "+suffix+" a symbolic link", err, path+suffix)
		})
	}
}

// TestReadOnlyDoesNotFollowLinks: a read-only open (server admin-token)
// refuses a database that is a symbolic link, and a read-only store does
// not read a lease log through one.
func TestReadOnlyDoesNotFollowLinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.db")
	s := openTest(t, real, store.Options{})
	if _, err := s.CreateTenant(t.Context(), store.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(t.Context(), link, store.Options{ReadOnly: true})
	if err == nil {
		ro.Close()
	}
	wantLinkRefused(t, "read-only Open of a symbolic link", err, link)

	target, content := precious(t)
	if err := os.Symlink(target, real+leaseLogSuffix); err != nil {
		t.Fatal(err)
	}
	ro, err = Open(t.Context(), real, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	_, err = ro.LoadLeases(t.Context(), "a")
	checkUntouched(t, target, content)
	wantLinkRefused(t, "read-only LoadLeases with the lease log a symbolic link", err, real+leaseLogSuffix)
}
