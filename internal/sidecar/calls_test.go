package sidecar_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
	"github.com/repool/repool/internal/testenv"
)

func TestColdCallsIssueOneToken(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	pc := fast(fake)
	// A thousand calls at once starve two race-instrumented CPUs for
	// seconds: neither the call deadline, nor the one-second connect timeout
	// (which once closed the connection before the server's preface
	// arrived, under a full CI run), nor the token fetch's 5 s (which the
	// one IssueToken outlasted with both cores busy, load 20: 20 calls
	// failed and the breaker refused the rest) may be what this test
	// measures.
	pc.Timeout = time.Minute
	pc.Token.IssueTimeout = time.Minute
	// Nor the sidecar's 200 ms bound on a TCP connect, which a CI run with
	// other packages beside it outlasted on loopback (the connect "timed
	// out", the thousand calls failed and the breaker opened).
	patient := grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: time.Minute})
	patientDial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
	cfg := one("p", pc)
	cfg.HTTP.WriteTimeout = 2 * pc.Timeout // the answers must be written after the calls
	h := start(t, cfg, sidecar.Options{DialOptions: []grpc.DialOption{patient, patientDial}})
	const calls = 1000
	var wg sync.WaitGroup
	var failed atomic.Int64
	var mu sync.Mutex
	seen := map[string]int{}
	gate := make(chan struct{})
	for range calls {
		wg.Go(func() {
			<-gate
			if r := h.acquire("p"); r.status != 200 {
				failed.Add(1)
				mu.Lock()
				seen[r.raw]++
				mu.Unlock()
			}
		})
	}
	close(gate)
	wg.Wait()
	if got := fake.Calls("IssueToken"); got != 1 || failed.Load() != 0 {
		t.Fatalf("%d concurrent cold calls = %d IssueToken calls and %d failures (%v), want exactly 1 and 0", calls, got, failed.Load(), seen)
	}
	if got := h.metric("repool_sidecar_token_lookups_total", map[string]string{"tier": "issue"}); got != 1 {
		t.Fatalf("token lookups served by IssueToken = got %v, want 1", got)
	}
}

func TestThreeSidecarsShareRedis(t *testing.T) {
	addr, _ := testenv.Redis(t)
	fake := fakeserver.Start(t, fakeserver.Config{})
	cfg := one("p", fast(fake))
	cfg.Redis = &config.Redis{Redis: token.Redis{Addr: addr}}
	var hs []*harness
	for range 3 {
		hs = append(hs, start(t, cfg, sidecar.Options{}))
	}
	var wg sync.WaitGroup
	for _, h := range hs {
		for range 20 {
			wg.Go(func() {
				if r := h.acquire("p"); r.status != 200 {
					t.Errorf("acquire = %d %s", r.status, r.raw)
				}
			})
		}
	}
	wg.Wait()
	cold := fake.Calls("IssueToken")
	if cold < 1 || cold > 3 {
		t.Fatalf("3 cold sidecars sharing Redis = %d IssueToken calls, want 1 to 3", cold)
	}
	hs = append(hs, start(t, cfg, sidecar.Options{})) // a fourth joins warm
	for _, h := range hs {
		for range 5 {
			if r := h.acquire("p"); r.status != 200 {
				t.Fatalf("acquire = %d %s", r.status, r.raw)
			}
		}
	}
	if got := fake.Calls("IssueToken"); got != cold {
		t.Fatalf("warm sidecars made %d more IssueToken calls, want none", got-cold)
	}
	if got := hs[3].metric("repool_sidecar_token_lookups_total", map[string]string{"tier": "redis"}); got != 1 {
		t.Fatalf("the fourth sidecar's tokens from Redis = got %v, want 1", got)
	}
}

func TestRefusedTokenIsRefreshedAndRetriedOnce(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	if r := h.acquire("p"); r.status != 200 {
		t.Fatalf("acquire = %d %s", r.status, r.raw)
	}
	fake.RevokeAll() // the server stops accepting the sidecar's token
	if r := h.acquire("p"); r.status != 200 {
		t.Fatalf("acquire after the token was revoked = %d %s, want 200", r.status, r.raw)
	}
	if got, want := fake.Calls("IssueToken"), int64(2); got != want {
		t.Fatalf("IssueToken calls = got %d, want %d (one refresh)", got, want)
	}
	if got, want := fake.Calls("Acquire"), int64(3); got != want {
		t.Fatalf("Acquire calls = got %d, want %d (one retry)", got, want)
	}
}

