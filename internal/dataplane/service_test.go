package dataplane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/ratelimit"
	"github.com/repool/repool/internal/tenants"
	"github.com/repool/repool/internal/testenv"
)

// fakeAuth maps API keys to tenants.
type fakeAuth struct{ keys map[string]string }

func (f fakeAuth) APIKey(_ context.Context, k string) (auth.Principal, error) {
	if t, ok := f.keys[k]; ok {
		return auth.Principal{Tenant: t, KeyID: "key-" + t}, nil
	}
	return auth.Principal{}, auth.ErrUnauthenticated
}

func (f fakeAuth) Bearer(context.Context, string) (auth.Principal, error) {
	return auth.Principal{}, auth.ErrUnauthenticated
}

func (f fakeAuth) Claim(apiKey, bearer string) (string, auth.Verdict) { return "", auth.Unknown }

func (f fakeAuth) ClaimBearer(string) (auth.Verified, bool) { return auth.Verified{}, false }

func (f fakeAuth) BearerVerified(context.Context, auth.Verified) (auth.Principal, error) {
	return auth.Principal{}, auth.ErrUnauthenticated
}

func (f fakeAuth) IssueToken(p auth.Principal) (string, time.Time, error) {
	return "tok-" + p.Tenant, time.Unix(1e9, 0), nil
}

// kind is a kind of state countBudget counts.
type kind int

const (
	resources kind = iota
	cells
)

// countBudget is a per-tenant counter of each kind with one ceiling; its
// gate charges a tenant's pool to it, as budget.Budget's does.
type countBudget struct {
	mu      sync.Mutex
	ceiling int
	used    map[string]map[kind]int
}

func (b *countBudget) gate(t string) pool.Gate { return countGate{b, t} }

type countGate struct {
	b *countBudget
	t string
}

func (g countGate) Reserve(r, c int) error {
	g.b.mu.Lock()
	defer g.b.mu.Unlock()
	if g.b.used[g.t][resources]+r > g.b.ceiling || g.b.used[g.t][cells]+c > g.b.ceiling {
		return fmt.Errorf("ceiling %d", g.b.ceiling)
	}
	g.b.add(g.t, resources, r)
	g.b.add(g.t, cells, c)
	return nil
}

func (g countGate) Release(r, c int) {
	g.b.mu.Lock()
	g.b.add(g.t, resources, -r)
	g.b.add(g.t, cells, -c)
	g.b.mu.Unlock()
}

func (b *countBudget) add(t string, k kind, n int) {
	if b.used[t] == nil {
		b.used[t] = map[kind]int{}
	}
	b.used[t][k] += n
}

func (b *countBudget) get(t string, k kind) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used[t][k]
}

// fakeLimiter records which tenants it saw and refuses those in deny. It
// runs after authentication and before the handler: admitted, when set,
// runs there, as whatever happens to a call in flight.
type fakeLimiter struct {
	mu       sync.Mutex
	seen     []string
	deny     map[string]bool
	admitted func(tenant string)
}

func (l *fakeLimiter) Allow(_ context.Context, tenant, _ string) (ratelimit.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, tenant)
	if l.admitted != nil {
		l.admitted(tenant)
	}
	if l.deny[tenant] {
		return ratelimit.Decision{RetryAfter: 1500 * time.Millisecond}, fmt.Errorf("%w: slow down", ratelimit.ErrLimited)
	}
	return ratelimit.Decision{Allowed: true}, nil
}

type env struct {
	svc     *Service
	pools   *tenants.Registry
	budget  *countBudget // what pools are charged to
	limiter *fakeLimiter

	active atomic.Bool
	client repoolv1.PoolServiceClient
	authc  repoolv1.AuthServiceClient
}

func newEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	e := &env{
		budget:  &countBudget{ceiling: 1000, used: map[string]map[kind]int{}},
		limiter: &fakeLimiter{deny: map[string]bool{}},
	}
	// As the server makes them: each pool charged to its tenant's budget.
	e.pools = tenants.NewRegistry(func(tenant string) (*pool.Pool, error) {
		return pool.New(pool.Config{Gate: e.budget.gate(tenant)})
	})
	e.active.Store(true)
	cfg := Config{
		Pools: e.pools, Auth: fakeAuth{keys: map[string]string{"key-a": "a", "key-b": "b"}},
		Limiter: e.limiter, Limit: func(_ string, l limits.Limit) float64 {
			if l == limits.MaxStreams {
				return 2
			}
			return 1e6 // no other limit in the way
		},
		Active: func() error {
			if e.active.Load() {
				return nil
			}
			return ErrNotActive
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	g := grpc.NewServer(svc.ServerOptions()...)
	svc.Attach(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
	})
	e.client = repoolv1.NewPoolServiceClient(conn)
	e.authc = repoolv1.NewAuthServiceClient(conn)
	return e
}

func as(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
}

func wantCode(t *testing.T, call string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s = %v, want %v", call, err, want)
	}
}

// TestEventStreamHeadersMeanSubscribed: the response headers come once the
// server has subscribed to the pool, before any event, so a client that
// waits for them misses nothing it causes afterwards.
func TestEventStreamHeadersMeanSubscribed(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	for i := range 20 {
		ctx, cancel := context.WithTimeout(a, 10*time.Second)
		stream, err := e.client.SubscribeEvents(ctx, &repoolv1.SubscribeEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Header(); err != nil {
			t.Fatalf("Header() = %v", err)
		}
		id := fmt.Sprintf("r%d", i)
		if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id}}}); err != nil {
			t.Fatal(err)
		}
		ev, err := stream.Recv()
		if err != nil || ev.GetResourceId() != id {
			t.Fatalf("round %d: first event = %v, %v; want the registration of %s", i, ev, err, id)
		}
		cancel()
		// The stream cap is 2: wait for the server to count this one gone.
		testenv.Eventually(t, 5*time.Second, "a's event streams to be 0", func() bool { return e.svc.Streams("a") == 0 })
	}
}

func TestTenantsAreIsolated(t *testing.T) {
	e := newEnv(t)
	a, b := as("key-a"), as("key-b")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "ra"}}}); err != nil {
		t.Fatal(err)
	}
	subB, err := e.client.SubscribeEvents(b, &repoolv1.SubscribeEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subB.Header(); err != nil {
		t.Fatal(err)
	}
	acq, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	l := acq.GetLease()

	_, err = e.client.Acquire(b, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	wantCode(t, "B Acquire (B has no resources)", err, codes.ResourceExhausted)
	_, err = e.client.Renew(b, &repoolv1.RenewRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), TtlSeconds: 60})
	wantCode(t, "B Renew(A's lease)", err, codes.NotFound)
	_, err = e.client.Release(b, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken()})
	wantCode(t, "B Release(A's lease)", err, codes.NotFound)
	_, err = e.client.Report(b, &repoolv1.ReportRequest{ResourceId: "ra", Context: "x", Outcome: repoolv1.Outcome_FAILURE})
	wantCode(t, "B Report(A's resource)", err, codes.NotFound)
	_, err = e.client.GetResource(b, &repoolv1.GetResourceRequest{Id: "ra"})
	wantCode(t, "B GetResource(A's resource)", err, codes.NotFound)
	list, err := e.client.ListResources(b, &repoolv1.ListResourcesRequest{})
	if err != nil || len(list.GetResources()) != 0 {
		t.Fatalf("B ListResources = %v, %v; want nothing", list, err)
	}
	// A's lease is intact after B's attempts.
	if _, err := e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS}); err != nil {
		t.Fatalf("A Release(own lease) = %v", err)
	}
	// B's subscriber sees none of A's events: A registers (an event in A's
	// pool), then B registers one of its own, which must be the first thing
	// B receives.
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "ra2"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Register(b, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "rb"}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := subB.Recv()
	if err != nil || ev.GetResourceId() != "rb" {
		t.Fatalf("B's first event = %v, %v; want B's own registration of rb", ev, err)
	}
}

