package pool

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
)

const (
	benchResources = 100_000
	benchContexts  = 5
)

var benchContextNames = [benchContexts]string{"product-list", "product-page", "search", "order", "login"}

// benchPool builds a pool of 100,000 resources × 5 contexts with every cell
// holding random statistics, and leases 20% of the capacity. Restore builds
// every context's leader board from the cells it restores.
func benchPool(tb testing.TB) (*Pool, []Lease) {
	tb.Helper()
	p, err := New(Config{Clock: clock.Real{}, Rand: rand.NewPCG(1, 2)})
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Now()
	snap := Snapshot{Resources: make([]ResourceState, benchResources), Cells: make([]CellState, 0, benchResources*benchContexts)}
	for i := range snap.Resources {
		id := fmt.Sprintf("proxy-%06d", i)
		snap.Resources[i] = ResourceState{ID: id, Capacity: 1, Aggregate: Stats{Alpha: rng.Float64() * 100, Beta: rng.Float64() * 50, UpdatedAt: now}}
		for _, c := range benchContextNames {
			snap.Cells = append(snap.Cells, CellState{Resource: id, Context: c, Stats: Stats{Alpha: rng.Float64() * 30, Beta: rng.Float64() * 10, UpdatedAt: now}})
		}
	}
	if err := p.Restore(snap); err != nil {
		tb.Fatal(err)
	}
	leases := make([]Lease, 0, benchResources/5)
	for len(leases) < benchResources/5 {
		l, err := p.Acquire(benchContextNames[len(leases)%benchContexts], time.Hour, nil)
		if err != nil {
			tb.Fatal(err)
		}
		leases = append(leases, l)
	}
	return p, leases
}

// BenchmarkAcquire100k measures Acquire alone: acquires are timed in
// batches of 1,000, and the batch's leases are released with the timer
// stopped, so that 20–21% of the capacity stays leased.
func BenchmarkAcquire100k(b *testing.B) {
	p, _ := benchPool(b)
	const batch = 1000
	held := make([]Lease, 0, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := p.Acquire(benchContextNames[i%benchContexts], time.Hour, nil)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, l)
		if len(held) == batch {
			b.StopTimer()
			for _, l := range held {
				if _, err := p.Release(l.ID, l.Token, 0); err != nil {
					b.Fatal(err)
				}
			}
			held = held[:0]
			b.StartTimer()
		}
	}
}

// BenchmarkAcquireRelease100k measures one Acquire plus the Release of the
// oldest outstanding lease: a full lease cycle with 20% of the capacity
// leased.
func BenchmarkAcquireRelease100k(b *testing.B) {
	p, leases := benchPool(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		l, err := p.Acquire(benchContextNames[i%benchContexts], time.Hour, nil)
		if err != nil {
			b.Fatal(err)
		}
		old := leases[i%len(leases)]
		if _, err := p.Release(old.ID, old.Token, 0); err != nil {
			b.Fatal(err)
		}
		leases[i%len(leases)] = l
	}
}

// BenchmarkReport100k measures Report on existing cells.
func BenchmarkReport100k(b *testing.B) {
	p, _ := benchPool(b)
	ids := make([]string, benchResources)
	for i := range ids {
		ids[i] = fmt.Sprintf("proxy-%06d", i)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		o := Success
		if rng.IntN(4) == 0 {
			o = Failure
		}
		if _, err := p.Report(Report{Resource: ids[rng.IntN(len(ids))], Context: benchContextNames[i%benchContexts], Outcome: o}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireRelease100kParallel runs Acquire+Release from GOMAXPROCS
// goroutines on one pool.
func BenchmarkAcquireRelease100kParallel(b *testing.B) {
	p, _ := benchPool(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l, err := p.Acquire(benchContextNames[i%benchContexts], time.Hour, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Release(l.ID, l.Token, 0); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkReport100kParallel runs Report from GOMAXPROCS goroutines.
func BenchmarkReport100kParallel(b *testing.B) {
	p, _ := benchPool(b)
	ids := make([]string, benchResources)
	for i := range ids {
		ids[i] = fmt.Sprintf("proxy-%06d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 7))
		i := 0
		for pb.Next() {
			if _, err := p.Report(Report{Resource: ids[rng.IntN(len(ids))], Context: benchContextNames[i%benchContexts], Outcome: Success}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkHasCellParallel measures the presence check that admission
// control runs on the hot path, on uniformly random resources, from
// GOMAXPROCS goroutines.
func BenchmarkHasCellParallel(b *testing.B) {
	p, _ := benchPool(b)
	ids := make([]string, benchResources)
	for i := range ids {
		ids[i] = fmt.Sprintf("proxy-%06d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 8))
		i := 0
		for pb.Next() {
			if !p.HasCell(ids[rng.IntN(len(ids))], benchContextNames[i%benchContexts]) {
				b.Fatal("HasCell = false, want true")
			}
			i++
		}
	})
}

// BenchmarkMemory100k reports the heap held per resource and per cell: a
// pool of 100,000 resources with no cells, then the same with 5 cells each.
func BenchmarkMemory100k(b *testing.B) {
	for b.Loop() {
		heap := func() uint64 {
			runtime.GC()
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapAlloc
		}
		ids := make([]string, benchResources)
		specs := make([]Spec, benchResources)
		for i := range ids {
			ids[i] = fmt.Sprintf("proxy-%06d", i)
			specs[i] = Spec{ID: ids[i]}
		}
		base := heap()
		p, err := New(Config{EventHistory: 1})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.Register(specs); err != nil {
			b.Fatal(err)
		}
		withResources := heap()
		for _, id := range ids {
			for _, c := range benchContextNames {
				if _, err := p.Report(Report{Resource: id, Context: c, Outcome: Success}); err != nil {
					b.Fatal(err)
				}
			}
		}
		p.TakeChanges()
		withCells := heap()
		b.ReportMetric(float64(withResources-base)/benchResources, "B/resource")
		b.ReportMetric(float64(withCells-withResources)/(benchResources*benchContexts), "B/cell")
		runtime.KeepAlive(p)
		runtime.KeepAlive(ids)
	}
}
