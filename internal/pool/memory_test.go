package pool

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// heapAfterGC is the live heap after a collection.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestMemoryOfATenantsShare measures what a pool holds at one tenant's
// default share of the budgets (25,000 resource units, 125,000 cells) in
// the shapes that cost the most per unit: resources with the longest id
// and 64 labels of 512 B (33 units each), small resources (1 unit), and
// cells each in a context of its own with the longest name. The figures
// are docs/server.md's worst case of one tenant; the bounds fail the test
// if a change makes a unit cost much more.
func TestMemoryOfATenantsShare(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MB")
	}
	const units, cells = 25_000, 125_000
	for _, tt := range []struct {
		name  string
		fill  func(p *Pool)
		bound uint64 // bytes
	}{
		{"757 resources of 33 units (256-byte id, 64 labels of 512 B)", func(p *Pool) {
			for i := range units / 33 {
				id := fmt.Sprintf("%06d-", i) + strings.Repeat("x", MaxIDLen-7)
				labels := make(map[string]string, MaxLabels)
				for j := range MaxLabels {
					k := fmt.Sprintf("%06d-%03d-", i, j)
					labels[k+strings.Repeat("k", MaxIDLen-len(k))] = strings.Clone(strings.Repeat("v", MaxIDLen))
				}
				if _, _, err := p.Register([]Spec{{ID: id, Labels: labels}}); err != nil {
					t.Fatal(err)
				}
			}
		}, 64 << 20},
		{"25,000 resources of 1 unit", func(p *Pool) {
			for i := range units {
				if _, _, err := p.Register([]Spec{{ID: fmt.Sprintf("proxy-%06d", i), Labels: map[string]string{"region": "eu-west", "kind": "dc"}}}); err != nil {
					t.Fatal(err)
				}
			}
		}, 32 << 20},
		{"125,000 cells, each in its own context of 256 bytes", func(p *Pool) {
			for i := range 5 {
				if _, _, err := p.Register([]Spec{{ID: fmt.Sprint("r", i)}}); err != nil {
					t.Fatal(err)
				}
			}
			for c := range cells / 5 {
				ctx := fmt.Sprintf("%06d-", c) + strings.Repeat("c", MaxIDLen-7)
				for i := range 5 {
					if _, err := p.Report(Report{Resource: fmt.Sprint("r", i), Context: ctx, Outcome: Success}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}, 256 << 20},
		{"62,500 affinity bindings (125,000 cells), each with a 256-byte key in its own 256-byte context", func(p *Pool) {
			for i := range 100 {
				if _, _, err := p.Register([]Spec{{ID: fmt.Sprint("r", i), Capacity: 1 << 20}}); err != nil {
					t.Fatal(err)
				}
			}
			for b := range cells / BindingCells {
				ctx := fmt.Sprintf("%06d-", b) + strings.Repeat("c", MaxIDLen-7)
				key := fmt.Sprintf("%06d-", b) + strings.Repeat("k", MaxIDLen-7)
				l, err := p.AcquireAffine(ctx, time.Hour, nil, nil, Affinity{Key: key})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Release(l.ID, l.Token, 0); err != nil {
					t.Fatal(err)
				}
			}
		}, 256 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := heapAfterGC()
			p, _ := newTestPool(t, Config{})
			tt.fill(p)
			held := heapAfterGC() - before
			runtime.KeepAlive(p)
			t.Logf("%s: %.1f MiB held", tt.name, float64(held)/(1<<20))
			if held > tt.bound {
				t.Errorf("%s holds %d MiB, want at most %d MiB", tt.name, held>>20, tt.bound>>20)
			}
		})
	}
}
