package server

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/testenv"
)

var (
	benchFor     = flag.Duration("bench.for", 5*time.Second, "how long each side of the server benchmarks runs")
	benchClients = flag.Int("bench.clients", 64, "concurrent clients of BenchmarkAcquireReportVsRedis")
	benchConns   = flag.Int("bench.conns", 1, "gRPC connections the clients of BenchmarkAcquireReportVsRedis share")
	benchSlices  = flag.Int("bench.slices", 5, "slices that each side's bench.for of the VsRedis benchmarks is cut into, the sides taking turns slice by slice")
)

const benchResources = 1000

// redisPool is the Redis-backed pool a typical user builds instead: one
// sorted set of resources per context scored by success rate, a hash of
// capacities and leases in use, and two Lua scripts that acquire the best
// free resource and record an outcome atomically.
type redisPool struct {
	rdb              *redis.Client
	acquire, release *redis.Script
}

const acquireLua = `
local ids = redis.call('ZREVRANGE', KEYS[1], 0, 63)
for _, id in ipairs(ids) do
  local used = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  local cap = tonumber(redis.call('HGET', KEYS[3], id) or '1')
  if used < cap then
    redis.call('HINCRBY', KEYS[2], id, 1)
    return id
  end
end
return false`

const reportLua = `
redis.call('HINCRBY', KEYS[2], ARGV[1], -1)
local s = redis.call('HINCRBY', KEYS[4], ARGV[1] .. ':s', ARGV[2])
local f = redis.call('HINCRBY', KEYS[4], ARGV[1] .. ':f', 1 - ARGV[2])
redis.call('ZADD', KEYS[1], (s + 1) / (s + f + 2), ARGV[1])
return 1`

func newRedisPool(tb testing.TB, addr string, clients int) *redisPool {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: clients})
	tb.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	for i := 0; i < benchResources; i++ {
		id := fmt.Sprintf("proxy-%04d", i)
		for _, c := range []string{"search", "order"} {
			rdb.ZAdd(ctx, "ctx:"+c, redis.Z{Score: 0.5, Member: id})
		}
		rdb.HSet(ctx, "cap", id, 1000)
	}
	return &redisPool{rdb: rdb, acquire: redis.NewScript(acquireLua), release: redis.NewScript(reportLua)}
}

func (r *redisPool) cycle(ctx context.Context, c string, ok bool) error {
	id, err := r.acquire.Run(ctx, r.rdb, []string{"ctx:" + c, "used", "cap"}).Text()
	if err != nil {
		return err
	}
	s := 0
	if ok {
		s = 1
	}
	return r.release.Run(ctx, r.rdb, []string{"ctx:" + c, "used", "cap", "stats:" + c}, id, s).Err()
}

// run calls fn from clients goroutines for d and returns the completed
// calls per second and the errors.
func run(clients int, d time.Duration, fn func(ctx context.Context, worker, i int) error) (float64, int64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var done, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				if err := fn(ctx, w, i); err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				done.Add(1)
			}
		}(w)
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), errs.Load()
}

