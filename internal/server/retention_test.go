package server

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// churn runs workers that each, iters times, register a resource of
// their own, acquire a lease, release it with an outcome (BLOCKED one
// time in five, which quarantines the resource: an audit entry) and
// remove the resource again: about two audit entries an iteration (the
// registration and the removal), plus the quarantines and recoveries.
func churn(t *testing.T, r *running, workers, iters int) {
	t.Helper()
	ctx := withKey(r.key)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range iters {
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id, Capacity: 1}}}); err != nil {
					errs <- fmt.Errorf("Register(%s) = %w", id, err)
					return
				}
				// Another worker's resource may be leased instead, or none
				// be free: the churn goes on either way.
				if a, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "c", TtlSeconds: 30}); err == nil {
					out := repoolv1.Outcome_SUCCESS
					if rng.IntN(5) == 0 {
						out = repoolv1.Outcome_BLOCKED
					}
					_, _ = r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: a.Lease.LeaseId, FencingToken: a.Lease.FencingToken, Outcome: out})
				}
				if _, err := r.pool.Deregister(ctx, &repoolv1.DeregisterRequest{ResourceIds: []string{id}}); err != nil {
					errs <- fmt.Errorf("Deregister(%s) = %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// metric returns the value of the series of /metrics (as a loopback
// caller) whose line starts with series, and whether it is there.
func (r *running) metric(t *testing.T, series string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + r.s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return v, err == nil
}

// TestRetentionBoundsTheAuditTrail: the active server's retention rounds,
// on their own, bring a tenant's audit trail down to
// --audit-max-rows-per-tenant and export the store's size, its audit rows
// and the rows pruned, on both stores. The shipped defaults, with the
// bound scaled down to 200 rows and the interval to 1s.
func TestRetentionBoundsTheAuditTrail(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(testing.TB) string
	}{{"sqlite", sqliteStore}, {"postgres", testenv.Postgres}} {
		t.Run(tc.name, func(t *testing.T) {
			const bound = 200
			r := start(t, Config{Store: tc.store(t), AuditMaxRowsPerTenant: bound, RetentionInterval: time.Second})
			churn(t, r, 4, 100) // about 800 audit entries
			testenv.Eventually(t, 30*time.Second, "the pruned audit rows to reach 500", func() bool {
				n, _ := r.metric(t, `repool_retention_pruned_rows_total{kind="audit"}`)
				return n >= 500
			})
			testenv.Eventually(t, 30*time.Second, fmt.Sprintf("the demo tenant's audit rows to be at most %d", bound), func() bool {
				u, err := r.s.store.Usage(context.Background())
				return err == nil && u.AuditRows <= bound
			})
			entries, err := r.s.store.ListAudit(context.Background(), "demo", bound, 0)
			if err != nil || len(entries) == 0 || entries[0].Action != "resources.deregister" {
				t.Fatalf("demo's newest audit entry = got %+v, %v, want the last removal kept", entries[:min(1, len(entries))], err)
			}
			for _, series := range []string{"repool_store_size_bytes", "repool_store_audit_rows", "repool_retention_last_success_timestamp_seconds"} {
				testenv.Eventually(t, 10*time.Second, series+" to be set", func() bool {
					v, ok := r.metric(t, series)
					return ok && v > 0
				})
			}
			if v, ok := r.metric(t, "repool_retention_failures_total"); !ok || v != 0 {
				t.Fatalf("repool_retention_failures_total = got %v (present %v), want 0", v, ok)
			}
		})
	}
}

// soakSample is what TestSoakRetention reads after each phase.
type soakSample struct {
	bytes, db, rows int64 // bytes: every file of the store; db: the database's pages
	goroutines, fds int
	heap            uint64 // live heap after a collection
}

func (s soakSample) String() string {
	return fmt.Sprintf("store %d B (database %d B), %d audit rows, %d goroutines, %d fds, heap %.1f MiB", s.bytes, s.db, s.rows, s.goroutines, s.fds, float64(s.heap)/(1<<20))
}

// databaseBytes is the size of the SQLite database at path as a reader
// sees it: its pages, those still in the -wal included.
func databaseBytes(t *testing.T, path string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var pages, size int64
	if err := db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA page_size`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	return pages * size
}

// TestSoakRetention is the CI-sized soak: a churning workload (workers
// registering, leasing, quarantining and removing resources, about 2.2
// audit entries an iteration) in phases, each writing several times the
// audit bound, against a server with the shipped defaults except the
// audit bound (500 rows a tenant) and the retention interval (1s), scaled
// down. After each phase it waits for a retention round to bring the
// audit rows under the bound, then reads the store's size, goroutines,
// descriptors and live heap. From the second phase on (the first fills
// the store to its working size) they stay flat: the store grows by less
// than a phase's audit rows would take, goroutines and descriptors by a
// few at most. `go test -run TestSoakRetention -v ./internal/server/`
// prints the figures.
func TestSoakRetention(t *testing.T) {
	const (
		bound   = 500
		phases  = 5
		workers = 8
		iters   = 100 // per worker and phase: about 1,800 audit entries a phase
	)
	store := sqliteStore(t)
	r := start(t, Config{Store: store, AuditMaxRowsPerTenant: bound, RetentionInterval: time.Second,
		CheckpointInterval: Config{}.WithDefaults().CheckpointInterval})
	var samples []soakSample
	for phase := range phases {
		churn(t, r, workers, iters)
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("phase %d: the audit rows to be at most %d", phase, bound), func() bool {
			u, err := r.s.store.Usage(context.Background())
			return err == nil && u.AuditRows <= bound
		})
		u, err := r.s.store.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		s := soakSample{bytes: u.Bytes, db: databaseBytes(t, strings.TrimPrefix(store, "sqlite:")), rows: u.AuditRows, goroutines: runtime.NumGoroutine(), fds: len(fds), heap: ms.HeapAlloc}
		t.Logf("after phase %d: %v", phase, s)
		samples = append(samples, s)
	}
	base, last := samples[1], samples[phases-1]
	// A phase writes about 1,800 audit entries, of at least 100 bytes
	// each with their index entries: 180 kB that a database without
	// retention grows by each phase. The database's pages are judged (its
	// size as a reader sees it, the -wal's pages included): the files
	// behind them are rewritten from their start, SQLite's -wal at each of
	// its checkpoints and the lease log at each of ours, so their size is
	// the high-water mark of the writes between two, which a busy machine
	// raises (once by 0.9 MB from phase 2 to 3, with the audit rows at
	// their bound); they are held to a bound of their own.
	if grew := last.db - base.db; grew > 180_000 {
		t.Errorf("the database grew by %d bytes from phase 1 to phase %d (%v, then %v), want it flat: less than one phase's audit rows", grew, phases-1, base, last)
	}
	for _, s := range samples {
		if rest := s.bytes - s.db; rest > 16<<20 {
			t.Errorf("the store's -wal, -shm and lease log hold %d bytes (%v), want at most 16 MiB: rewritten from their start at each checkpoint", rest, s)
		}
	}
	// A leak stays; what the last phase's calls leave winding down (their
	// connections' goroutines, on a busy machine for a while: 33 more at
	// the reading once) goes. So the counts are judged once they settle,
	// within a bound of 10s.
	if last.goroutines > base.goroutines+20 || last.fds > base.fds+5 {
		t.Logf("goroutines or descriptors above phase 1's right after phase %d (%v, then %v): waiting for them to settle", phases-1, base, last)
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("goroutines at most %d and descriptors at most %d (phase 1: %v), as a leak would not be", base.goroutines+20, base.fds+5, base), func() bool {
			entries, err := os.ReadDir("/proc/self/fd")
			return err == nil && runtime.NumGoroutine() <= base.goroutines+20 && len(entries) <= base.fds+5
		})
	}
	if last.heap > base.heap*3/2+8<<20 {
		t.Errorf("the live heap grew from phase 1 to phase %d: %v, then %v", phases-1, base, last)
	}
}

// TestRetentionOnlyOnTheActiveServer: of an active/standby pair, the
// active server prunes and the standby runs no round (its gauges stay
// 0). The shipped defaults, the bound scaled down to 100 rows and the
// interval to 1s.
func TestRetentionOnlyOnTheActiveServer(t *testing.T) {
	dsn := testenv.Postgres(t)
	cfg := func(name string) Config {
		return Config{Store: dsn, HA: true, HAName: name, HASessionTimeout: time.Second, HAInterval: 100 * time.Millisecond,
			AuditMaxRowsPerTenant: 100, RetentionInterval: time.Second}
	}
	a := start(t, cfg("a"))
	waitStatus(t, a, http.StatusOK, 5*time.Second)
	b := start(t, cfg("b"))
	waitStatus(t, b, http.StatusNotFound, 5*time.Second)
	churn(t, a, 2, 100)
	testenv.Eventually(t, 30*time.Second, "the active server to prune the audit trail to 100 rows", func() bool {
		n, _ := a.metric(t, `repool_retention_pruned_rows_total{kind="audit"}`)
		u, err := a.s.store.Usage(context.Background())
		return n > 0 && err == nil && u.AuditRows <= 100
	})
	for _, series := range []string{`repool_retention_pruned_rows_total{kind="audit"}`, "repool_retention_last_success_timestamp_seconds", "repool_store_audit_rows"} {
		if v, ok := b.metric(t, series); !ok || v != 0 {
			t.Errorf("the standby's %s = got %v (present %v), want 0: a standby runs no retention round", series, v, ok)
		}
	}
}