func TestInvalidCredentialsLeaveTheBreakerClosed(t *testing.T) {
	tests := []struct {
		name string
		fake fakeserver.Config
	}{
		{"API key refused", fakeserver.Config{APIKey: "rpk_another"}},
		{"every token refused", fakeserver.Config{Acquire: func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			return nil, status.Error(codes.Unauthenticated, "unauthenticated")
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakeserver.Start(t, tt.fake)
			pc := fast(fake)
			pc.Breaker.MinRequests = 5 // 10 failures would trip it
			h := start(t, one("p", pc), sidecar.Options{})
			for range 10 {
				r := h.acquire("p")
				if r.status != 502 || r.errCode() != "invalid_credentials" || r.header.Get("X-Repool-Fast-Fail") != "" {
					t.Fatalf("acquire with invalid credentials = %d %s (fast-fail %q), want 502 invalid_credentials",
						r.status, r.raw, r.header.Get("X-Repool-Fast-Fail"))
				}
			}
			if b := h.breaker("p"); b["state"] != "closed" {
				t.Fatalf("breaker after 10 invalid-credential calls = %v, want closed", b)
			}
		})
	}
}

// failing returns an Acquire handler that fails with the given errors, one
// per call, then succeeds.
func failing(errs ...error) func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
	var n atomic.Int64
	return func(ctx context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
		if i := int(n.Add(1)) - 1; i < len(errs) {
			return nil, errs[i]
		}
		return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "l1", ResourceId: "r1", Context: req.GetContext(), FencingToken: 1 << 60, ExpiresAt: timestamppb.Now()}}, nil
	}
}