// vsRedis sets up both sides of a comparison with the Redis pool: a server
// on a SQLite store, run with the server's runtime settings as cmd/server
// does (the Redis client, in the same process, gets them too), with
// benchResources resources registered; the Redis pool with the same
// resources; and bench.conns gRPC connections. The clients share the
// connections, as gRPC clients do: gRPC multiplexes calls on a connection
// where Redis needs one per call in flight. ctx carries the API key.
func vsRedis(b *testing.B) (context.Context, *redisPool, []repoolv1.PoolServiceClient) {
	b.Helper()
	cfg := Config{Store: sqliteStore(b), Limits: requestLimit(1e9, 1<<30)}
	b.Cleanup(TuneRuntime(cfg, os.Getenv))
	r := start(b, cfg)
	// The demo tenant's stored limits (DemoRatePerSecond) are its own, not
	// the configuration's defaults: it is given the configured ones, so
	// that the benchmark measures the server rather than a rate limit.
	body := fmt.Sprintf(`{"rate_per_second":%g,"burst":%d}`, cfg.Limits.Value(limits.RatePerSecond), int(cfg.Limits.Value(limits.Burst)))
	if code := r.api(b, "PUT", "/api/v1/tenants/demo/limits", r.op, body, nil); code != 200 {
		b.Fatalf("PUT /api/v1/tenants/demo/limits %s = %d, want 200", body, code)
	}
	ctx := withKey(r.key)
	var res []*repoolv1.Resource
	for i := 0; i < benchResources; i++ {
		res = append(res, &repoolv1.Resource{Id: fmt.Sprintf("proxy-%04d", i), Capacity: 1000})
	}
	if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: res}); err != nil {
		b.Fatal(err)
	}
	addr, _ := testenv.Redis(b)
	rp := newRedisPool(b, addr, *benchClients)
	conns := make([]repoolv1.PoolServiceClient, *benchConns)
	for i := range conns {
		conn, err := grpc.NewClient(r.s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		conns[i] = repoolv1.NewPoolServiceClient(conn)
	}
	return ctx, rp, conns
}

// BenchmarkAcquireReportVsRedis measures Acquire+Report round trips per
// second over loopback gRPC with 64 concurrent clients, and, in the same
// run, the same cycle on a Redis-backed pool (Lua acquire-best + report on
// sorted sets) against a real redis-server. It prints both rates and their
// ratio.
func BenchmarkAcquireReportVsRedis(b *testing.B) {
	ctx, rp, conns := vsRedis(b)
	clients := make([]repoolv1.PoolServiceClient, *benchClients)
	for i := range clients {
		clients[i] = conns[i%len(conns)]
	}
	contexts := []string{"search", "order"}
	for b.Loop() {
		ourCycle := func(_ context.Context, w, i int) error {
			l, err := clients[w].Acquire(ctx, &repoolv1.AcquireRequest{Context: contexts[i%2], TtlSeconds: 60})
			if err != nil {
				return err
			}
			outcome := repoolv1.Outcome_SUCCESS
			if (w+i)%5 == 0 {
				outcome = repoolv1.Outcome_FAILURE
			}
			_, err = clients[w].Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: outcome})
			return err
		}
		theirCycle := func(cctx context.Context, w, i int) error {
			return rp.cycle(cctx, contexts[i%2], (w+i)%5 != 0)
		}
		sides := sideBySide(b, ctx, rp.rdb, "acquire+report", side{"repool gRPC", ourCycle}, side{"Redis Lua pool", theirCycle})
		ours, theirs := sides[0], sides[1]
		b.ReportMetric(ours.rate, "repool_cycles/s")
		b.ReportMetric(theirs.rate, "redis_cycles/s")
		b.ReportMetric(ours.rate/theirs.rate, "ratio")
		b.ReportMetric(ours.cpu.perCycle(), "repool_cpu_µs/cycle")
		b.ReportMetric(theirs.cpu.perCycle(), "redis_cpu_µs/cycle")
	}
}

// releaseAcquireLua is the Redis pool's one round trip per cycle: record
// the outcome of the resource in ARGV[1] and release it, then acquire the
// best free resource, in one script (ARGV[1] empty: acquire only). KEYS[4]
// and KEYS[5] are the statistics and sorted set of the context the
// released resource was used for; KEYS[1] is the next one's.
const releaseAcquireLua = `
if ARGV[1] ~= '' then
  redis.call('HINCRBY', KEYS[2], ARGV[1], -1)
  local s = redis.call('HINCRBY', KEYS[4], ARGV[1] .. ':s', ARGV[2])
  local f = redis.call('HINCRBY', KEYS[4], ARGV[1] .. ':f', 1 - ARGV[2])
  redis.call('ZADD', KEYS[5], (s + 1) / (s + f + 2), ARGV[1])
end` + acquireLua

