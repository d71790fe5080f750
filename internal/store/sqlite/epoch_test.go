package sqlite

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/repool/repool/internal/store"
)

// copyStore copies the database file and SQLite's -wal and -shm beside it
// from one path to another (those that exist; the others are removed at
// the destination), as an operator copying a store back would.
func copyStore(t *testing.T, from, to string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(from + suffix)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.Remove(to + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+suffix, b, fileMode); err != nil {
			t.Fatal(err)
		}
	}
}

func bump(t *testing.T, path string) uint32 {
	t.Helper()
	s, err := Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := s.BumpEpoch(t.Context())
	if err != nil {
		t.Fatalf("BumpEpoch = got error %v, want nil", err)
	}
	return e
}

// TestEpochSurvivesAnOlderCopy: the database copied back from an older
// state (with its older epoch) does not make BumpEpoch hand out an epoch
// that was already handed out: fencing tokens, which carry the epoch in
// their upper bits, never go backwards.
func TestEpochSurvivesAnOlderCopy(t *testing.T) {
	dir := t.TempDir()
	path, backup := filepath.Join(dir, "repool.db"), filepath.Join(t.TempDir(), "backup.db")
	first := bump(t, path)
	copyStore(t, path, backup)
	var last uint32
	for range 3 {
		last = bump(t, path)
	}
	copyStore(t, backup, path)
	if got := bump(t, path); got <= last {
		t.Fatalf("BumpEpoch after the database was copied back from epoch %d = got %d, want above %d, the highest epoch handed out", first, got, last)
	}
	if b, err := os.ReadFile(path + epochMarkSuffix); err != nil || strings.TrimSpace(string(b)) == "" {
		t.Fatalf("epoch mark = got %q, %v, want the last epoch", b, err)
	}
}

// TestEpochMarkDamaged: a mark that is not a number stops BumpEpoch with
// an error naming it, instead of going on from the database's epoch.
func TestEpochMarkDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	bump(t, path)
	if err := os.WriteFile(path+epochMarkSuffix, []byte("7x\n"), fileMode); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, path, store.Options{})
	if _, err := s.BumpEpoch(t.Context()); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path+epochMarkSuffix) {
		t.Fatalf("BumpEpoch with a damaged epoch mark = got %v, want ErrCorrupt naming the mark", err)
	}
}

// TestEpochMarkAhead: a mark written by hand above the database's epoch
// (a store restored on a new host, with the highest epoch known) is where
// the epoch goes on from.
func TestEpochMarkAhead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	bump(t, path)
	if err := os.WriteFile(path+epochMarkSuffix, []byte("1000\n"), fileMode); err != nil {
		t.Fatal(err)
	}
	if got := bump(t, path); got != 1001 {
		t.Fatalf("BumpEpoch with the mark at 1000 = got %d, want 1001", got)
	}
}