func TestUnauthenticatedNeverReachesLimiterOrPool(t *testing.T) {
	e := newEnv(t)
	for _, ctx := range []context.Context{context.Background(), as("wrong"), metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope")} {
		_, err := e.client.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}})
		wantCode(t, "Register(no valid credential)", err, codes.Unauthenticated)
	}
	if len(e.limiter.seen) != 0 {
		t.Fatalf("limiter saw %v for unauthenticated calls: it must run after auth", e.limiter.seen)
	}
	if len(e.pools.Tenants()) != 0 {
		t.Fatal("a pool was created for an unauthenticated call")
	}
	if _, err := e.client.Acquire(as("key-a"), &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 1}); status.Code(err) != codes.ResourceExhausted {
		t.Fatal(err)
	}
	if len(e.limiter.seen) != 1 || e.limiter.seen[0] != "a" {
		t.Fatalf("limiter saw %v, want the authenticated tenant a", e.limiter.seen)
	}
}

func TestRateLimitRefusalCarriesRetryAfter(t *testing.T) {
	e := newEnv(t)
	e.limiter.deny["a"] = true
	var trailer metadata.MD
	_, err := e.client.Register(as("key-a"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}, grpc.Trailer(&trailer))
	wantCode(t, "Register(limited)", err, codes.ResourceExhausted)
	if got := trailer.Get(repoolv1.RetryAfterKey); len(got) != 1 || got[0] != "1500" {
		t.Fatalf("trailer %s = %v, want [1500]", repoolv1.RetryAfterKey, got)
	}
	if p, ok := e.pools.Lookup("a"); ok && p.HasResource("r") {
		t.Fatal("a rate-limited Register reached the pool")
	}
	// Another tenant is not affected.
	if _, err := e.client.Register(as("key-b"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatalf("B Register while A is limited = %v", err)
	}
}

func TestBudgetGatesCreationOnly(t *testing.T) {
	e := newEnv(t)
	e.budget.ceiling = 2
	a := as("key-a")
	reg := func(ids ...string) error {
		var rs []*repoolv1.Resource
		for _, id := range ids {
			rs = append(rs, &repoolv1.Resource{Id: id})
		}
		_, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: rs})
		return err
	}
	if err := reg("r1", "r2"); err != nil {
		t.Fatal(err)
	}
	err := reg("r3")
	wantCode(t, "Register(over budget)", err, codes.ResourceExhausted)
	p, _ := e.pools.Lookup("a")
	if p.HasResource("r3") {
		t.Fatal("over-budget Register reached the pool")
	}
	if err := reg("r1", "r2", "r1"); err != nil {
		t.Fatalf("Register(existing only) = %v: reuse must pass", err)
	}
	rep := func(id, ctx string) error {
		_, err := e.client.Report(a, &repoolv1.ReportRequest{ResourceId: id, Context: ctx, Outcome: repoolv1.Outcome_SUCCESS})
		return err
	}
	for _, c := range []string{"x", "y"} {
		if err := rep("r1", c); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, "Report(third cell over budget)", rep("r2", "x"), codes.ResourceExhausted)
	if p.HasCell("r2", "x") {
		t.Fatal("over-budget Report created a cell")
	}
	if err := rep("r1", "x"); err != nil {
		t.Fatalf("Report(existing cell) = %v: reuse must pass", err)
	}
	// Release with an outcome in a new context is creation too.
	acq, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "z", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: acq.GetLease().GetLeaseId(), FencingToken: acq.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS})
	wantCode(t, "Release(outcome creating a cell over budget)", err, codes.ResourceExhausted)
	if got := e.budget.get("a", cells); got != 2 {
		t.Fatalf("cells accounted = %d, want 2", got)
	}
	if _, err := e.client.Deregister(a, &repoolv1.DeregisterRequest{ResourceIds: []string{"r1"}}); err != nil {
		t.Fatal(err)
	}
	if r, c := e.budget.get("a", resources), e.budget.get("a", cells); r != 1 || c != 0 {
		t.Fatalf("after Deregister(r1): resources %d, cells %d; want 1, 0", r, c)
	}
}