// BenchmarkAcquireReleaseNextVsRedis is BenchmarkAcquireReportVsRedis with
// one round trip per cycle on both sides: each repool client holds a lease
// and calls Release with next (report the outcome, release, lease the next
// one), and each Redis client runs one script that records the outcome,
// releases and acquires the next resource. The repool clients make the
// call twice over: as unary Release calls, and as Release calls on a
// Leases stream each (one per client, on the shared connections). It
// prints the three rates and the ratios of both repool figures to Redis;
// the ratio metric is the stream's.
func BenchmarkAcquireReleaseNextVsRedis(b *testing.B) {
	ctx, rp, conns := vsRedis(b)
	next := redis.NewScript(releaseAcquireLua)
	contexts := []string{"search", "order"}
	for b.Loop() {
		// Each client's held lease (or Redis resource), carried from one
		// cycle to the next.
		leases := make([]*repoolv1.Lease, *benchClients)
		unaryCycle := func(_ context.Context, w, i int) error {
			c := conns[w%len(conns)]
			want := &repoolv1.NextLease{Context: contexts[i%2], TtlSeconds: 60}
			l := leases[w]
			if l == nil {
				resp, err := c.Acquire(ctx, &repoolv1.AcquireRequest{Context: want.Context, TtlSeconds: 60})
				if err != nil {
					return err
				}
				leases[w] = resp.GetLease()
				return nil
			}
			outcome := repoolv1.Outcome_SUCCESS
			if (w+i)%5 == 0 {
				outcome = repoolv1.Outcome_FAILURE
			}
			resp, err := c.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: outcome, Next: want})
			leases[w] = resp.GetNext().GetLease()
			if err == nil && leases[w] == nil {
				err = fmt.Errorf("no next lease: %v", resp.GetNext().GetError())
			}
			return err
		}
		// The stream side starts with no lease held: the unary side's
		// leases stay held until they expire, as a client's that went
		// away would.
		streamLeases := make([]*repoolv1.Lease, *benchClients)
		streams := make([]grpc.BidiStreamingClient[repoolv1.LeaseCall, repoolv1.LeaseReply], *benchClients)
		sctx, cancel := context.WithCancel(ctx)
		for w := range streams {
			st, err := conns[w%len(conns)].Leases(sctx)
			if err != nil {
				b.Fatal(err)
			}
			streams[w] = st
		}
		streamCycle := func(_ context.Context, w, i int) error {
			var call repoolv1.LeaseCall
			l := streamLeases[w]
			if l == nil {
				call.Call = &repoolv1.LeaseCall_Acquire{Acquire: &repoolv1.AcquireRequest{Context: contexts[i%2], TtlSeconds: 60}}
			} else {
				outcome := repoolv1.Outcome_SUCCESS
				if (w+i)%5 == 0 {
					outcome = repoolv1.Outcome_FAILURE
				}
				call.Call = &repoolv1.LeaseCall_Release{Release: &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: outcome,
					Next: &repoolv1.NextLease{Context: contexts[i%2], TtlSeconds: 60}}}
			}
			if err := streams[w].Send(&call); err != nil {
				return err
			}
			reply, err := streams[w].Recv()
			if err != nil {
				return err
			}
			if l == nil {
				streamLeases[w] = reply.GetAcquire().GetLease()
			} else {
				streamLeases[w] = reply.GetRelease().GetNext().GetLease()
			}
			if streamLeases[w] == nil {
				return fmt.Errorf("no lease: %v %v", reply.GetError(), reply.GetRelease().GetNext().GetError())
			}
			return nil
		}
		held := make([]string, *benchClients)
		theirCycle := func(cctx context.Context, w, i int) error {
			c := contexts[i%2]
			s := 0
			if (w+i)%5 != 0 {
				s = 1
			}
			// The held resource is released into the context it was
			// acquired for, as the repool side reports it for its lease's.
			prev := contexts[(i+1)%2]
			id, err := next.Run(cctx, rp.rdb, []string{"ctx:" + c, "used", "cap", "stats:" + prev, "ctx:" + prev}, held[w], s).Text()
			held[w] = id
			return err
		}
		sides := sideBySide(b, ctx, rp.rdb, "release+next (one round trip per cycle)",
			side{"repool unary", unaryCycle}, side{"repool stream", streamCycle}, side{"Redis Lua pool", theirCycle})
		cancel()
		unary, stream, redis := sides[0], sides[1], sides[2]
		b.ReportMetric(unary.rate, "repool_unary_cycles/s")
		b.ReportMetric(stream.rate, "repool_stream_cycles/s")
		b.ReportMetric(redis.rate, "redis_cycles/s")
		b.ReportMetric(unary.rate/redis.rate, "unary_ratio")
		b.ReportMetric(stream.rate/redis.rate, "ratio")
		b.ReportMetric(unary.cpu.perCycle(), "repool_unary_cpu_µs/cycle")
		b.ReportMetric(stream.cpu.perCycle(), "repool_stream_cpu_µs/cycle")
		b.ReportMetric(redis.cpu.perCycle(), "redis_cpu_µs/cycle")
	}
}

