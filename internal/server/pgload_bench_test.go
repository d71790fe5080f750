package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// walMark is a position in the WAL of the test binary's own cluster
// (testenv.Postgres), so everything written after it is this benchmark's.
type walMark string

// settleFlush is how long a phase is left to end before its WAL is read: a
// report flush round (every second) writes what the phase's last reports
// changed.
const settleFlush = 1500 * time.Millisecond

// mark returns the WAL position flushed after settleFlush (pg_walinspect
// reads no further than that).
func mark(tb testing.TB, conn *pgx.Conn) walMark {
	tb.Helper()
	time.Sleep(settleFlush)
	var lsn string
	if err := conn.QueryRow(context.Background(), `SELECT pg_current_wal_flush_lsn()::text`).Scan(&lsn); err != nil {
		tb.Fatal(err)
	}
	return walMark(lsn)
}

// walLoad is what the WAL between two marks holds, read with
// pg_walinspect: the transactions that committed a write (every
// read-only transaction writes no WAL), the table rows inserted
// (single and COPY's multi-inserts), updated and deleted, the rows
// locked (SELECT ... FOR SHARE/UPDATE writes a lock record), and the
// bytes, of which full-page images.
type walLoad struct {
	commits, inserted, updated, deleted, locked, bytes, fpiBytes int64
}

func (w walLoad) rows() int64 { return w.inserted + w.updated + w.deleted }

// walBetween reads the WAL between from and to. Heap records are table
// rows; index records (Btree) are counted in the bytes only.
func walBetween(tb testing.TB, conn *pgx.Conn, from, to walMark) walLoad {
	tb.Helper()
	// The rows a COPY multi-insert carries are in its description: "N
	// tuples" (PostgreSQL 15) or "ntuples: N" (16 and later).
	const q = `
SELECT
  count(*) FILTER (WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'),
  coalesce(sum(CASE
    WHEN resource_manager = 'Heap' AND record_type LIKE 'INSERT%' THEN 1
    WHEN resource_manager = 'Heap2' AND record_type LIKE 'MULTI_INSERT%'
      THEN coalesce(substring(description FROM '(\d+) tuples'), substring(description FROM 'ntuples: (\d+)'))::bigint
    END), 0),
  count(*) FILTER (WHERE resource_manager = 'Heap' AND record_type LIKE '%UPDATE%'),
  count(*) FILTER (WHERE resource_manager = 'Heap' AND record_type LIKE 'DELETE%'),
  count(*) FILTER (WHERE resource_manager IN ('Heap', 'Heap2') AND record_type LIKE 'LOCK%'),
  pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint,
  coalesce(sum(fpi_length), 0)
FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)`
	var w walLoad
	if from == to {
		return w // nothing was written: pg_get_wal_records_info refuses an empty range
	}
	err := conn.QueryRow(context.Background(), q, string(from), string(to)).Scan(&w.commits, &w.inserted, &w.updated, &w.deleted, &w.locked, &w.bytes, &w.fpiBytes)
	if err != nil && strings.Contains(err.Error(), "could not find a valid record") {
		return walLoad{} // no record in the range
	}
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// paced calls fn at rate calls per second for d from a pool of workers,
// as arrivals that do not wait for each other; an arrival that finds
// every worker busy is dropped and counted. It returns the calls that
// succeeded, failed and were dropped.
func paced(rate float64, d time.Duration, workers int, fn func(worker, i int) error) (ok, failed, dropped int64) {
	work := make(chan int, workers)
	var okN, failedN atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range work {
				if err := fn(w, i); err != nil {
					failedN.Add(1)
					continue
				}
				okN.Add(1)
			}
		})
	}
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if at.Sub(start) >= d {
			break
		}
		time.Sleep(time.Until(at))
		select {
		case work <- i:
		default:
			dropped++
		}
	}
	close(work)
	wg.Wait()
	return okN.Load(), failedN.Load(), dropped
}