func TestStreamQuota(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(as("key-a"))
	var streams []grpc.ServerStreamingClient[repoolv1.Event]
	for i := 0; i < 2; i++ {
		s, err := e.client.SubscribeEvents(ctx, &repoolv1.SubscribeEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	testenv.Eventually(t, 5*time.Second, "a's event streams to be 2", func() bool { return e.svc.Streams("a") == 2 })
	third, err := e.client.SubscribeEvents(as("key-a"), &repoolv1.SubscribeEventsRequest{})
	if err == nil {
		_, err = third.Recv()
	}
	wantCode(t, "third SubscribeEvents", err, codes.ResourceExhausted)
	// B is not affected: its stream is admitted (the headers come only
	// once the server has subscribed it; a refusal would end the stream).
	bctx, bcancel := context.WithCancel(as("key-b"))
	defer bcancel()
	b, err := e.client.SubscribeEvents(bctx, &repoolv1.SubscribeEventsRequest{})
	if err == nil {
		_, err = b.Header()
	}
	if err != nil || e.svc.Streams("b") != 1 {
		t.Fatalf("B's SubscribeEvents with A at its cap = %v (B streams %d), want admitted", err, e.svc.Streams("b"))
	}
	cancel()
	testenv.Eventually(t, 5*time.Second, "a's event streams to be 0", func() bool { return e.svc.Streams("a") == 0 })
	_ = streams
}

func TestStandbyAnswersUnavailable(t *testing.T) {
	e := newEnv(t)
	e.active.Store(false)
	_, err := e.client.Acquire(as("key-a"), &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 5})
	wantCode(t, "Acquire on a standby", err, codes.Unavailable)
	if status.Convert(err).Message() != ErrNotActive.Error() {
		t.Fatalf("message = %q, want %q", status.Convert(err).Message(), ErrNotActive)
	}
}

func TestIssueToken(t *testing.T) {
	e := newEnv(t)
	resp, err := e.authc.IssueToken(as("key-a"), &repoolv1.IssueTokenRequest{})
	if err != nil || resp.GetToken() != "tok-a" {
		t.Fatalf("IssueToken() = %v, %v", resp, err)
	}
	_, err = e.authc.IssueToken(context.Background(), &repoolv1.IssueTokenRequest{})
	wantCode(t, "IssueToken(no key)", err, codes.Unauthenticated)
}

func TestHandlerWithoutTenantFails(t *testing.T) {
	e := newEnv(t)
	// Called directly, without the interceptors: the handler's own error,
	// which the status interceptor answers as INTERNAL.
	_, err := e.svc.Acquire(context.Background(), &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 5})
	if !errors.Is(err, errNoTenant) {
		t.Fatalf("Acquire(no principal) = %v, want errNoTenant", err)
	}
	wantCode(t, "Acquire(no principal)", toStatus(context.Background(), discard(), err), codes.Internal)
	if len(e.pools.Tenants()) != 0 {
		t.Fatal("a handler without a tenant created a pool")
	}
}

// TestTTLSecondsIsRequired: Acquire and Renew have no default lifetime;
// a missing or out-of-range ttl_seconds is INVALID_ARGUMENT naming the
// field and its range, and takes no lease.
func TestTTLSecondsIsRequired(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatal(err)
	}
	acq, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	l := acq.GetLease()
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"acquire without ttl_seconds", func() error {
			_, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x"})
			return err
		}, "invalid argument: ttl_seconds is required: the lease's lifetime, 1 to 3600 seconds"},
		{"acquire with ttl_seconds too long", func() error {
			_, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 3601})
			return err
		}, "invalid argument: ttl_seconds 3601 is outside [1, 3600]"},
		{"acquire with negative ttl_seconds", func() error {
			_, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: -5})
			return err
		}, "invalid argument: ttl_seconds -5 is outside [1, 3600]"},
		{"renew without ttl_seconds", func() error {
			_, err := e.client.Renew(a, &repoolv1.RenewRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken()})
			return err
		}, "invalid argument: ttl_seconds is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.want) {
				t.Fatalf("%s = got %v, want INVALID_ARGUMENT %q", tt.name, err, tt.want)
			}
		})
	}
	if p, ok := e.pools.Lookup("a"); !ok || p.ActiveLeases() != 1 {
		t.Errorf("active leases after the refused calls = got pool %v, want 1 lease (the first one only)", ok)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("%w: x", pool.ErrInvalidArgument), codes.InvalidArgument},
		{fmt.Errorf("%w: x", pool.ErrNotFound), codes.NotFound},
		{fmt.Errorf("%w: x", pool.ErrStaleToken), codes.FailedPrecondition},
		{fmt.Errorf("%w: x", pool.ErrExhausted), codes.ResourceExhausted},
		{fmt.Errorf("%w: x", ErrOverBudget), codes.ResourceExhausted},
		{auth.ErrUnauthenticated, codes.Unauthenticated},
		{auth.ErrSuspended, codes.PermissionDenied},
		{fmt.Errorf("%w: dial tcp: connection refused", auth.ErrUnavailable), codes.Unavailable},
		{ErrNotActive, codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.New("pq: secret detail"), codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			st := status.Convert(toStatus(context.Background(), discard(), tt.err))
			if st.Code() != tt.want {
				t.Fatalf("toStatus(%v) = %v, want %v", tt.err, st.Code(), tt.want)
			}
			if tt.want == codes.Internal && st.Message() != "internal error" {
				t.Fatalf("INTERNAL leaks %q", st.Message())
			}
			if tt.want == codes.Unavailable && tt.err != ErrNotActive && st.Message() != auth.ErrUnavailable.Error() {
				t.Fatalf("UNAVAILABLE leaks %q", st.Message())
			}
		})
	}
}