// side is one side of a side-by-side benchmark: its name and its cycle.
type side struct {
	name  string
	cycle func(ctx context.Context, worker, i int) error
}

// measured is what a side did: its cycles per second, its errors and its
// CPU cost.
type measured struct {
	rate float64
	errs int64
	cpu  cpuCost
}

// sideBySide runs the sides for bench.for each, from bench.clients
// goroutines, the last one being the Redis pool behind rdb (whose server's
// CPU counts too). The sides take turns in bench.slices slices, so that on
// a shared machine each side's figures come from the same moments of its
// life as the others', not from one stretch each. It prints their rates,
// the ratio of each repool side to Redis and each side's CPU time per
// cycle (cpuCost).
func sideBySide(b *testing.B, ctx context.Context, rdb *redis.Client, what string, sides ...side) []measured {
	b.Helper()
	slices := max(*benchSlices, 1)
	slice := *benchFor / time.Duration(slices)
	out := make([]measured, len(sides))
	firsts := make([]atomic.Pointer[error], len(sides)) // each side's first error
	for range slices {
		for i, sd := range sides {
			var r *redis.Client
			if i == len(sides)-1 {
				r = rdb
			}
			_, c, err := measureCPU(ctx, r, slice, func() (rate float64) {
				var errs int64
				rate, errs = run(*benchClients, slice, func(ctx context.Context, w, i int) error {
					err := sd.cycle(ctx, w, i)
					if err != nil && ctx.Err() == nil {
						firsts[i].CompareAndSwap(nil, &err)
					}
					return err
				})
				out[i].errs += errs
				return rate
			})
			if err != nil {
				b.Fatal(err)
			}
			out[i].cpu.process += c.process
			out[i].cpu.redis += c.redis
			out[i].cpu.cycles += c.cycles
		}
	}
	for i := range out {
		out[i].rate = out[i].cpu.cycles / (slice * time.Duration(slices)).Seconds()
	}
	theirs := out[len(out)-1]
	fmt.Printf("%s, %d clients, %v each in %d slices:", what, *benchClients, *benchFor, slices)
	for i, m := range out[:len(out)-1] {
		fmt.Printf(" %s %.0f/s (%d errors, %.1f µs CPU per cycle, ratio %.2f);", sides[i].name, m.rate, m.errs, m.cpu.perCycle(), m.rate/theirs.rate)
	}
	fmt.Printf(" %s %.0f/s (%d errors, %.1f µs CPU per cycle: clients %.1f + server %.1f)\n",
		sides[len(sides)-1].name, theirs.rate, theirs.errs, theirs.cpu.perCycle(),
		float64(theirs.cpu.process)/1e3/theirs.cpu.cycles, float64(theirs.cpu.redis)/1e3/theirs.cpu.cycles)
	// A refused call (a rate limit, a budget) makes a side's rate measure
	// the refusal: the benchmark fails (TestVsRedisBenchmarksRefuseNothing).
	var errs int64
	for i, m := range out {
		errs += m.errs
		if first := firsts[i].Load(); first != nil {
			b.Errorf("%s: %s: %d calls failed, the first with %v; a benchmark's calls must all succeed", what, sides[i].name, m.errs, *first)
		}
	}
	b.ReportMetric(float64(errs), "errors")
	return out
}

