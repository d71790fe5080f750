package postgres

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/testenv"
)

// BenchmarkPlacements measures Placements (list), the read a group's active
// server makes when the placements changed (and at least every 5 s), and
// PlacementsFingerprint (fingerprint), the read of every other
// --placement-interval (200ms by default), with 1,000,
// 10,000 and 100,000 live tenants spread over 8 groups: the time of one
// read (ns/op, wall clock on this machine, PostgreSQL's work included),
// the CPU it costs the reading process (client-cpu-ns/op: the server's
// share) and what it allocates there (B/op, allocs/op). The tenants are
// inserted with SQL, as CreateTenant would leave them.
func BenchmarkPlacements(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			s := openTest(b, testenv.Postgres(b), store.Options{})
			ctx := context.Background()
			if _, err := s.pool.Exec(ctx, `
INSERT INTO tenants (id, name, status, created_at, placement)
SELECT 'tenant-' || lpad(i::text, 6, '0'), 'Tenant ' || i, 'active', now(),
       CASE WHEN i % 8 = 0 THEN 'default' ELSE 'group-' || (i % 8) END
FROM generate_series(1, $1) AS i`, n); err != nil {
				b.Fatal(err)
			}
			if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE tenants`); err != nil {
				b.Fatal(err)
			}
			b.Run("list", func(b *testing.B) {
				b.ReportAllocs()
				cpu0 := processCPU()
				for b.Loop() {
					placed, err := s.Placements(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if len(placed) != n {
						b.Fatalf("Placements() = %d tenants, want %d", len(placed), n)
					}
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "client-cpu-ns/op")
			})
			// What an idle poll costs: the fingerprint, computed in the
			// database, instead of the listing.
			b.Run("fingerprint", func(b *testing.B) {
				b.ReportAllocs()
				cpu0 := processCPU()
				for b.Loop() {
					if fp, err := s.PlacementsFingerprint(ctx); err != nil || fp == "" {
						b.Fatalf("PlacementsFingerprint() = %q, %v", fp, err)
					}
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "client-cpu-ns/op")
			})
		})
	}
}

// processCPU returns the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
