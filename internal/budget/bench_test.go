package budget

import (
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkReserveRelease measures one Reserve and one Release of a known
// tenant, within its reservation and from the shared pool.
func BenchmarkReserveRelease(b *testing.B) {
	cases := []struct {
		name   string
		limits Limits
	}{
		{name: "reservation", limits: Limits{ReservedCells: 10}},
		{name: "shared", limits: Limits{}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			bu := newTestBudget(b, 0, 0)
			mustSetLimits(b, bu, "t", bc.limits)
			b.ReportAllocs()
			for b.Loop() {
				if err := bu.Reserve("t", Cells, 1); err != nil {
					b.Fatal(err)
				}
				if err := bu.Release("t", Cells, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReserveReleaseParallel measures Reserve and Release from all
// CPUs: on one tenant (one contended word) and on a tenant per goroutine,
// within reservations and from the shared pool (one contended counter).
func BenchmarkReserveReleaseParallel(b *testing.B) {
	cases := []struct {
		name      string
		perWorker bool
		reserved  int64
	}{
		{name: "one-tenant/shared"},
		{name: "one-tenant/reservation", reserved: 1000},
		{name: "tenant-per-goroutine/shared", perWorker: true},
		{name: "tenant-per-goroutine/reservation", perWorker: true, reserved: 10},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			bu := newTestBudget(b, MaxBudget, MaxBudget)
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				id := "t"
				if bc.perWorker {
					id = "t" + strconv.FormatInt(next.Add(1), 10)
				}
				if bc.reserved > 0 {
					if err := bu.SetLimits(id, Limits{ReservedCells: bc.reserved}); err != nil {
						b.Fatal(err)
					}
				}
				for pb.Next() {
					if err := bu.Reserve(id, Cells, 1); err != nil {
						b.Fatal(err)
					}
					if err := bu.Release(id, Cells, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
