package journal

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/sqlite"
)

// BenchmarkWriterSQLite measures the journal alone on the embedded store:
// 64 clients each record a lease granted and then ended, as Acquire and
// Release do, and wait for each commit. It reports grant+end cycles per
// second and their mean latency (two group commits). The sub-benchmarks
// write to the lease_journal table in a transaction per commit (a store
// whose writer claim is not held) and to the lease log (claimed, as a
// server's store is), and, with one client, what a lone call waits.
func BenchmarkWriterSQLite(b *testing.B) {
	for _, c := range []struct {
		name    string
		claim   bool
		clients int
	}{{"table", false, 64}, {"lease-log", true, 64}, {"lease-log-1-client", true, 1}} {
		b.Run(c.name, func(b *testing.B) { benchWriterSQLite(b, c.claim, c.clients) })
	}
}

func benchWriterSQLite(b *testing.B, claim bool, clients int) {
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "repool.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateTenant(b.Context(), store.Tenant{ID: "demo", Name: "demo"}); err != nil {
		b.Fatal(err)
	}
	if claim {
		c, err := st.LockWriter(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Release()
	}
	w, err := New(st, 5*time.Second, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer w.Start(ctx)()
	defer cancel()
	var id atomic.Uint64
	var cycles, busy atomic.Int64
	start := time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/clients + 1
	for range clients {
		wg.Go(func() {
			for range per {
				i := id.Add(1)
				t0 := time.Now()
				l := pool.Lease{ID: i, Resource: "proxy-0001", Context: "search", Token: i, ExpiresAt: t0.Add(time.Minute)}
				if err := w.Leased(ctx, "demo", l); err != nil {
					b.Error(err)
					return
				}
				if err := w.Ended(ctx, "demo", i); err != nil {
					b.Error(err)
					return
				}
				busy.Add(int64(time.Since(t0)))
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
	n := cycles.Load()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "cycles/s")
	b.ReportMetric(float64(busy.Load())/float64(n)/1e3, "µs/cycle")
}
