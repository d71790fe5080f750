package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
)

// benchLimiter returns a Limiter on the wall clock whose buckets never run
// dry, so that every call takes the allow path.
func benchLimiter(b *testing.B) *Limiter {
	b.Helper()
	l, err := New(Config{Rate: 1e12, Burst: 1 << 30})
	if err != nil {
		b.Fatalf("New() = %v", err)
	}
	return l
}

// BenchmarkAllow measures an allowed request of a known tenant.
func BenchmarkAllow(b *testing.B) {
	l := benchLimiter(b)
	ctx := context.Background()
	mustAllow(b, l, "a", register)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := l.Allow(ctx, "a", register); err != nil || !d.Allowed {
			b.Fatalf("Allow() = %+v, %v", d, err)
		}
	}
}

// BenchmarkAllowRefused measures a refused request: the error and the
// metric cost an allocation or two, paid only by requests over the rate.
func BenchmarkAllowRefused(b *testing.B) {
	l, err := New(Config{Rate: 1e-9, Burst: 1})
	if err != nil {
		b.Fatalf("New() = %v", err)
	}
	ctx := context.Background()
	mustAllow(b, l, "a", acquire)
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Allow(ctx, "a", acquire); d.Allowed {
			b.Fatal("Allow() allowed")
		}
	}
}

// BenchmarkAllowParallel measures allowed requests from all CPUs, on one
// tenant (one contended bucket) and on a tenant per goroutine.
func BenchmarkAllowParallel(b *testing.B) {
	cases := []struct {
		name      string
		perWorker bool
	}{
		{name: "one-tenant"},
		{name: "tenant-per-goroutine", perWorker: true},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			l := benchLimiter(b)
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				id := "a"
				if bc.perWorker {
					id = "t" + strconv.FormatInt(next.Add(1), 10)
				}
				for pb.Next() {
					if d, err := l.Allow(ctx, id, register); err != nil || !d.Allowed {
						b.Errorf("Allow() = %+v, %v", d, err)
						return
					}
				}
			})
		})
	}
}