// failingJournal fails every write once armed: with err, or, when err is
// nil, by waiting for the caller's deadline. It keeps the ids of the last
// Registered write, failed or not.
type failingJournal struct {
	mu         sync.Mutex
	armed      bool
	err        error
	registered []string
}

func (j *failingJournal) set(armed bool, err error) {
	j.mu.Lock()
	j.armed, j.err = armed, err
	j.mu.Unlock()
}

func (j *failingJournal) fail(ctx context.Context) error {
	j.mu.Lock()
	armed, err := j.armed, j.err
	j.mu.Unlock()
	if !armed {
		return nil
	}
	if err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}
func (j *failingJournal) Leased(ctx context.Context, _ string, _ pool.Lease) error {
	return j.fail(ctx)
}
func (j *failingJournal) Ended(ctx context.Context, _ string, _ uint64) error { return j.fail(ctx) }
func (j *failingJournal) Swapped(ctx context.Context, _ string, _ uint64, _ pool.Lease) error {
	return j.fail(ctx)
}
func (j *failingJournal) Registered(ctx context.Context, _ string, ids []string) error {
	j.mu.Lock()
	j.registered = slices.Clone(ids)
	j.mu.Unlock()
	return j.fail(ctx)
}
func (j *failingJournal) Deregistered(ctx context.Context, _ string, _ []string) error {
	return j.fail(ctx)
}
func (j *failingJournal) Reported(ctx context.Context, _ string) error { return j.fail(ctx) }

// TestJournalFailures: a change the journal could not make durable is
// taken back and answered UNAVAILABLE "not the active server" without the
// store's text; one that waited past the caller's deadline is answered
// DEADLINE_EXCEEDED, not as a retryable UNAVAILABLE.
func TestJournalFailures(t *testing.T) {
	j := &failingJournal{}
	e := newEnv(t, func(c *Config) { c.Journal = j })
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatal(err)
	}

	j.set(true, errors.New(`pq: password authentication failed for user "repool" at 10.0.0.5`))
	_, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if status.Code(err) != codes.Unavailable || strings.Contains(status.Convert(err).Message(), "10.0.0.5") {
		t.Fatalf("Acquire with the journal failing = %v, want UNAVAILABLE without the store's text", err)
	}
	p, _ := e.pools.Pool("a")
	if p.ActiveLeases() != 0 {
		t.Fatalf("%d leases held after an unjournaled Acquire, want it taken back", p.ActiveLeases())
	}

	j.set(true, nil)
	ctx, cancel := context.WithTimeout(a, 100*time.Millisecond)
	defer cancel()
	_, err = e.client.Acquire(ctx, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Acquire whose journal write outlived the deadline = %v, want DEADLINE_EXCEEDED", err)
	}

	// A Deregister whose journal write failed is retried: the retry finds
	// nothing left to remove and must still not be acknowledged undurably.
	j.set(true, errors.New("fenced"))
	if _, err := e.client.Deregister(a, &repoolv1.DeregisterRequest{ResourceIds: []string{"r"}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Deregister with the journal failing = %v, want UNAVAILABLE", err)
	}
	if _, err := e.client.Deregister(a, &repoolv1.DeregisterRequest{ResourceIds: []string{"r"}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("retried Deregister with the journal failing = %v, want UNAVAILABLE, not an undurable OK", err)
	}

	// A report whose statistics could not be made durable (durable
	// reports) is not acknowledged.
	j.set(false, nil)
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r2"}}}); err != nil {
		t.Fatal(err)
	}
	j.set(true, errors.New("disk full"))
	_, err = e.client.Report(a, &repoolv1.ReportRequest{ResourceId: "r2", Context: "x", Outcome: repoolv1.Outcome_SUCCESS})
	if status.Code(err) != codes.Unavailable || strings.Contains(status.Convert(err).Message(), "disk") {
		t.Fatalf("Report with the journal failing = %v, want UNAVAILABLE without the store's text", err)
	}
}

