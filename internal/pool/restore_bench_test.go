package pool

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkRestore restores a snapshot of 100,000 resources with two
// context cells each and 1,000 leases into a new pool, as a group's
// active server does when a tenant of that size is moved to it: this is
// the target's share of the move window, beside reading the rows.
func BenchmarkRestore(b *testing.B) {
	src, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 100_000
	specs := make([]Spec, n)
	for i := range specs {
		specs[i] = Spec{ID: fmt.Sprintf("r%06d", i), Capacity: 2}
	}
	if _, _, err := src.Register(specs); err != nil {
		b.Fatal(err)
	}
	for i := range specs {
		for _, c := range []string{"search", "order"} {
			if _, err := src.Report(Report{Resource: specs[i].ID, Context: c, Outcome: Outcome(1 + i%2)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	for range 1000 {
		if _, err := src.Acquire("search", time.Hour, nil); err != nil {
			b.Fatal(err)
		}
	}
	// In the order a store reads them back (by id; cells by resource and
	// context), as a move's restore gets them.
	snap := src.Snapshot()
	slices.SortFunc(snap.Resources, func(a, b ResourceState) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(snap.Cells, func(a, b CellState) int {
		return cmp.Or(strings.Compare(a.Resource, b.Resource), strings.Compare(a.Context, b.Context))
	})
	b.ResetTimer()
	for b.Loop() {
		p, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Restore(snap); err != nil {
			b.Fatal(err)
		}
	}
}