func TestCallOutcomes(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "no active server")
	tests := []struct {
		name       string
		acquire    func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error)
		timeout    time.Duration
		wantStatus int
		wantCode   string
		wantFast   string
		wantCalls  int64
	}{
		{name: "UNAVAILABLE is retried, then succeeds", acquire: failing(unavailable, unavailable),
			wantStatus: 200, wantCalls: 3},
		{name: "UNAVAILABLE past max_retries fails fast", acquire: failing(unavailable, unavailable, unavailable, unavailable),
			wantStatus: 503, wantCode: "unavailable", wantFast: "upstream", wantCalls: 3},
		{name: "INTERNAL is not retried", acquire: failing(status.Error(codes.Internal, "bug")),
			wantStatus: 502, wantCode: "internal", wantFast: "upstream", wantCalls: 1},
		{name: "DEADLINE_EXCEEDED is not retried", acquire: failing(status.Error(codes.DeadlineExceeded, "slow store")),
			wantStatus: 504, wantCode: "deadline_exceeded", wantFast: "timeout", wantCalls: 1},
		// The handler holds the call until its deadline, so the timeout is
		// the test's length; a second leaves room for the call to reach the
		// server (on a new Leases stream: a connection, TLS-free here, and a
		// stream) on a busy machine, where 50 ms once did not.
		{name: "our own timeout is not retried", timeout: time.Second,
			acquire: func(ctx context.Context, _ *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
				<-ctx.Done()
				return nil, status.Error(codes.Unavailable, "too late")
			},
			wantStatus: 504, wantCode: "deadline_exceeded", wantFast: "timeout", wantCalls: 1},
		{name: "NOT_FOUND", acquire: failing(status.Error(codes.NotFound, "no resource")),
			wantStatus: 404, wantCode: "not_found", wantCalls: 1},
		{name: "INVALID_ARGUMENT", acquire: failing(status.Error(codes.InvalidArgument, "ttl")),
			wantStatus: 400, wantCode: "invalid_argument", wantCalls: 1},
		{name: "PERMISSION_DENIED", acquire: failing(status.Error(codes.PermissionDenied, "suspended")),
			wantStatus: 403, wantCode: "permission_denied", wantCalls: 1},
		{name: "FAILED_PRECONDITION", acquire: failing(status.Error(codes.FailedPrecondition, "stale token")),
			wantStatus: 409, wantCode: "failed_precondition", wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakeserver.Start(t, fakeserver.Config{Acquire: tt.acquire})
			pc := fast(fake)
			if tt.timeout > 0 {
				pc.Timeout = tt.timeout
			}
			h := start(t, one("p", pc), sidecar.Options{})
			r := h.acquire("p")
			if r.status != tt.wantStatus || r.errCode() != tt.wantCode || r.header.Get("X-Repool-Fast-Fail") != tt.wantFast {
				t.Fatalf("acquire = %d %s (fast-fail %q), want %d %q (fast-fail %q)",
					r.status, r.raw, r.header.Get("X-Repool-Fast-Fail"), tt.wantStatus, tt.wantCode, tt.wantFast)
			}
			if got := fake.Calls("Acquire"); got != tt.wantCalls {
				t.Fatalf("Acquire calls upstream = got %d, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestRateLimitCarriesRetryAfter(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{
		Acquire: func(ctx context.Context, _ *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			grpc.SetTrailer(ctx, metadata.Pairs("retry-after-ms", "1500"))
			return nil, status.Error(codes.ResourceExhausted, "rate limited")
		},
	})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	r := h.acquire("p")
	if r.status != 429 || r.errCode() != "resource_exhausted" || r.header.Get("Retry-After") != "2" || r.retryAfterMS() != 1500 {
		t.Fatalf("rate-limited acquire = %d %s (Retry-After %q), want 429 resource_exhausted, Retry-After 2, retry_after_ms 1500",
			r.status, r.raw, r.header.Get("Retry-After"))
	}
	if got := fake.Calls("Acquire"); got != 1 {
		t.Fatalf("Acquire calls = got %d, want 1 (not retried)", got)
	}
}

func TestBreakerOpensAtTheThreshold(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{
		Acquire: func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			return nil, status.Error(codes.Internal, "broken")
		},
	})
	pc := fast(fake)
	// gobreaker's own wall clock: long enough that the breaker is still open
	// for every assertion below however slow the calls. Half-open is
	// resilience.TestBreakerHalfOpen's.
	pc.Breaker.OpenTimeout = time.Minute
	h := start(t, one("p", pc), sidecar.Options{})
	for i := range 20 {
		if r := h.acquire("p"); r.status != 502 {
			t.Fatalf("call %d = %d %s, want 502", i, r.status, r.raw)
		}
	}
	r := h.acquire("p")
	ms := r.retryAfterMS()
	if r.status != 503 || r.errCode() != "circuit_open" || r.header.Get("X-Repool-Fast-Fail") != "circuit-open" ||
		ms <= 0 || ms > 60_000 || r.header.Get("Retry-After") != strconv.Itoa((int(ms)+999)/1000) {
		t.Fatalf("call 21 = %d %s (headers %v), want 503 circuit_open with retry_after_ms in (0, 60000] and Retry-After its seconds rounded up", r.status, r.raw, r.header)
	}
	if got := fake.Calls("Acquire"); got != 20 {
		t.Fatalf("Acquire calls upstream = got %d, want 20 (the rejected call never left)", got)
	}
	b := h.breaker("p")
	if b["state"] != "open" || b["last_trip"] == nil || b["trips"] != 1.0 {
		t.Fatalf("breaker = %v, want open with one trip and its reason", b)
	}
	if got := h.metric("repool_sidecar_fast_fails_total", map[string]string{"reason": "circuit-open"}); got != 1 {
		t.Fatalf("circuit-open fast fails = got %v, want 1", got)
	}
	if got := h.metric("repool_sidecar_breaker_transitions_total", map[string]string{"from": "closed", "to": "open"}); got != 1 {
		t.Fatalf("closed → open transitions = got %v, want 1", got)
	}
}

func TestOneProviderOpenWhileAnotherServes(t *testing.T) {
	bad := fakeserver.Start(t, fakeserver.Config{Acquire: func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
		return nil, status.Error(codes.Internal, "broken")
	}})
	good := fakeserver.Start(t, fakeserver.Config{})
	h := start(t, config.Config{Providers: map[string]config.Provider{"a": fast(bad), "b": fast(good)}}, sidecar.Options{})
	for range 20 {
		h.acquire("a")
	}
	if r := h.acquire("a"); r.errCode() != "circuit_open" {
		t.Fatalf("provider a = %d %s, want circuit_open", r.status, r.raw)
	}
	for range 5 {
		if r := h.acquire("b"); r.status != 200 {
			t.Fatalf("provider b while a is open = %d %s, want 200", r.status, r.raw)
		}
	}
	if a, b := h.breaker("a"), h.breaker("b"); a["state"] != "open" || b["state"] != "closed" {
		t.Fatalf("breakers = a %v, b %v; want a open, b closed", a["state"], b["state"])
	}
}