// TestBadInputAtTheCeilingIsBadInput: a tenant at its budget ceiling that
// sends bad input gets the input's error, not RESOURCE_EXHAUSTED: requests
// are checked before the budget is asked.
func TestBadInputAtTheCeilingIsBadInput(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatal(err)
	}
	l, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "new-context", TtlSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	e.budget.mu.Lock()
	e.budget.ceiling = 0 // every creation is now over the ceiling
	e.budget.mu.Unlock()

	_, err = e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "ok"}, {Id: ""}}})
	wantCode(t, "Register with an empty id at the ceiling", err, codes.InvalidArgument)
	_, err = e.client.Report(a, &repoolv1.ReportRequest{ResourceId: "r", Context: "other"})
	wantCode(t, "Report without an outcome at the ceiling", err, codes.InvalidArgument)
	_, err = e.client.Report(a, &repoolv1.ReportRequest{ResourceId: "r", Context: "other", Outcome: repoolv1.Outcome(42)})
	wantCode(t, "Report with an unknown outcome at the ceiling", err, codes.InvalidArgument)
	_, err = e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken() + 1, Outcome: repoolv1.Outcome_SUCCESS})
	wantCode(t, "Release with a stale token at the ceiling", err, codes.FailedPrecondition)
	_, err = e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome(42)})
	wantCode(t, "Release with an unknown outcome at the ceiling", err, codes.InvalidArgument)
	// Reports with the lease, on its context, which has no cell yet.
	id, tok := l.GetLease().GetLeaseId(), l.GetLease().GetFencingToken()
	unknown := strconv.FormatUint(tok+1000, 10)
	for _, tt := range []struct {
		name string
		req  *repoolv1.ReportRequest
		want codes.Code
	}{
		{"a stale token", &repoolv1.ReportRequest{ResourceId: "r", Context: "new-context", Outcome: repoolv1.Outcome_SUCCESS, LeaseId: id, FencingToken: tok + 1}, codes.FailedPrecondition},
		{"an unknown lease", &repoolv1.ReportRequest{ResourceId: "r", Context: "new-context", Outcome: repoolv1.Outcome_SUCCESS, LeaseId: unknown, FencingToken: tok}, codes.NotFound},
		{"the lease of another context", &repoolv1.ReportRequest{ResourceId: "r", Context: "other", Outcome: repoolv1.Outcome_SUCCESS, LeaseId: id, FencingToken: tok}, codes.InvalidArgument},
		{"a token without a lease id", &repoolv1.ReportRequest{ResourceId: "r", Context: "new-context", Outcome: repoolv1.Outcome_SUCCESS, FencingToken: tok}, codes.InvalidArgument},
		{"an unknown resource", &repoolv1.ReportRequest{ResourceId: "nope", Context: "new-context", Outcome: repoolv1.Outcome_SUCCESS}, codes.NotFound},
	} {
		_, err = e.client.Report(a, tt.req)
		wantCode(t, "Report with "+tt.name+" at the ceiling", err, tt.want)
	}
	// The lease is untouched by all of that.
	if _, err := e.client.Renew(a, &repoolv1.RenewRequest{LeaseId: id, FencingToken: tok, TtlSeconds: 60}); err != nil {
		t.Fatalf("Renew of the lease after the refused reports = %v, want nil", err)
	}
	// A valid request that would create state is refused by the budget.
	_, err = e.client.Report(a, &repoolv1.ReportRequest{ResourceId: "r", Context: "new-context", Outcome: repoolv1.Outcome_SUCCESS, LeaseId: id, FencingToken: tok})
	wantCode(t, "Report with the lease creating a cell at the ceiling", err, codes.ResourceExhausted)
	_, err = e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS})
	wantCode(t, "Release creating a cell at the ceiling", err, codes.ResourceExhausted)
}

