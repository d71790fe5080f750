package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/storetest"
)

func BenchmarkCRUD(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "repool.db"), store.Options{})
	if err != nil {
		b.Fatalf("Open(ctx, repool.db) = got error %v, want nil", err)
	}
	defer s.Close()
	storetest.BenchmarkCRUD(b, s)
}
