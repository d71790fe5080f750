package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/repool/repool/internal/store"
)

// BenchmarkWriteLeases measures one lease journal commit as the journal
// makes it under load: 32 leases granted and 32 ended in one transaction.
func BenchmarkWriteLeases(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "repool.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateTenant(b.Context(), store.Tenant{ID: "demo", Name: "demo"}); err != nil {
		b.Fatal(err)
	}
	const n = 32
	var id uint64
	put := make([]store.LeaseRow, n)
	del := make([]uint64, 0, n)
	for b.Loop() {
		del = del[:0]
		for i := range put {
			if id >= n {
				del = append(del, id-n)
			}
			put[i] = store.LeaseRow{ID: id, ResourceID: "proxy-0001", Context: "search", Token: id, ExpiresAt: 1 << 60}
			id++
		}
		if err := s.WriteLeases(b.Context(), "demo", put, del); err != nil {
			b.Fatal(err)
		}
	}
}