// poisson calls fn at exponentially spaced moments, rate per second on
// average (open loop: a slow server cannot slow the sender down), each call
// on its own goroutine, until ctx ends; it returns when the calls have.
func poisson(ctx context.Context, rate float64, seed uint64, fn func()) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var wg sync.WaitGroup
	defer wg.Wait()
	next := time.Now()
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
}

// sample is one of B's calls: when it started, how long it took, whether
// it failed.
type sample struct {
	start time.Time
	took  time.Duration
	err   bool
}

// phase sorts the latencies of B's calls that started in windows where
// flooding equals want, and counts their errors.
func phase(samples []sample, flooding func(time.Time) (bool, bool), want bool) ([]time.Duration, int) {
	var lat []time.Duration
	errs := 0
	for _, s := range samples {
		if f, ok := flooding(s.start); !ok || f != want {
			continue
		}
		if s.err {
			errs++
			continue
		}
		lat = append(lat, s.took)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, errs
}

func pct(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	return lat[min(len(lat)-1, int(float64(len(lat))*p))]
}

// BenchmarkNoisyNeighbour measures tenant B's latency alone and while
// tenant A floods at 10× its own limit, and prints B's p50, p99 and errors
// in both. B runs throughout at its normal rate; A's flood is switched on
// and off in alternate one-second windows (2×bench.for in all), so that
// both of B's measurements share the same moments of the machine's life,
// and B's calls are attributed to the window they started in (calls
// starting in the first 50 ms after a switch are left out). Arrivals are
// Poisson for both tenants.
func BenchmarkNoisyNeighbour(b *testing.B) {
	cfg := Config{Store: sqliteStore(b)}
	defer TuneRuntime(cfg, os.Getenv)() // as cmd/server does
	r := start(b, cfg)
	keys := map[string]string{}
	for _, tenant := range []string{"a", "b"} {
		if code := r.api(b, "POST", "/api/v1/tenants", r.op, fmt.Sprintf(`{"id":%q,"name":%q}`, tenant, tenant), nil); code != 201 {
			b.Fatalf("create tenant %s = %d", tenant, code)
		}
		var key struct{ Key string }
		if code := r.api(b, "POST", "/api/v1/tenants/"+tenant+"/keys", r.op, `{"name":"bench"}`, &key); code != 201 {
			b.Fatalf("create key = %d", code)
		}
		keys[tenant] = key.Key
		if code := r.api(b, "PUT", "/api/v1/tenants/"+tenant+"/limits", r.op, `{"rate_per_second":200,"burst":200}`, nil); code != 200 {
			b.Fatalf("put limits = %d", code)
		}
		var res []*repoolv1.Resource
		for i := 0; i < 100; i++ {
			res = append(res, &repoolv1.Resource{Id: "r" + strconv.Itoa(i), Capacity: 100})
		}
		if _, err := r.pool.Register(withKey(key.Key), &repoolv1.RegisterRequest{Resources: res}); err != nil {
			b.Fatal(err)
		}
	}
	cycle := func(key string) func() error {
		ctx := withKey(key)
		return func() error {
			l, err := r.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "search", TtlSeconds: 60})
			if err != nil {
				return err
			}
			_, err = r.pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS})
			return err
		}
	}
	// B: 50 cycles/s = 100 calls/s, half its limit. A: 2,000 cycles/s, at
	// least 2,000 calls/s (a refused Acquire has no Release), 10× its
	// limit of 200/s.
	const window, settle = time.Second, 50 * time.Millisecond
	for b.Loop() {
		windows := 2 * int(*benchFor/window)
		begin := time.Now()
		// flooding reports whether A floods at t, and whether t is far
		// enough from a switch to count.
		flooding := func(t time.Time) (bool, bool) {
			d := t.Sub(begin)
			w := int(d / window)
			return w%2 == 1, w < windows && d-time.Duration(w)*window >= settle
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(windows)*window)
		var mu sync.Mutex
		var samples []sample
		var floodRefused, floodOK atomic.Int64
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			call := cycle(keys["b"])
			poisson(ctx, 50, 1<<32, func() {
				s := time.Now()
				err := call()
				mu.Lock()
				samples = append(samples, sample{s, time.Since(s), err != nil})
				mu.Unlock()
			})
		}()
		go func() {
			defer wg.Done()
			call := cycle(keys["a"])
			// A's sender runs only in its windows: between them nothing of
			// A's wakes the machine.
			for w := 1; w < windows; w += 2 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(begin.Add(time.Duration(w) * window))):
				}
				wctx, wcancel := context.WithDeadline(ctx, begin.Add(time.Duration(w+1)*window))
				poisson(wctx, 2000, uint64(w), func() {
					if err := call(); status.Code(err) == codes.ResourceExhausted {
						floodRefused.Add(1)
					} else if err == nil {
						floodOK.Add(1)
					}
				})
				wcancel()
			}
		}()
		wg.Wait()
		cancel()
		solo, soloErr := phase(samples, flooding, false)
		noisy, noisyErr := phase(samples, flooding, true)
		b.ReportMetric(float64(pct(solo, 0.99).Microseconds()), "solo_p99_µs")
		b.ReportMetric(float64(pct(noisy, 0.99).Microseconds()), "noisy_p99_µs")
		b.ReportMetric(float64(noisyErr), "noisy_errors")
		fmt.Printf("tenant B alone:        %d cycles, p50 %v, p99 %v, errors %d\n", len(solo), pct(solo, 0.5), pct(solo, 0.99), soloErr)
		fmt.Printf("tenant B, A flooding:  %d cycles, p50 %v, p99 %v, errors %d (A: %d cycles ok, %d refused by its limit)\n",
			len(noisy), pct(noisy, 0.5), pct(noisy, 0.99), noisyErr, floodOK.Load(), floodRefused.Load())
		fmt.Printf("B p99 with A flooding / alone = %.2f\n", float64(pct(noisy, 0.99))/float64(pct(solo, 0.99)))
	}
}

// TestVsRedisBenchmarksRefuseNothing runs the side-by-side benchmarks
// briefly and fails if any of their calls failed: a side whose calls are
// refused (the tenant's rate limit, a budget) would measure the refusal.
func TestVsRedisBenchmarksRefuseNothing(t *testing.T) {
	defer func(d time.Duration, s, c int) { *benchFor, *benchSlices, *benchClients = d, s, c }(*benchFor, *benchSlices, *benchClients)
	*benchFor, *benchSlices, *benchClients = 300*time.Millisecond, 1, 16
	for name, bench := range map[string]func(*testing.B){
		"AcquireReportVsRedis":      BenchmarkAcquireReportVsRedis,
		"AcquireReleaseNextVsRedis": BenchmarkAcquireReleaseNextVsRedis,
	} {
		r := testing.Benchmark(bench)
		if r.N == 0 || r.Extra["errors"] != 0 {
			t.Errorf("Benchmark%s: %d runs, %v calls failed; want every call to succeed (its output above says which failed)", name, r.N, r.Extra["errors"])
		}
	}
}