// TestFailedRegisterTakesBackOnlyWhatItCreated: a Register whose journal
// write fails removes the resources it created, and only those: a resource
// of the same request that another call registered (and had acknowledged)
// earlier stays, and so does its budget. The journal is asked for the
// created resources only. (No other call can create one between this
// call's look at the pool and its registration: the pool charges the
// budget and registers under one lock.)
func TestFailedRegisterTakesBackOnlyWhatItCreated(t *testing.T) {
	a := as("key-a")
	j := &failingJournal{}
	e := newEnv(t, func(c *Config) { c.Journal = j })
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "x"}}}); err != nil {
		t.Fatalf("Register(x) by the other call = %v", err)
	}
	j.set(true, errors.New("fenced"))
	_, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "x"}, {Id: "y"}}})
	wantCode(t, "Register(x, y) with the journal failing", err, codes.Unavailable)

	p, _ := e.pools.Pool("a")
	if !p.HasResource("x") {
		t.Fatal("HasResource(x) = false after the failed Register, want the other call's x kept")
	}
	if p.HasResource("y") {
		t.Fatal("HasResource(y) = true after the failed Register, want it taken back")
	}
	j.mu.Lock()
	journaled := j.registered
	j.mu.Unlock()
	if !slices.Equal(journaled, []string{"y"}) {
		t.Fatalf("Journal.Registered(ids) = %q, want [y]: the resources created", journaled)
	}
	if got := e.budget.get("a", resources); got != 1 {
		t.Fatalf("resource budget used = %d, want 1 (x)", got)
	}
}

// TestCallAdmittedBeforeTenantDeletion: a call authenticated before its
// tenant was deleted is refused as the deleted tenant's credential is, and
// leaves no pool behind.
func TestCallAdmittedBeforeTenantDeletion(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatal(err)
	}
	e.limiter.mu.Lock()
	e.limiter.admitted = func(tenant string) {
		if tenant == "a" {
			e.pools.Remove(tenant)
		}
	}
	e.limiter.mu.Unlock()

	_, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r2"}}})
	wantCode(t, "Register admitted before the tenant's deletion", err, codes.Unauthenticated)
	_, err = e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 5})
	wantCode(t, "Acquire admitted before the tenant's deletion", err, codes.Unauthenticated)
	if _, ok := e.pools.Lookup("a"); ok {
		t.Fatal("Lookup(a) found a pool: a call of the deleted tenant recreated it")
	}
	if got := e.budget.get("a", resources); got != 1 {
		// 1: the deleted pool's r, which the server's delete hook returns.
		t.Fatalf("resource budget used = %d, want 1: nothing taken after the deletion", got)
	}
	// Other tenants are not affected.
	if _, err := e.client.Register(as("key-b"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatalf("Register of another tenant = %v", err)
	}
}

// TestCallAdmittedBeforeStepDown: a call admitted before the server stepped
// down is answered UNAVAILABLE and creates no pool; once the server is
// active again (the registry reopened) the tenant is served.
func TestCallAdmittedBeforeStepDown(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	e.limiter.mu.Lock()
	e.limiter.admitted = func(string) {
		e.active.Store(false)
		e.pools.Close()
	}
	e.limiter.mu.Unlock()

	_, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}})
	wantCode(t, "Register admitted before the step-down", err, codes.Unavailable)
	if msg := status.Convert(err).Message(); msg != ErrNotActive.Error() {
		t.Fatalf("message = %q, want %q", msg, ErrNotActive)
	}
	if got := e.pools.Tenants(); len(got) != 0 {
		t.Fatalf("Tenants() = %q after the step-down, want none", got)
	}

	e.limiter.mu.Lock()
	e.limiter.admitted = nil
	e.limiter.mu.Unlock()
	e.pools.Open()
	e.active.Store(true)
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatalf("Register after the server is active again = %v", err)
	}
}

