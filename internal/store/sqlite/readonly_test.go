package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/storetest"
)

func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repool.db")
	storetest.ReadOnly(t, func(t *testing.T, readOnly bool) store.Store {
		return openTest(t, path, store.Options{ReadOnly: readOnly})
	})
}

// TestReadOnlyCreatesNothing: a read-only open of a missing file, of a
// file without repool's schema or of the in-memory database fails with its
// reason and leaves no file or table behind.
func TestReadOnlyCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{name: "missing file", path: filepath.Join(dir, "missing.db"), wantErr: store.ErrNotFound},
		{name: "no schema", path: empty, wantErr: store.ErrNotFound},
		{name: "memory", path: Memory, wantErr: store.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.Context(), tc.path, store.Options{ReadOnly: true})
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Open(ctx, %q, ReadOnly) = got error %v, want %v", tc.path, err, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after a read-only Open of a missing file, stat = got %v, want the file still missing", err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Errorf("after a read-only Open of an empty file, stat = got %v, %v, want it still empty", fi, err)
	}
}