// pgServer starts a server on a new PostgreSQL database with cfg, with
// resources resources registered (one context's worth of capacity 1000
// each), and returns it, a client context carrying its key, the
// resources' ids and a connection to its database.
func pgServer(b *testing.B, cfg Config, resources int) (*running, context.Context, []string, *pgx.Conn) {
	b.Helper()
	dsn := testenv.Postgres(b)
	cfg.Store, cfg.Limits = dsn, requestLimit(1e9, 1<<30)
	r := start(b, cfg)
	ctx := withKey(r.key)
	ids := make([]string, resources)
	res := make([]*repoolv1.Resource, resources)
	for i := range ids {
		ids[i] = fmt.Sprintf("proxy-%06d", i)
		res[i] = &repoolv1.Resource{Id: ids[i], Capacity: 1000}
	}
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: res}); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(context.Background(), `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		b.Fatal(err)
	}
	return r, ctx, ids, conn
}

// reportPer reports w, the WAL of n operations, per 1,000 operations,
// and prints it as a line of docs/scaling.md.
func reportPer(b *testing.B, what string, w walLoad, n int64) {
	b.Helper()
	per := func(v int64) float64 { return float64(v) * 1000 / float64(n) }
	b.ReportMetric(per(w.commits), "commits/1k")
	b.ReportMetric(per(w.rows()), "rows/1k")
	b.ReportMetric(per(w.bytes)/1024, "WAL_KiB/1k")
	fmt.Printf("%s: %d ops; per 1,000: %.0f commits, %.0f rows written (ins %.0f, upd %.0f, del %.0f), %.0f rows locked, %.0f KiB WAL (%.0f KiB full-page images)\n",
		what, n, per(w.commits), per(w.rows()), per(w.inserted), per(w.updated), per(w.deleted), per(w.locked), per(w.bytes)/1024, per(w.fpiBytes)/1024)
}

// BenchmarkPostgresWriteLoad measures the PostgreSQL write load of one
// group's active server, per 1,000 operations at a steady rate, with the
// server's default report flush (1s) and journal compaction (10s): an
// idle server (per second), lease cycles (Acquire, then Release with an
// outcome: the lease journal's insert and delete, and the statistics the
// report flush writes) at two rates, reports alone, lease cycles spread
// over 20 tenants (50 resources each), and, last, every tenant idle with
// 99 more that have a pool (per second and tenant). Otherwise one busy
// tenant, 1,000 resources, two contexts; 64 workers. Run it with
// -benchtime 1x.
func BenchmarkPostgresWriteLoad(b *testing.B) {
	r, ctx, ids, conn := pgServer(b, Config{CheckpointInterval: 10 * time.Second, ReportFlush: time.Second}, 1000)
	contexts := []string{"search", "order"}
	const d = 8 * time.Second
	b.Run("idle", func(b *testing.B) {
		for b.Loop() {
			m0 := mark(b, conn)
			time.Sleep(5 * time.Second)
			w := walBetween(b, conn, m0, mark(b, conn))
			secs := 5 + settleFlush.Seconds()
			b.ReportMetric(float64(w.commits)/secs, "commits/s")
			b.ReportMetric(float64(w.bytes)/secs, "WAL_B/s")
			fmt.Printf("idle: per second: %.1f commits, %.1f rows written, %.0f B WAL\n",
				float64(w.commits)/secs, float64(w.rows())/secs, float64(w.bytes)/secs)
		}
	})
	for _, rate := range []float64{250, 1000} {
		b.Run(fmt.Sprintf("cycles-%.0f", rate), func(b *testing.B) {
			for b.Loop() {
				m0 := mark(b, conn)
				ok, failed, dropped := paced(rate, d, 64, func(w, i int) error {
					l, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: contexts[i%2], TtlSeconds: 60})
					if err != nil {
						return err
					}
					outcome := repoolv1.Outcome_SUCCESS
					if i%5 == 0 {
						outcome = repoolv1.Outcome_FAILURE
					}
					_, err = r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: outcome})
					return err
				})
				if failed > 0 || ok == 0 {
					b.Fatalf("%d cycles failed, %d succeeded", failed, ok)
				}
				reportPer(b, fmt.Sprintf("lease cycles at %.0f/s (%d dropped)", rate, dropped), walBetween(b, conn, m0, mark(b, conn)), ok)
			}
		})
	}
	b.Run("reports-1000", func(b *testing.B) {
		for b.Loop() {
			m0 := mark(b, conn)
			ok, failed, dropped := paced(1000, d, 64, func(w, i int) error {
				_, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: ids[(i*7919)%len(ids)], Context: contexts[i%2], Outcome: repoolv1.Outcome_SUCCESS})
				return err
			})
			if failed > 0 || ok == 0 {
				b.Fatalf("%d reports failed, %d succeeded", failed, ok)
			}
			reportPer(b, fmt.Sprintf("reports at 1000/s (%d dropped)", dropped), walBetween(b, conn, m0, mark(b, conn)), ok)
		}
	})
	// 20 more tenants of 50 resources each, made on first use.
	const busy = 20
	var busyCtxs []context.Context
	busyTenants := func(b *testing.B) []context.Context {
		for t := len(busyCtxs); t < busy; t++ {
			id := fmt.Sprintf("busy-%02d", t)
			if code := r.api(b, "POST", "/api/v1/tenants", r.op, fmt.Sprintf(`{"id":%q,"name":%q}`, id, id), nil); code != 201 {
				b.Fatalf("create tenant %s = %d", id, code)
			}
			var key struct{ Key string }
			if code := r.api(b, "POST", "/api/v1/tenants/"+id+"/keys", r.op, `{"name":"bench"}`, &key); code != 201 {
				b.Fatalf("create key of %s = %d", id, code)
			}
			tctx := withKey(key.Key)
			res := make([]*repoolv1.Resource, 50)
			for i := range res {
				res[i] = &repoolv1.Resource{Id: fmt.Sprintf("proxy-%03d", i), Capacity: 1000}
			}
			if _, err := r.pool.Register(tctx, &repoolv1.RegisterRequest{Resources: res}); err != nil {
				b.Fatal(err)
			}
			busyCtxs = append(busyCtxs, tctx)
		}
		return busyCtxs
	}
	for _, rate := range []float64{250, 1000} {
		b.Run(fmt.Sprintf("cycles-%.0f-%d-tenants", rate, busy), func(b *testing.B) {
			ctxs := busyTenants(b)
			for b.Loop() {
				m0 := mark(b, conn)
				ok, failed, dropped := paced(rate, d, 64, func(w, i int) error {
					tctx := ctxs[i%busy]
					l, err := r.pool.Acquire(tctx, &repoolv1.AcquireRequest{Context: contexts[(i/busy)%2], TtlSeconds: 60})
					if err != nil {
						return err
					}
					_, err = r.pool.Release(tctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS})
					return err
				})
				if failed > 0 || ok == 0 {
					b.Fatalf("%d cycles failed, %d succeeded", failed, ok)
				}
				reportPer(b, fmt.Sprintf("lease cycles at %.0f/s over %d tenants (%d dropped)", rate, busy, dropped), walBetween(b, conn, m0, mark(b, conn)), ok)
			}
		})
	}
	b.Run("idle-tenants", func(b *testing.B) {
		for b.Loop() {
			// 99 more tenants, each with a pool (as its first call makes);
			// every tenant with a pool counts.
			for i := range 99 {
				id := fmt.Sprintf("idle-%02d", i)
				if code := r.api(b, "POST", "/api/v1/tenants", r.op, fmt.Sprintf(`{"id":%q,"name":%q}`, id, id), nil); code != 201 && code != 409 {
					b.Fatalf("create tenant %s = %d", id, code)
				}
				if _, err := r.s.pools.Pool(id); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(len(r.s.pools.Tenants()))
			m0 := mark(b, conn)
			time.Sleep(5 * time.Second)
			w := walBetween(b, conn, m0, mark(b, conn))
			secs := 5 + settleFlush.Seconds()
			b.ReportMetric(float64(w.commits)/secs/n, "commits/s/tenant")
			fmt.Printf("idle, %.0f tenants with a pool: per second and tenant: %.2f commits, %.2f rows written, %.0f B WAL\n",
				n, float64(w.commits)/secs/n, float64(w.rows())/secs/n, float64(w.bytes)/secs/n)
		}
	})
}

// BenchmarkPostgresCheckpoint measures what a report flush (a checkpoint
// round) writes to PostgreSQL: the first round of a tenant after a start,
// which writes its whole state (1,000 resources and 5,000 cells: per
// 1,000 rows of state), and a later, incremental round after every cell
// changed (per 1,000 changed cells); and what a registration of 1,000
// resources in one call writes (per 1,000 resources). The report flush is
// set to its longest (1m) and the rounds are run by hand, so that each is
// measured alone. Run it with -benchtime 1x.
func BenchmarkPostgresCheckpoint(b *testing.B) {
	const resources, contexts = 1000, 5
	// fill reports on every cell of r's resources.
	fill := func(b *testing.B, r *running, ctx context.Context, ids []string) {
		for i, id := range ids {
			for c := range contexts {
				if _, err := r.pool.Report(ctx, &repoolv1.ReportRequest{ResourceId: id, Context: fmt.Sprintf("context-%d", c), Outcome: repoolv1.Outcome(1 + (i+c)%2)}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	// round fills and then runs one checkpoint round, measured.
	round := func(b *testing.B, r *running, ctx context.Context, ids []string, conn *pgx.Conn, what string, n int64) {
		fill(b, r, ctx, ids)
		m0 := mark(b, conn)
		if err := r.s.Checkpoint(context.Background()); err != nil {
			b.Fatal(err)
		}
		reportPer(b, what, walBetween(b, conn, m0, mark(b, conn)), n)
	}
	cfg := Config{CheckpointInterval: time.Hour, ReportFlush: time.Minute}
	b.Run("full-round", func(b *testing.B) {
		for b.Loop() {
			// A new server: its first round is full.
			r, ctx, ids, conn := pgServer(b, cfg, resources)
			round(b, r, ctx, ids, conn, fmt.Sprintf("first (full) round: %d resources and %d cells", resources, resources*contexts), resources*(1+contexts))
		}
	})
	r, ctx, ids, conn := pgServer(b, cfg, resources)
	fill(b, r, ctx, ids)
	if err := r.s.Checkpoint(context.Background()); err != nil { // the full one
		b.Fatal(err)
	}
	b.Run("incremental-round", func(b *testing.B) {
		for b.Loop() {
			round(b, r, ctx, ids, conn, fmt.Sprintf("incremental round: %d changed cells", resources*contexts), resources*contexts)
		}
	})
	var batch atomic.Int64
	b.Run(fmt.Sprintf("register=%d", resources), func(b *testing.B) {
		for b.Loop() {
			m0 := mark(b, conn)
			res := make([]*repoolv1.Resource, resources)
			k := batch.Add(1)
			for i := range res {
				res[i] = &repoolv1.Resource{Id: fmt.Sprintf("reg-%d-%06d", k, i)}
			}
			if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: res}); err != nil {
				b.Fatal(err)
			}
			reportPer(b, fmt.Sprintf("one registration of %d resources", resources), walBetween(b, conn, m0, mark(b, conn)), resources)
		}
	})
}