// TestBudgetCountsWhatThePoolHolds: many goroutines register, deregister,
// report on fresh contexts and release with outcomes on a few ids, with a
// ceiling below what they try to create. The pool charges and refunds its
// budget under its own lock, so at every moment the budget's count is what
// the pool holds (never above the ceiling), and at the end they are equal.
func TestBudgetCountsWhatThePoolHolds(t *testing.T) {
	e := newEnv(t)
	e.budget.mu.Lock()
	e.budget.ceiling = 8
	e.budget.mu.Unlock()
	a := as("key-a")
	ids := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"}
	p, err := e.pools.Pool("a")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() { // the ceiling holds for the pool itself, at every moment
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if res, cells := p.Len(); res > 8 || cells > 8 {
				watched <- fmt.Errorf("pool holds %d resources and %d cells, over the ceiling of 8", res, cells)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				id := ids[rng.IntN(len(ids))]
				ctx := fmt.Sprintf("c%d", rng.IntN(4))
				switch rng.IntN(4) {
				case 0:
					_, _ = e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id}, {Id: ids[rng.IntN(len(ids))]}}})
				case 1:
					_, _ = e.client.Deregister(a, &repoolv1.DeregisterRequest{ResourceIds: []string{id}})
				case 2:
					_, _ = e.client.Report(a, &repoolv1.ReportRequest{ResourceId: id, Context: ctx, Outcome: repoolv1.Outcome_SUCCESS})
				default:
					l, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: ctx, TtlSeconds: 60})
					if err == nil {
						_, _ = e.client.Release(a, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome_FAILURE})
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	res, cl := p.Len()
	if r, c := e.budget.get("a", resources), e.budget.get("a", cells); r != res || c != cl {
		t.Fatalf("budget counts %d resources and %d cells; the pool holds %d and %d", r, c, res, cl)
	}
}

// TestRetirementReachesTheStream: a resource registered with max_uses 1 is
// retired by its lease; a stream of the retired kind gets the event with
// the reason, the view says retired, and the next acquire says why.
func TestRetirementReachesTheStream(t *testing.T) {
	e := newEnv(t)
	a := as("key-a")
	ctx, cancel := context.WithTimeout(a, 10*time.Second)
	defer cancel()
	stream, err := e.client.SubscribeEvents(ctx, &repoolv1.SubscribeEventsRequest{Kinds: []repoolv1.EventKind{repoolv1.EventKind_EVENT_KIND_RETIRED}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "once", MaxUses: 1, MaxAgeSeconds: 3600}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	ev, err := stream.Recv()
	if err != nil || ev.GetKind() != repoolv1.EventKind_EVENT_KIND_RETIRED || ev.GetResourceId() != "once" || ev.GetDetail() != "max_uses 1 reached" {
		t.Fatalf("event = %v, %v; want once retired for max_uses 1", ev, err)
	}
	got, err := e.client.GetResource(a, &repoolv1.GetResourceRequest{Id: "once"})
	if r := got.GetResource(); err != nil || r.GetState() != "retired" || r.GetUses() != 1 || r.GetMaxUses() != 1 || r.GetMaxAgeSeconds() != 3600 || r.GetRegisteredAt() == nil {
		t.Fatalf("GetResource(once) = %v, %v", got, err)
	}
	_, err = e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60})
	if err == nil || !strings.Contains(err.Error(), "retired") {
		t.Fatalf("Acquire with only a retired resource = %v, want it to say retired", err)
	}
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "bad", MaxAgeSeconds: -1}}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Register(max_age_seconds -1) = %v, want INVALID_ARGUMENT", err)
	}
}
