package pool

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
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
// every context's leader board from the cells it restores. The pool reads
// the time from a millisecond clock.Coarse, as the server's pools do.
func benchPool(tb testing.TB) (*Pool, []Lease) {
	tb.Helper()
	p, err := New(Config{Clock: clock.NewCoarse(tb.Context(), time.Millisecond), Rand: rand.NewPCG(1, 2)})
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

// settle starts a benchmark's timing after a garbage collection, so that
// collecting the setup's garbage (and an earlier benchmark's pool) does not
// run in the timed loop.
func settle(b *testing.B) {
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
}

// BenchmarkReferenceDependentRead is not pool code: it is the machine's
// memory latency, one dependent random read (a pointer chase over one
// cache line per hop) within a working set of 8 MB and of 32 MB. A pool of
// 100,000 resources spans tens of megabytes, so its Report figures move
// with these; docs/pool.md reports them next to each run, so that a run on
// a VM whose last-level cache others are using can be told from a change
// in the pool.
func BenchmarkReferenceDependentRead(b *testing.B) {
	for _, mb := range []int{8, 32} {
		b.Run(fmt.Sprintf("%dMB", mb), func(b *testing.B) {
			const line = 8 // int64s per 64-byte cache line
			hops := mb << 20 / 64
			next := make([]int64, hops*line)
			order := rand.New(rand.NewPCG(9, 10)).Perm(hops)
			for i, h := range order {
				next[h*line] = int64(order[(i+1)%hops] * line)
			}
			j := int64(0)
			settle(b)
			for b.Loop() {
				j = next[j]
			}
			runtime.KeepAlive(j)
		})
	}
}

// BenchmarkAcquire100k measures Acquire alone: acquires are timed in
// batches of 1,000, and the batch's leases are released with the timer
// stopped, so that 20–21% of the capacity stays leased.
func BenchmarkAcquire100k(b *testing.B) {
	p, _ := benchPool(b)
	const batch = 1000
	held := make([]Lease, 0, batch)
	settle(b)
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
	settle(b)
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

// benchReportRounds is how many passes over its subjects a report stream
// holds, each in a fresh random order.
const benchReportRounds = 10

// reportStream lays out, in the order they will be sent, reports on the
// given subjects: benchReportRounds random permutations of them, 1 in 4 a
// failure. Each report's strings are copied in that order, as a server
// decodes each request's strings as it arrives, so that reading the next
// request costs what it costs a server (its bytes are fresh) and no
// comparison in the pool short-cuts on identical pointers. What is random
// is which resource and cell each report hits.
func reportStream(subjects []Report, seed uint64) []Report {
	rng := rand.New(rand.NewPCG(seed, 6))
	out := make([]Report, 0, len(subjects)*benchReportRounds)
	for range benchReportRounds {
		for _, i := range rng.Perm(len(subjects)) {
			rep := subjects[i]
			rep.Resource, rep.Context = strings.Clone(rep.Resource), strings.Clone(rep.Context)
			rep.Outcome = Success
			if rng.IntN(4) == 0 {
				rep.Outcome = Failure
			}
			out = append(out, rep)
		}
	}
	return out
}

// holderReports is a report stream from the holders of leases: each
// lease's resource and context with its lease id and fencing token.
func holderReports(leases []Lease, seed uint64) []Report {
	subjects := make([]Report, len(leases))
	for i, l := range leases {
		subjects[i] = Report{Resource: l.Resource, Context: l.Context, LeaseID: l.ID, Token: l.Token}
	}
	return reportStream(subjects, seed)
}

// BenchmarkReport100k measures Report as the system is used: a lease
// holder reports the outcome of its lease (with its lease id and fencing
// token), for the 20,000 outstanding leases (20% of the capacity) in random
// order. BenchmarkReport100kAnyResource is the cache-cold case.
func BenchmarkReport100k(b *testing.B) {
	p, leases := benchPool(b)
	reps := holderReports(leases, 1)
	settle(b)
	for i := 0; b.Loop(); i++ {
		if _, err := p.Report(reps[i%len(reps)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReport100kAnyResource measures Report without a lease on cells
// drawn from all 500,000 in random order: nearly every call then misses the
// CPU caches for the id's index entry, the resource and the cell, and its
// time is mostly memory latency.
func BenchmarkReport100kAnyResource(b *testing.B) {
	p, _ := benchPool(b)
	subjects := make([]Report, 0, benchResources*benchContexts)
	for i := range benchResources {
		for _, c := range benchContextNames {
			subjects = append(subjects, Report{Resource: fmt.Sprintf("proxy-%06d", i), Context: c})
		}
	}
	reps := reportStream(subjects, 2)[:len(subjects)]
	settle(b)
	for i := 0; b.Loop(); i++ {
		if _, err := p.Report(reps[i%len(reps)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireRelease100kParallel runs Acquire+Release from GOMAXPROCS
// goroutines on one pool.
func BenchmarkAcquireRelease100kParallel(b *testing.B) {
	p, _ := benchPool(b)
	settle(b)
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

// BenchmarkReport100kParallel runs BenchmarkReport100k's holder reports
// from GOMAXPROCS goroutines, each with its own stream.
func BenchmarkReport100kParallel(b *testing.B) {
	p, leases := benchPool(b)
	var seed atomic.Uint64
	streams := make(chan []Report, runtime.GOMAXPROCS(0))
	for range cap(streams) {
		streams <- holderReports(leases, seed.Add(1))
	}
	settle(b)
	b.RunParallel(func(pb *testing.PB) {
		reps := <-streams
		for i := 0; pb.Next(); i++ {
			if _, err := p.Report(reps[i%len(reps)]); err != nil {
				b.Fatal(err)
			}
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
	settle(b)
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

// BenchmarkRegister100k registers 100,000 resources in one call: a batch
// that large must cost about as much per resource as a small one.
func BenchmarkRegister100k(b *testing.B) {
	specs := make([]Spec, benchResources)
	for i := range specs {
		specs[i] = Spec{ID: fmt.Sprintf("proxy-%06d", i)}
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := New(Config{EventHistory: 1})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := p.Register(specs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchResources, "ns/resource")
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
