package token

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/testenv"
)

// dial connects to a fake server's AuthService.
func dial(t *testing.T, addr string) Issuer {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient(%s) = %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return repoolv1.NewAuthServiceClient(conn)
}

// newSource returns a Source closed when the test ends.
func newSource(t *testing.T, cfg Config) *Source {
	t.Helper()
	if cfg.Provider == "" {
		cfg.Provider = "p"
	}
	if cfg.APIKey == "" {
		cfg.APIKey = fakeserver.DefaultAPIKey
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestColdConcurrentCallsIssueOneToken(t *testing.T) {
	// IssueToken answers as soon as it can: callers that arrive while the
	// flight ends must take its token too (TestSingleFlightUnderStress
	// presses on that window).
	fake := fakeserver.Start(t, fakeserver.Config{})
	s := newSource(t, Config{Issuer: dial(t, fake.Addr())})
	const callers = 1000
	var wg sync.WaitGroup
	start := make(chan struct{})
	var failed atomic.Int64
	for range callers {
		wg.Go(func() {
			<-start
			if _, err := s.Token(context.Background()); err != nil {
				failed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := fake.Calls("IssueToken"); got != 1 || failed.Load() != 0 {
		t.Fatalf("%d concurrent cold Token() calls = %d IssueToken calls and %d failures, want 1 and 0", callers, got, failed.Load())
	}
}

func TestWaiterHonoursItsOwnDeadline(t *testing.T) {
	release := make(chan struct{})
	var fake *fakeserver.Server
	fake = fakeserver.Start(t, fakeserver.Config{
		IssueToken: func(ctx context.Context, _ *repoolv1.IssueTokenRequest) (*repoolv1.IssueTokenResponse, error) {
			<-release
			return fake.Issue(ctx)
		},
	})
	s := newSource(t, Config{Issuer: dial(t, fake.Addr())})
	patient := make(chan error, 1)
	go func() {
		_, err := s.Token(context.Background())
		patient <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Token(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("Token(20ms deadline) while the fetch hangs = got %v after %v, want DeadlineExceeded at its deadline", err, time.Since(start))
	}
	close(release) // the impatient caller's departure did not cancel the shared fetch
	if err := <-patient; err != nil {
		t.Fatalf("Token() of the patient caller = %v, want a token", err)
	}
	if got := fake.Calls("IssueToken"); got != 1 {
		t.Fatalf("IssueToken calls = got %d, want 1", got)
	}
}

func TestSidecarsSharingRedis(t *testing.T) {
	addr, _ := testenv.Redis(t)
	fake := fakeserver.Start(t, fakeserver.Config{})
	issuer := dial(t, fake.Addr())
	rc := &Redis{Addr: addr}
	var sources []*Source
	for range 3 {
		sources = append(sources, newSource(t, Config{Issuer: issuer, Redis: rc}))
	}
	var wg sync.WaitGroup
	for _, s := range sources {
		for range 50 {
			wg.Go(func() {
				if _, err := s.Token(context.Background()); err != nil {
					t.Errorf("Token() = %v", err)
				}
			})
		}
	}
	wg.Wait()
	cold := fake.Calls("IssueToken")
	if cold < 1 || cold > 3 {
		t.Fatalf("3 cold sidecars sharing Redis made %d IssueToken calls, want 1 to 3", cold)
	}
	// Warm: a fourth sidecar starting now, and every further call, are
	// served by Redis and the local caches.
	late := newSource(t, Config{Issuer: issuer, Redis: rc})
	for _, s := range append(sources, late) {
		for range 10 {
			if _, err := s.Token(context.Background()); err != nil {
				t.Fatalf("Token() = %v", err)
			}
		}
	}
	if got := fake.Calls("IssueToken"); got != cold {
		t.Fatalf("IssueToken calls once warm = got %d more, want none", got-cold)
	}
}

func TestRefreshAheadMeansNoWaitAtExpiry(t *testing.T) {
	clk := clock.NewFake(time.Now())
	var (
		fake    *fakeserver.Server
		gate    = make(chan struct{})
		blocked atomic.Bool
	)
	fake = fakeserver.Start(t, fakeserver.Config{
		Clock: clk, TokenTTL: 10 * time.Minute,
		IssueToken: func(ctx context.Context, _ *repoolv1.IssueTokenRequest) (*repoolv1.IssueTokenResponse, error) {
			if blocked.Load() {
				<-gate // the refresh hangs until the test lets it go
			}
			return fake.Issue(ctx)
		},
	})
	s := newSource(t, Config{Issuer: dial(t, fake.Addr()), Clock: clk, Policy: Policy{Skew: 30 * time.Second, RefreshAt: 0.8}})
	first, err := s.Token(context.Background())
	if err != nil {
		t.Fatalf("Token() = %v", err)
	}

	// Past the refresh point the token is still served at once, even
	// though the refresh is hanging.
	blocked.Store(true)
	clk.Advance(9 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	got, err := s.Token(ctx)
	if err != nil || got.Value != first.Value {
		t.Fatalf("Token() past the refresh point while refreshing = got %v, %v; want the current token at once", got, err)
	}
	testenv.Eventually(t, 5*time.Second, "the refresh-ahead calls IssueToken", func() bool { return fake.Calls("IssueToken") == 2 })
	close(gate)
	testenv.Eventually(t, 5*time.Second, "the refreshed token is held", func() bool {
		t, _ := s.Token(context.Background())
		return t != nil && t.Value != first.Value
	})

	// At and after the first token's expiry nobody waits: the new token is
	// already there.
	clk.Advance(2 * time.Minute)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if got, err := s.Token(ctx); err != nil || got.Value == first.Value {
		t.Fatalf("Token() after the first token expired = got %v, %v; want the refreshed token at once", got, err)
	}
	if got := fake.Calls("IssueToken"); got != 2 {
		t.Fatalf("IssueToken calls = got %d, want 2", got)
	}
}

func TestUnauthenticatedRefreshesOnceAndRetriesOnce(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	s := newSource(t, Config{Issuer: dial(t, fake.Addr())})
	t.Run("a refused token is replaced and the call retried", func(t *testing.T) {
		calls := 0
		var bearers []string
		err := s.Do(context.Background(), func(ctx context.Context) error {
			calls++
			bearers = append(bearers, outgoing(ctx, "authorization"))
			if calls == 1 {
				return status.Error(codes.Unauthenticated, "token revoked")
			}
			return nil
		})
		if err != nil || calls != 2 || bearers[0] == bearers[1] {
			t.Fatalf("Do() = %v after %d calls with bearers %v; want success after 2 calls with a new token", err, calls, bearers)
		}
		if got := fake.Calls("IssueToken"); got != 2 {
			t.Fatalf("IssueToken calls = got %d, want 2 (first token, one refresh)", got)
		}
	})
	t.Run("refused twice is invalid credentials", func(t *testing.T) {
		before := fake.Calls("IssueToken")
		calls := 0
		err := s.Do(context.Background(), func(context.Context) error {
			calls++
			return status.Error(codes.Unauthenticated, "no")
		})
		if !errors.Is(err, ErrInvalidCredentials) || status.Code(err) != codes.Unauthenticated || calls != 2 {
			t.Fatalf("Do() = %v after %d calls; want ErrInvalidCredentials (UNAUTHENTICATED) after 2", err, calls)
		}
		if got := fake.Calls("IssueToken") - before; got != 1 {
			t.Fatalf("IssueToken calls = got %d, want 1 refresh", got)
		}
	})
}

func TestRefusedAPIKeyIsInvalidCredentials(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	s := newSource(t, Config{Issuer: dial(t, fake.Addr()), APIKey: "rpk_wrong"})
	called := false
	err := s.Do(context.Background(), func(context.Context) error { called = true; return nil })
	if !errors.Is(err, ErrInvalidCredentials) || called {
		t.Fatalf("Do() with a refused API key = got %v (called %v), want ErrInvalidCredentials without calling", err, called)
	}
}

// twoSidecars returns the token sources of two sidecars that share one
// Redis and one fake server, and Redis's address.
func twoSidecars(t *testing.T) (a, b *Source, fake *fakeserver.Server, redisAddr string) {
	t.Helper()
	redisAddr, _ = testenv.Redis(t)
	fake = fakeserver.Start(t, fakeserver.Config{})
	issuer := dial(t, fake.Addr())
	rc := &Redis{Addr: redisAddr}
	return newSource(t, Config{Issuer: issuer, Redis: rc}), newSource(t, Config{Issuer: issuer, Redis: rc}), fake, redisAddr
}

func TestInvalidateDeletesFromRedisOnlyTheFailingToken(t *testing.T) {
	a, b, _, addr := twoSidecars(t)
	old, err := a.Token(context.Background())
	if err != nil {
		t.Fatalf("Token() = %v", err)
	}
	// b finds old refused first and stores a new token in Redis.
	fresh, err := b.Refresh(context.Background(), old)
	if err != nil || fresh.Value == old.Value {
		t.Fatalf("Refresh() = %v, %v; want a new token", fresh, err)
	}
	// a now finds old refused too: it must not delete b's fresh token.
	a.Invalidate(context.Background(), old)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	raw, err := client.Get(context.Background(), Key("repool:", "p", fakeserver.DefaultAPIKey)).Result()
	if err != nil || !strings.Contains(raw, fresh.Value) {
		t.Fatalf("Redis entry after a stale invalidation = got %q, %v; want the fresh token %s", raw, err, fresh.Value)
	}
	if got, err := a.Token(context.Background()); err != nil || got.Value != fresh.Value {
		t.Fatalf("Token() after invalidating = got %v, %v; want the fresh token from Redis", got, err)
	}
}

func TestRedisDownServesLocally(t *testing.T) {
	addr, stop := testenv.Redis(t)
	clk := clock.NewFake(time.Now())
	fake := fakeserver.Start(t, fakeserver.Config{Clock: clk})
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	m := NewMetrics(nil)
	s := newSource(t, Config{Issuer: dial(t, fake.Addr()), Redis: &Redis{Addr: addr}, Clock: clk, Log: log, Metrics: m})
	if _, err := s.Token(context.Background()); err != nil {
		t.Fatalf("Token() = %v", err)
	}
	stop()
	// Force fetches while Redis is down: each must still get a token.
	for i := range 3 {
		clk.Advance(16 * time.Minute)
		if _, err := s.Token(context.Background()); err != nil {
			t.Fatalf("Token() #%d with Redis down = %v, want a token from IssueToken", i, err)
		}
	}
	if got := fake.Calls("IssueToken"); got != 4 {
		t.Fatalf("IssueToken calls = got %d, want 4", got)
	}
	mu.Lock()
	n := strings.Count(logs.String(), "redis token cache unreachable")
	mu.Unlock()
	if n != 1 {
		t.Fatalf("logged Redis unreachable %d times, want once per state change:\n%s", n, logs.String())
	}
	if got := counterSum(t, m, "repool_sidecar_redis_errors_total"); got < 3 {
		t.Fatalf("repool_sidecar_redis_errors_total = got %v, want at least 3", got)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestKeyHidesTheAPIKey(t *testing.T) {
	k := Key("repool:", "eu", "rpk_secret")
	if !strings.HasPrefix(k, "repool:token:eu:") || strings.Contains(k, "secret") || len(k) != len("repool:token:eu:")+16 {
		t.Fatalf("Key() = %q, want repool:token:eu:<16 hex digits>", k)
	}
	if Key("repool:", "eu", "rpk_other") == k {
		t.Fatal("Key() is the same for two API keys")
	}
}

// TestSkewLongerThanTheLifetime: a skew as long as the tokens' lifetime
// keeps back half of it instead of making every token unusable on arrival
// (which set off an IssueToken loop): one issuance, a usable token.
func TestSkewLongerThanTheLifetime(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{TokenTTL: time.Minute})
	s := newSource(t, Config{Issuer: dial(t, fake.Addr()), Policy: Policy{Skew: 2 * time.Minute}})
	tok, err := s.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(tok.usableUntil); left < 25*time.Second || left > 31*time.Second {
		t.Fatalf("token usable for %v more, want about half its 1m lifetime", left)
	}
	time.Sleep(200 * time.Millisecond) // real time: nothing to wait for; a loop would issue hundreds meanwhile
	if n := fake.Calls("IssueToken"); n != 1 {
		t.Fatalf("IssueToken calls = %d, want 1", n)
	}
	if again, err := s.Token(context.Background()); err != nil || again.Value != tok.Value {
		t.Fatalf("second Token() = %v, %v; want the cached %s", again, err, tok.Value)
	}
}

// TestRefusalRefreshSkipsRedis: after a mass revocation the token another
// sidecar left in Redis is refused too, so the one retry after a refusal
// goes to a token issued for it, not to the shared entry.
func TestRefusalRefreshSkipsRedis(t *testing.T) {
	a, b, fake, _ := twoSidecars(t)
	old, err := a.Token(context.Background()) // a holds old; Redis holds old
	if err != nil {
		t.Fatal(err)
	}
	shared, err := b.Refresh(context.Background(), old) // Redis now holds b's token
	if err != nil {
		t.Fatal(err)
	}
	fake.RevokeAll() // both are refused from now on
	tries := 0
	err = a.Do(context.Background(), func(ctx context.Context) error {
		tries++
		if v := strings.TrimPrefix(outgoing(ctx, "authorization"), "Bearer "); v == old.Value || v == shared.Value {
			return status.Error(codes.Unauthenticated, "revoked")
		}
		return nil
	})
	if err != nil || tries != 2 {
		t.Fatalf("Do() after a mass revocation = %v after %d tries, want success on the retry with a newly issued token", err, tries)
	}
}

// TestTokenExpiredOnArrival: a token that expires before it can be used
// (the sidecar's clock far ahead of the server's) is an error, and the
// source waits before it asks again instead of looping on IssueToken.
func TestTokenExpiredOnArrival(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{TokenTTL: -time.Minute})
	s := newSource(t, Config{Issuer: dial(t, fake.Addr())})
	if tok, err := s.Token(context.Background()); err == nil || !strings.Contains(err.Error(), "clocks") {
		t.Fatalf("Token() = %v, %v; want an error that names the clocks", tok, err)
	}
	time.Sleep(200 * time.Millisecond) // real time: nothing to wait for; a loop on IssueToken would show meanwhile
	if n := fake.Calls("IssueToken"); n > 2 {
		t.Fatalf("IssueToken calls in 200ms = %d, want at most 2", n)
	}
}

// outgoing returns the one value of key in ctx's outgoing metadata, ""
// if there is not exactly one.
func outgoing(ctx context.Context, key string) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(key); len(v) == 1 {
		return v[0]
	}
	return ""
}

// TestTenantRoute: the token names the tenant IssueToken answered, Do's
// calls carry it as x-repool-tenant next to the bearer, and a token shared
// through Redis keeps it; a server that names no tenant gets no entry.
func TestTenantRoute(t *testing.T) {
	t.Run("issued", func(t *testing.T) {
		fake := fakeserver.Start(t, fakeserver.Config{Tenant: "acme"})
		s := newSource(t, Config{Issuer: dial(t, fake.Addr())})
		var route, bearer string
		if err := s.Do(context.Background(), func(ctx context.Context) error {
			route, bearer = outgoing(ctx, repoolv1.TenantRouteKey), outgoing(ctx, "authorization")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if route != "acme" || !strings.HasPrefix(bearer, "Bearer tok-") {
			t.Errorf("Do()'s call metadata = got %s %q, authorization %q, want acme and a bearer", repoolv1.TenantRouteKey, route, bearer)
		}
	})
	t.Run("shared through Redis", func(t *testing.T) {
		a, b, _, _ := twoSidecars(t)
		ta, err := a.Token(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		tb, err := b.Token(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if tb.Value != ta.Value || tb.Tenant != fakeserver.DefaultTenant {
			t.Errorf("b's token from Redis = got %s tenant %q, want a's %s tenant %q", tb.Value, tb.Tenant, ta.Value, fakeserver.DefaultTenant)
		}
	})
	t.Run("no tenant named", func(t *testing.T) {
		var fake *fakeserver.Server
		fake = fakeserver.Start(t, fakeserver.Config{IssueToken: func(ctx context.Context, _ *repoolv1.IssueTokenRequest) (*repoolv1.IssueTokenResponse, error) {
			resp, err := fake.Issue(ctx)
			if resp != nil {
				resp.Tenant = ""
			}
			return resp, err
		}})
		s := newSource(t, Config{Issuer: dial(t, fake.Addr())})
		var md metadata.MD
		if err := s.Do(context.Background(), func(ctx context.Context) error {
			md, _ = metadata.FromOutgoingContext(ctx)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if v := md.Get(repoolv1.TenantRouteKey); len(v) != 0 || len(md.Get("authorization")) != 1 {
			t.Errorf("Do()'s call metadata with no tenant named = got %v, want authorization alone", md)
		}
	})
}
