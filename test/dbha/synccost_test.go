package dbha

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// Slices of the cost measurement: each mode runs costSlices slices of
// costSlice, taking turns, so that both see the same moments of a shared
// machine; costClients clients make lease cycles in each.
const (
	costSlices  = 5
	costSlice   = 4 * time.Second
	costClients = 16
	costCommits = 300 // single-row commits timed alone per slice
)

// costSample is one slice's figures.
type costSample struct {
	cycles        int
	secs          float64
	journalMean   float64   // mean lease-journal commit, from the server's histogram (s)
	commitSamples []float64 // single-row INSERT commits (s)
}

// TestSynchronousReplicationCost measures what synchronous replication
// costs repool, on the database tier as docs/ha.md builds it (three
// Patroni nodes from the shipped patroni.yml, HAProxy in front): lease
// cycles (Acquire + Release on capacity-1 resources, 16 clients, the real
// server's durability: every lease change journaled before it is
// answered) per second, the server's lease-journal commit time, and the
// commit time of a single-row INSERT, with synchronous_mode on (as
// shipped: a commit waits for the synchronous standby's flush) and off
// (the same primary, its standbys asynchronous: a commit waits for the
// primary's own flush only, as a single instance's does), in alternating
// slices of one run. It prints measure: lines with the ratios and the
// load average; it asserts only that every call succeeded, as figures on
// a shared machine are not a test's to judge.
func TestSynchronousReplicationCost(t *testing.T) {
	d := startTier(t)
	// One server, not an HA pair: what is measured is the database's
	// commit, not the leader's checks (which, with both cores busy and
	// more, can step a leader down for a late answer).
	pool, banner, httpAddr, stop := startServerHTTP(t, d.DSN(), filepath.Join(d.dir, "cost-server.log"), false)
	defer stop()
	key := demoKey(banner)
	if key == "" {
		t.Fatalf("no demo API key in the server's first-start banner:\n%s", banner)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	register(t, ctx, pool, "c", 4*costClients)
	conn, err := pgx.Connect(context.Background(), d.DSN())
	if err != nil {
		t.Fatalf("connecting to the tier = %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `CREATE TABLE sync_cost (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}

	load1 := loadAvg()
	samples := map[bool][]costSample{}
	for i := range 2 * costSlices {
		syncOn := i%2 == 0
		d.setSynchronous(syncOn)
		samples[syncOn] = append(samples[syncOn], costSlice1(t, ctx, pool, conn, httpAddr))
	}
	load2 := loadAvg()

	// Each synchronous slice against the slice without that follows it:
	// the ratios of pairs, whose median and range are printed, say more on
	// a shared machine than the totals, which a busy moment of either
	// mode moves.
	var cycleR, journalR, p50R, p99R []float64
	for i := range costSlices {
		sy, si := samples[true][i], samples[false][i]
		cycleR = append(cycleR, sy.rate()/si.rate())
		journalR = append(journalR, sy.journalMean/si.journalMean)
		p50R = append(p50R, pct(sy.commitSamples, 0.5)/pct(si.commitSamples, 0.5))
		p99R = append(p99R, pct(sy.commitSamples, 0.99)/pct(si.commitSamples, 0.99))
	}
	all := func(syncOn bool, f func(costSample) float64) string {
		var v []string
		for _, s := range samples[syncOn] {
			v = append(v, strconv.FormatFloat(f(s), 'f', 2, 64))
		}
		return strings.Join(v, ",")
	}
	ms := func(f func(costSample) float64) func(costSample) float64 {
		return func(s costSample) float64 { return 1000 * f(s) }
	}
	t.Logf("measure: sync_over_single lease_cycles_per_s median=%.2f range=%s (sync %s; single %s)", median(cycleR), spread(cycleR),
		all(true, costSample.rate), all(false, costSample.rate))
	t.Logf("measure: sync_over_single lease_journal_commit_mean median=%.2f range=%s (ms: sync %s; single %s)", median(journalR), spread(journalR),
		all(true, ms(func(s costSample) float64 { return s.journalMean })), all(false, ms(func(s costSample) float64 { return s.journalMean })))
	t.Logf("measure: sync_over_single insert_commit_p50 median=%.2f range=%s (ms: sync %s; single %s)", median(p50R), spread(p50R),
		all(true, ms(func(s costSample) float64 { return pct(s.commitSamples, 0.5) })), all(false, ms(func(s costSample) float64 { return pct(s.commitSamples, 0.5) })))
	t.Logf("measure: sync_over_single insert_commit_p99 median=%.2f range=%s (ms: sync %s; single %s)", median(p99R), spread(p99R),
		all(true, ms(func(s costSample) float64 { return pct(s.commitSamples, 0.99) })), all(false, ms(func(s costSample) float64 { return pct(s.commitSamples, 0.99) })))
	t.Logf("measure: load_average before=%s after=%s (%d slices of %v per mode, alternating)", load1, load2, costSlices, costSlice)
}

func (s costSample) rate() float64 { return float64(s.cycles) / s.secs }

// pct is the p-quantile of v (sorted here).
func pct(v []float64, p float64) float64 {
	v = slices.Sorted(slices.Values(v))
	return v[int(p*float64(len(v)-1))]
}

func median(v []float64) float64 { return pct(v, 0.5) }

// spread is "min-max" of v.
func spread(v []float64) string {
	return fmt.Sprintf("%.2f-%.2f", slices.Min(v), slices.Max(v))
}

// setSynchronous turns Patroni's synchronous_mode on or off and waits
// until the primary's synchronous_standby_names says so.
func (d *dbTier) setSynchronous(on bool) {
	d.t.Helper()
	p := d.Primary()
	if p == nil {
		d.t.Fatal("no primary")
	}
	d.Patronictl(p, "edit-config", "--force", "--set", "synchronous_mode="+strconv.FormatBool(on))
	testenv.Eventually(d.t, 60*time.Second, fmt.Sprintf("synchronous_standby_names to be %s", map[bool]string{true: "set", false: "empty"}[on]), func() bool {
		names := d.Psql(p, "postgres", "SHOW synchronous_standby_names")
		return (names != "") == on
	})
}

// costSlice1 runs one slice: costClients clients making lease cycles for
// costSlice, then costCommits single-row commits alone.
func costSlice1(t *testing.T, ctx context.Context, pool repoolv1.PoolServiceClient, conn *pgx.Conn, httpAddr string) costSample {
	t.Helper()
	sum0, n0 := journalHistogram(t, httpAddr)
	var (
		mu     sync.Mutex
		cycles int
		errs   []error
		wg     sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(costSlice)
	for range costClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for time.Now().Before(end) {
				a, err := pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
				if err == nil {
					_, err = pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: a.GetLease().GetLeaseId(), FencingToken: a.GetLease().GetFencingToken()})
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				n++
			}
			mu.Lock()
			cycles += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if len(errs) > 0 {
		t.Fatalf("lease cycles = got errors %v, want none", errs)
	}
	sum1, n1 := journalHistogram(t, httpAddr)
	s := costSample{cycles: cycles, secs: secs}
	if n1 > n0 {
		s.journalMean = (sum1 - sum0) / (n1 - n0)
	}
	for range costCommits {
		at := time.Now()
		if _, err := conn.Exec(context.Background(), `INSERT INTO sync_cost DEFAULT VALUES`); err != nil {
			t.Fatalf("INSERT = %v", err)
		}
		s.commitSamples = append(s.commitSamples, time.Since(at).Seconds())
	}
	return s
}

// loadAvg is the 1-, 5- and 15-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

// journalHistogram reads the sum and count of the server's
// repool_lease_journal_commit_seconds.
func journalHistogram(t *testing.T, httpAddr string) (sum, count float64) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics = %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "repool_lease_journal_commit_seconds_sum "); ok {
			sum, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
		if v, ok := strings.CutPrefix(line, "repool_lease_journal_commit_seconds_count "); ok {
			count, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return sum, count
}
