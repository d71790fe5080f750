package pool

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// liveHeap is the heap in use after two collections: what the live
// objects hold, without the garbage of what ran before.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkCapacity is the memory side of docs/scaling.md's capacity
// model: it fills a pool with N resources (ids of 12 bytes, as
// "proxy-000000"), M cells per resource (one per context) and leases 20%
// of the capacity, and reports the heap each adds: B/resource, B/cell and
// B/lease. It runs two sizes and three context counts, so that the model
// can be checked for being linear (the per-item figures stay put as the
// pool grows). The ids and the lease values the caller keeps are allocated
// before the baseline, so that only the pool's own memory is counted.
func BenchmarkCapacity(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, m := range []int{1, 5, 20} {
			b.Run(fmt.Sprintf("resources=%d/contexts=%d", n, m), func(b *testing.B) {
				for b.Loop() {
					res, cell, lease := fillPool(b, n, m)
					b.ReportMetric(res, "B/resource")
					b.ReportMetric(cell, "B/cell")
					b.ReportMetric(lease, "B/lease")
				}
			})
		}
	}
}

// fillPool builds one pool of n resources with m cells each and n/5
// leases, and returns the heap bytes per resource, per cell and per lease.
func fillPool(b *testing.B, n, m int) (perResource, perCell, perLease float64) {
	b.Helper()
	ids := make([]string, n)
	specs := make([]Spec, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("proxy-%06d", i)
		specs[i] = Spec{ID: ids[i]}
	}
	contexts := make([]string, m)
	for i := range contexts {
		contexts[i] = fmt.Sprintf("context-%02d", i)
	}
	leases := make([]Lease, 0, n/5)
	base := liveHeap()
	p, err := New(Config{EventHistory: 1})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := p.Register(specs); err != nil {
		b.Fatal(err)
	}
	p.TakeChanges()
	withResources := liveHeap()
	for _, id := range ids {
		for _, c := range contexts {
			if _, err := p.Report(Report{Resource: id, Context: c, Outcome: Success}); err != nil {
				b.Fatal(err)
			}
		}
	}
	p.TakeChanges()
	withCells := liveHeap()
	for len(leases) < n/5 {
		l, err := p.Acquire(contexts[len(leases)%m], time.Hour, nil)
		if err != nil {
			b.Fatal(err)
		}
		leases = append(leases, l)
	}
	p.TakeChanges()
	withLeases := liveHeap()
	runtime.KeepAlive(p)
	runtime.KeepAlive(ids)
	runtime.KeepAlive(leases)
	return float64(withResources-base) / float64(n),
		float64(withCells-withResources) / float64(n*m),
		float64(withLeases-withCells) / float64(n/5)
}

// BenchmarkCapacityEmptyPools reports the heap of a tenant's pool before
// it holds anything (B/pool), with the default configuration (an event
// history of 4,096) and with a history of one event, which shows what the
// history costs: the many-small-tenants side of the model.
func BenchmarkCapacityEmptyPools(b *testing.B) {
	const pools = 1000
	for _, history := range []int{0, 1} {
		name := "default"
		if history > 0 {
			name = fmt.Sprintf("event-history=%d", history)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				ps := make([]*Pool, 0, pools)
				base := liveHeap()
				for range pools {
					p, err := New(Config{EventHistory: history})
					if err != nil {
						b.Fatal(err)
					}
					ps = append(ps, p)
				}
				after := liveHeap()
				runtime.KeepAlive(ps)
				b.ReportMetric(float64(after-base)/pools, "B/pool")
			}
		})
	}
}