// TestSilentProviderFailsFast: a provider that answers nothing holds at
// most the bulkhead's min_in_flight (4) calls; the next ones fail once it
// has answered nothing for slow_after, long before the 4 time out (503,
// fast-fail bulkhead-full, no attempt made), and once those timeouts came in a row
// the breaker is open. Default breaker policy otherwise.
func TestSilentProviderFailsFast(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{Acquire: func(ctx context.Context, _ *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
		<-ctx.Done() // silent until the sidecar's deadline
		return nil, ctx.Err()
	}})
	pc := fast(fake)
	pc.Timeout = time.Second
	pc.Breaker = resilience.BreakerPolicy{OpenTimeout: time.Minute} // the defaults otherwise
	pc.Bulkhead = resilience.BulkheadPolicy{}                       // the default bulkhead
	h := start(t, one("p", pc), sidecar.Options{})
	hung := make(chan response, 4)
	for range 4 {
		go func() { hung <- h.acquire("p") }()
	}
	testenv.Eventually(t, 10*time.Second, "4 calls to reach the silent provider", func() bool { return fake.Calls("Acquire") >= 4 })
	r := h.acquire("p")
	if r.status != 503 || r.header.Get("X-Repool-Fast-Fail") != "bulkhead-full" || len(hung) != 0 || fake.Calls("Acquire") != 4 {
		t.Fatalf("5th call with 4 hanging = %d %s (fast-fail %q, %d returned, %d attempts), want 503 bulkhead-full before the 4 return, no attempt",
			r.status, r.raw, r.header.Get("X-Repool-Fast-Fail"), len(hung), fake.Calls("Acquire"))
	}
	if got := h.metric("repool_sidecar_bulkhead_rejections_total", nil); got != 1 {
		t.Fatalf("bulkhead rejections = %v, want 1", got)
	}
	for range 4 {
		if r := <-hung; r.status != 504 {
			t.Fatalf("a hanging call = %d %s, want 504", r.status, r.raw)
		}
	}
	if b := h.breaker("p"); b["state"] != "open" {
		t.Fatalf("breaker after 4 timeouts in a row = %v, want open", b)
	}
	if r := h.acquire("p"); r.errCode() != "circuit_open" || fake.Calls("Acquire") != 4 {
		t.Fatalf("call after the trip = %d %s, want circuit_open without an attempt", r.status, r.raw)
	}
}

func TestTotalFailureIsBoundedByTheRetryBudget(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{Acquire: func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
		return nil, status.Error(codes.Unavailable, "down")
	}})
	pc := fast(fake)
	pc.Breaker.MinRequests = 1 << 30 // never trips: the budget alone bounds the load
	pc.RetryBudget.Ratio = 0.2
	pc.RetryBudget.MinPerSecond = 1
	pc.RetryBudget.Window = 10 * time.Second
	// The window does not slide during the test; the retrier's waits (1 to
	// 2 ms) pass on real time.
	h := start(t, one("p", pc), sidecar.Options{Clock: frozenClock{at: time.Now()}})
	const calls = 300
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range calls / 10 {
				if r := h.acquire("p"); r.status != 503 {
					t.Errorf("acquire = %d %s, want 503", r.status, r.raw)
				}
			}
		})
	}
	wg.Wait()
	// Budget: max(20% of calls, floor 1/s × 10s) retries in the window.
	budget := max(0.2*calls, 1*10)
	if got, limit := fake.Calls("Acquire"), int64(calls+budget); got > limit {
		t.Fatalf("%d calls under total failure reached upstream %d times, want at most %d ((1 + 0.2) × calls)", calls, got, limit)
	}
	if got := h.metric("repool_sidecar_retry_budget_refusals_total", nil); got == 0 {
		t.Fatalf("retry budget refusals = 0, want some")
	}
}

func TestRedisKilledMidRun(t *testing.T) {
	addr, stopRedis := testenv.Redis(t)
	clk := clock.NewFake(time.Now())
	fake := fakeserver.Start(t, fakeserver.Config{Clock: clk, TokenTTL: 10 * time.Minute})
	cfg := one("p", fast(fake))
	cfg.Redis = &config.Redis{Redis: token.Redis{Addr: addr}}
	h := start(t, cfg, sidecar.Options{Clock: clk})
	for range 5 {
		if r := h.acquire("p"); r.status != 200 {
			t.Fatalf("acquire = %d %s", r.status, r.raw)
		}
	}
	stopRedis()
	for i := range 3 {
		clk.Advance(11 * time.Minute) // every token expires: each round needs a new one
		for range 5 {
			if r := h.acquire("p"); r.status != 200 {
				t.Fatalf("acquire in round %d with Redis down = %d %s, want 200", i, r.status, r.raw)
			}
		}
	}
	if got := h.metric("repool_sidecar_redis_errors_total", nil); got == 0 {
		t.Fatal("repool_sidecar_redis_errors_total = 0 with Redis down, want errors counted")
	}
}
