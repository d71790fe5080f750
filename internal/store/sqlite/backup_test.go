package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/repool/repool/internal/store"
)

// TestBackupMeetsAFold: a fold of the lease log (a compaction) between
// the copy of the database and the read of the log moves leases out of
// the log into a table the copy no longer sees; Backup finds the live
// table changed, takes the copy again, and the copy holds every lease.
func TestBackupMeetsAFold(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "repool.db")
	s, err := Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	claim, err := s.LockWriter(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer claim.Release()
	exp := time.Now().Add(time.Hour).UnixNano()
	lease := func(id uint64) store.LeaseRow {
		return store.LeaseRow{ID: id, ResourceID: "r", Context: "c", Token: 100 + id, ExpiresAt: exp}
	}
	if err := s.WriteLeases(t.Context(), "t1", []store.LeaseRow{lease(1), lease(2)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PruneLeases(t.Context(), 0); err != nil { // 1 and 2 into the table
		t.Fatal(err)
	}
	if err := s.WriteLeases(t.Context(), "t1", []store.LeaseRow{lease(3)}, []uint64{1}); err != nil { // in the log
		t.Fatal(err)
	}
	target := filepath.Join(dir, "backup.db")
	info, err := backup(t.Context(), path, target, func(attempt int) {
		if attempt > 1 {
			return
		}
		// After the first copy: a new lease, a release of a folded one,
		// and a fold that empties the log into the table.
		if err := s.WriteLeases(t.Context(), "t1", []store.LeaseRow{lease(4)}, []uint64{2}); err != nil {
			t.Error(err)
		}
		if err := s.PruneLeases(t.Context(), 0); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatalf("backup = got error %v, want nil", err)
	}
	if info.Attempts != 2 {
		t.Errorf("backup attempts = got %d, want 2 (the fold met the first copy)", info.Attempts)
	}
	cp, err := Open(t.Context(), target, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	got, err := cp.LoadLeases(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.LoadLeases(t.Context(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || len(want) != 2 {
		t.Errorf("the copy's leases = got %+v, want the live store's %+v (leases 3 and 4)", got, want)
	}
	if info.Leases != 2 {
		t.Errorf("BackupInfo.Leases = got %d, want 2", info.Leases)
	}
}

// TestBackupRefusesAndChangesNothing: a target that exists (or a -wal,
// -shm or -leases file beside it), a missing directory and an in-memory
// store are refused before anything is written.
func TestBackupRefusesAndChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", "repool.db")
	s, err := Open(t.Context(), path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, suffix := range []string{"", "-wal", "-shm", "-leases"} {
		target := filepath.Join(dir, "b"+suffix+".db")
		if err := os.WriteFile(target+suffix, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Backup(t.Context(), path, target)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Backup to %s with %s%s present = got %v, want ErrInvalid", target, target, suffix, err)
		}
		if b, _ := os.ReadFile(target + suffix); string(b) != "x" {
			t.Errorf("%s%s after the refused backup = got %q, want it unchanged", target, suffix, b)
		}
	}
	if _, err := Backup(t.Context(), path, filepath.Join(dir, "nope", "b.db")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Backup into a missing directory = got %v, want ErrInvalid", err)
	}
	if _, err := Backup(t.Context(), Memory, filepath.Join(dir, "m.db")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Backup of %s = got %v, want ErrInvalid", Memory, err)
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 5 { // data and the four files the test made
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		t.Errorf("the directory after the refused backups = got %v, want data and the test's four files", names)
	}
}
