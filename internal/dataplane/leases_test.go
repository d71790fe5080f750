package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/testenv"
)

// switchAuth is fakeAuth whose keys can be revoked and whose tenants can be
// suspended while streams are open.
type switchAuth struct {
	fakeAuth
	mu        sync.Mutex
	revoked   map[string]bool
	suspended map[string]bool
}

func (a *switchAuth) APIKey(ctx context.Context, k string) (auth.Principal, error) {
	p, err := a.fakeAuth.APIKey(ctx, k)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err != nil || a.revoked[k]:
		return auth.Principal{}, auth.ErrUnauthenticated
	case a.suspended[p.Tenant]:
		return auth.Principal{}, auth.ErrSuspended
	}
	return p, nil
}

func (a *switchAuth) set(m map[string]bool, k string, on bool) {
	a.mu.Lock()
	m[k] = on
	a.mu.Unlock()
}

func newSwitchEnv(t *testing.T, opts ...func(*Config)) (*env, *switchAuth) {
	sa := &switchAuth{fakeAuth: fakeAuth{keys: map[string]string{"key-a": "a", "key-a2": "a", "key-b": "b"}},
		revoked: map[string]bool{}, suspended: map[string]bool{}}
	return newEnv(t, append(opts, func(c *Config) { c.Auth = sa })...), sa
}

type leaseStream = grpc.BidiStreamingClient[repoolv1.LeaseCall, repoolv1.LeaseReply]

func openLeases(t *testing.T, e *env, key string) leaseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(as(key), 30*time.Second)
	t.Cleanup(cancel)
	st, err := e.client.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// do sends one call and returns its reply, or the status that ended the
// stream.
func do(st leaseStream, call *repoolv1.LeaseCall) (*repoolv1.LeaseReply, error) {
	if err := st.Send(call); err != nil {
		// The stream ended: the status is Recv's.
		_, rerr := st.Recv()
		return nil, rerr
	}
	return st.Recv()
}

func acquireCall(ctx string, ttl int32) *repoolv1.LeaseCall {
	return &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Acquire{Acquire: &repoolv1.AcquireRequest{Context: ctx, TtlSeconds: ttl}}}
}

func releaseCall(l *repoolv1.Lease, o repoolv1.Outcome, next *repoolv1.NextLease) *repoolv1.LeaseCall {
	return &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Release{Release: &repoolv1.ReleaseRequest{
		LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), Outcome: o, Next: next}}}
}

// wantProblem checks that reply answers a call with the error the unary
// call gives: the same code, as status and as snake-case name.
func wantProblem(t *testing.T, what string, reply *repoolv1.LeaseReply, err error, code codes.Code, name string) *repoolv1.Problem {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: stream ended with %v, want the call answered with %s and the stream going on", what, err, name)
	}
	pr := reply.GetError()
	if pr == nil || codes.Code(reply.GetStatus()) != code || pr.GetCode() != name || pr.GetMessage() == "" {
		t.Fatalf("%s: reply %v, want error %s (status %v) with a message", what, reply, name, code)
	}
	return pr
}

// TestLeasesStream: every kind of call on one stream, answered in order as
// its unary call is; a call refused for itself is answered with the unary
// call's error, and the stream goes on.
func TestLeasesStream(t *testing.T) {
	e, _ := newSwitchEnv(t)
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1"}, {Id: "r2"}}}); err != nil {
		t.Fatal(err)
	}
	st := openLeases(t, e, "key-a")
	reply, err := do(st, acquireCall("x", 60))
	l := reply.GetAcquire().GetLease()
	if err != nil || l == nil {
		t.Fatalf("acquire = %v, %v; want a lease", reply, err)
	}
	reply, err = do(st, &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Renew{Renew: &repoolv1.RenewRequest{LeaseId: l.GetLeaseId(), FencingToken: l.GetFencingToken(), TtlSeconds: 120}}})
	if err != nil || reply.GetRenew().GetLease().GetExpiresAt().AsTime().Before(l.GetExpiresAt().AsTime()) {
		t.Fatalf("renew = %v, %v; want the lease later", reply, err)
	}
	reply, err = do(st, &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Report{Report: &repoolv1.ReportRequest{ResourceId: l.GetResourceId(), Context: "x", Outcome: repoolv1.Outcome_SUCCESS}}})
	if err != nil || reply.GetReport() == nil {
		t.Fatalf("report = %v, %v; want a report reply", reply, err)
	}
	reply, err = do(st, releaseCall(l, repoolv1.Outcome_SUCCESS, &repoolv1.NextLease{Context: "x", TtlSeconds: 60}))
	next := reply.GetRelease().GetNext().GetLease()
	if err != nil || next == nil || next.GetFencingToken() <= l.GetFencingToken() {
		t.Fatalf("release with next = %v, %v; want a next lease with a larger token", reply, err)
	}

	// Refused calls: the unary call's error each, the stream going on.
	reply, err = do(st, acquireCall("x", 0))
	pr := wantProblem(t, "acquire without ttl_seconds", reply, err, codes.InvalidArgument, "invalid_argument")
	if !strings.Contains(pr.GetMessage(), "ttl_seconds") {
		t.Fatalf("message %q does not name ttl_seconds", pr.GetMessage())
	}
	reply, err = do(st, releaseCall(&repoolv1.Lease{LeaseId: "999", FencingToken: 1}, 0, nil))
	wantProblem(t, "release of an unknown lease", reply, err, codes.NotFound, "not_found")
	reply, err = do(st, releaseCall(&repoolv1.Lease{LeaseId: next.GetLeaseId(), FencingToken: next.GetFencingToken() + 1}, 0, nil))
	wantProblem(t, "release with a wrong token", reply, err, codes.FailedPrecondition, "failed_precondition")
	reply, err = do(st, releaseCall(&repoolv1.Lease{LeaseId: "not a number"}, 0, nil))
	wantProblem(t, "release of a malformed lease id", reply, err, codes.InvalidArgument, "invalid_argument")
	if reply, err = do(st, acquireCall("x", 60)); err != nil || reply.GetAcquire().GetLease() == nil {
		t.Fatalf("second acquire = %v, %v; want r's other resource", reply, err)
	}
	reply, err = do(st, acquireCall("x", 60))
	pr = wantProblem(t, "acquire with every resource leased", reply, err, codes.ResourceExhausted, "no_resource_available")
	if pr.GetWhy() != "all_leased" {
		t.Fatalf("why = %q, want all_leased", pr.GetWhy())
	}
	// An empty request of a known kind is the unary call's empty request.
	reply, err = do(st, &repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Renew{}})
	wantProblem(t, "empty renew", reply, err, codes.InvalidArgument, "invalid_argument")

	// Pipelined calls are answered in the order sent.
	for i := range 5 {
		if err := st.Send(releaseCall(&repoolv1.Lease{LeaseId: fmt.Sprint(1000 + i), FencingToken: 1}, 0, nil)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		reply, err := st.Recv()
		pr := wantProblem(t, "pipelined release", reply, err, codes.NotFound, "not_found")
		if !strings.Contains(pr.GetMessage(), fmt.Sprint(1000+i)) {
			t.Fatalf("reply %d is %q, want the answer about lease %d", i, pr.GetMessage(), 1000+i)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after CloseSend = %v, want the stream's clean end (EOF)", err)
	}
}

// TestLeasesStreamChecksEveryCall: an open stream's calls are each rate
// limited, and a revoked key, a suspended or deleted tenant and a
// step-down end the stream at its next call, with the unary call's status.
func TestLeasesStreamChecksEveryCall(t *testing.T) {
	e, sa := newSwitchEnv(t)
	if _, err := e.client.Register(as("key-a"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r", Capacity: 100}}}); err != nil {
		t.Fatal(err)
	}
	st := openLeases(t, e, "key-a")
	if _, err := do(st, acquireCall("x", 60)); err != nil {
		t.Fatal(err)
	}
	e.limiter.mu.Lock()
	e.limiter.deny["a"] = true
	e.limiter.mu.Unlock()
	reply, err := do(st, acquireCall("x", 60))
	pr := wantProblem(t, "acquire over the rate limit", reply, err, codes.ResourceExhausted, "rate_limited")
	if pr.GetRetryAfterMs() != 1500 {
		t.Fatalf("retry_after_ms = %d, want the limiter's 1500", pr.GetRetryAfterMs())
	}
	e.limiter.mu.Lock()
	e.limiter.deny["a"] = false
	e.limiter.mu.Unlock()
	if reply, err := do(st, acquireCall("x", 60)); err != nil || reply.GetAcquire() == nil {
		t.Fatalf("acquire once the limit allows = %v, %v", reply, err)
	}

	for _, c := range []struct {
		name  string
		key   string
		cause func(on bool)
		want  codes.Code
	}{
		{"revoked key", "key-a", func(on bool) { sa.set(sa.revoked, "key-a", on) }, codes.Unauthenticated},
		{"suspended tenant", "key-a", func(on bool) { sa.set(sa.suspended, "a", on) }, codes.PermissionDenied},
		{"standby", "key-a", func(on bool) { e.active.Store(!on) }, codes.Unavailable},
		{"deleted tenant", "key-b", func(on bool) {
			if on {
				e.pools.Remove("b")
			}
		}, codes.Unauthenticated},
	} {
		st := openLeases(t, e, c.key)
		if reply, err := do(st, acquireCall("x", 60)); err != nil || reply == nil {
			t.Fatalf("%s: first call = %v, %v", c.name, reply, err)
		}
		c.cause(true)
		_, err := do(st, acquireCall("x", 60))
		wantCode(t, c.name+": the next call", err, c.want)
		if _, err := st.Recv(); status.Code(err) != c.want {
			t.Fatalf("%s: Recv after the end = %v, want the stream ended with %v", c.name, err, c.want)
		}
		// A new stream is refused at open as well.
		_, err = do(openLeases(t, e, c.key), acquireCall("x", 60))
		wantCode(t, c.name+": a new stream", err, c.want)
		c.cause(false)
	}
	// Other streams of other keys go on.
	if reply, err := do(st, acquireCall("x", 60)); err != nil || reply.GetAcquire() == nil {
		t.Fatalf("the first stream after the others ended = %v, %v", reply, err)
	}
}

// TestLeasesStreamHostile: no call, an unknown kind of call, an oversized
// message and a bad credential end the stream with a clear status; a
// stream left idle holds no event stream slot and still serves later.
func TestLeasesStreamHostile(t *testing.T) {
	e, _ := newSwitchEnv(t)
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r", Capacity: 10}}}); err != nil {
		t.Fatal(err)
	}
	_, err := do(openLeases(t, e, "key-a"), &repoolv1.LeaseCall{})
	wantCode(t, "a call with no kind", err, codes.InvalidArgument)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "acquire, release, report, renew") {
		t.Fatalf("message %q does not say which calls there are", msg)
	}
	// A call of a kind this server does not know: field 99 of LeaseCall.
	unknown := &repoolv1.LeaseCall{}
	unknown.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), []byte("garbage")))
	_, err = do(openLeases(t, e, "key-a"), unknown)
	wantCode(t, "an unknown kind of call", err, codes.InvalidArgument)
	big := acquireCall("x", 60)
	big.GetAcquire().Labels = map[string]string{"k": strings.Repeat("x", 5<<20)}
	_, err = do(openLeases(t, e, "key-a"), big)
	wantCode(t, "a 5 MB call", err, codes.ResourceExhausted)
	_, err = do(openLeases(t, e, "wrong-key"), acquireCall("x", 60))
	wantCode(t, "a stream with a wrong key", err, codes.Unauthenticated)

	// Idle streams, more than the tenant's 2 event stream slots, hold
	// none; each still serves when it speaks.
	var idle []leaseStream
	for range 4 {
		idle = append(idle, openLeases(t, e, "key-a"))
	}
	sub, err := e.client.SubscribeEvents(a, &repoolv1.SubscribeEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Header(); err != nil || e.svc.Streams("a") != 1 {
		t.Fatalf("an event stream beside 4 idle lease streams: %v, %d event streams; want admitted, 1", err, e.svc.Streams("a"))
	}
	for i, st := range idle {
		if reply, err := do(st, acquireCall("x", 60)); err != nil || reply.GetAcquire() == nil {
			t.Fatalf("idle stream %d = %v, %v; want a lease", i, reply, err)
		}
	}
}

// TestLeasesStreamJournal: a stream's changes are as durable as the unary
// calls': a lease the journal did not take is taken back and ends the
// stream UNAVAILABLE without the store's text.
func TestLeasesStreamJournal(t *testing.T) {
	j := &failingJournal{}
	e, _ := newSwitchEnv(t, func(c *Config) { c.Journal = j })
	if _, err := e.client.Register(as("key-a"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
		t.Fatal(err)
	}
	st := openLeases(t, e, "key-a")
	reply, err := do(st, acquireCall("x", 60))
	if err != nil {
		t.Fatal(err)
	}
	j.set(true, errors.New(`pq: connection to 10.0.0.5 refused`))
	reply, err = do(st, releaseCall(reply.GetAcquire().GetLease(), 0, &repoolv1.NextLease{Context: "x", TtlSeconds: 60}))
	// The release stands; the next lease is answered as not granted.
	if err != nil || reply.GetRelease().GetNext().GetError().GetCode() != "unavailable" {
		t.Fatalf("release with next, the journal failing = %v, %v; want the release with next error unavailable", reply, err)
	}
	_, err = do(st, acquireCall("x", 60))
	if status.Code(err) != codes.Unavailable || strings.Contains(status.Convert(err).Message(), "10.0.0.5") {
		t.Fatalf("acquire, the journal failing = %v; want the stream ended UNAVAILABLE without the store's text", err)
	}
	p, _ := e.pools.Pool("a")
	if n := p.ActiveLeases(); n != 0 {
		t.Fatalf("%d leases held after unjournaled grants, want them taken back", n)
	}
}

// TestLeasesStreamsConcurrent: many streams and unary callers share
// capacity-limited resources; every grant is within capacity (the pool
// never counts more leases than it has room for) and at the end the pool
// holds exactly the leases the clients hold.
func TestLeasesStreamsConcurrent(t *testing.T) {
	e, _ := newSwitchEnv(t)
	a := as("key-a")
	var res []*repoolv1.Resource
	for i := range 4 {
		res = append(res, &repoolv1.Resource{Id: fmt.Sprint("r", i), Capacity: 3})
	}
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: res}); err != nil {
		t.Fatal(err)
	}
	const streams, calls = 24, 150
	held := make([]*repoolv1.Lease, streams)
	var wg sync.WaitGroup
	for w := range streams {
		wg.Go(func() {
			st := openLeases(t, e, "key-a")
			for i := range calls {
				var call *repoolv1.LeaseCall
				switch {
				case held[w] == nil:
					call = acquireCall("x", 60)
				case i%7 == 0:
					call = releaseCall(held[w], repoolv1.Outcome_FAILURE, nil)
				default:
					call = releaseCall(held[w], repoolv1.Outcome_SUCCESS, &repoolv1.NextLease{Context: "x", TtlSeconds: 60})
				}
				reply, err := do(st, call)
				if err != nil {
					t.Errorf("stream %d call %d: %v", w, i, err)
					return
				}
				switch r := reply.GetReply().(type) {
				case *repoolv1.LeaseReply_Acquire:
					held[w] = r.Acquire.GetLease()
				case *repoolv1.LeaseReply_Release:
					held[w] = r.Release.GetNext().GetLease() // nil: released, none next
					if pr := r.Release.GetNext().GetError(); pr != nil && pr.GetCode() != "no_resource_available" {
						t.Errorf("stream %d call %d: next error %v", w, i, pr)
					}
				case *repoolv1.LeaseReply_Error:
					if r.Error.GetCode() != "no_resource_available" {
						t.Errorf("stream %d call %d: %v", w, i, r.Error)
					}
				}
			}
		})
	}
	wg.Wait()
	n := 0
	for _, l := range held {
		if l != nil {
			n++
		}
	}
	p, _ := e.pools.Pool("a")
	if got := p.ActiveLeases(); got != n || got > 12 {
		t.Fatalf("pool holds %d leases, clients hold %d, capacity 12", got, n)
	}
}

// TestCallsCounted: unary answers and the calls of a Leases stream are
// counted by method and code, a stream's calls under their unary
// methods' names and the stream once when it ends.
func TestCallsCounted(t *testing.T) {
	e, _ := newSwitchEnv(t)
	a := as("key-a")
	for range 3 {
		if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r"}}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x"})
	wantCode(t, "Acquire without ttl", err, codes.InvalidArgument)
	st := openLeases(t, e, "key-a")
	if _, err := do(st, acquireCall("x", 60)); err != nil {
		t.Fatal(err)
	}
	if _, err := do(st, acquireCall("x", 60)); err != nil { // r's one slot is taken: no_resource_available
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after CloseSend = %v, want EOF", err)
	}
	want := map[[2]string]float64{
		{repoolv1.PoolService_Register_FullMethodName, "OK"}:               3,
		{repoolv1.PoolService_Acquire_FullMethodName, "InvalidArgument"}:   1,
		{repoolv1.PoolService_Acquire_FullMethodName, "OK"}:                1,
		{repoolv1.PoolService_Acquire_FullMethodName, "ResourceExhausted"}: 1,
		{repoolv1.PoolService_Leases_FullMethodName, "OK"}:                 1,
	}
	testenv.Eventually(t, 5*time.Second, "the stream's end to be counted", func() bool {
		return testutil.ToFloat64(e.svc.requests.WithLabelValues(repoolv1.PoolService_Leases_FullMethodName, "OK")) == 1
	})
	for k, n := range want {
		if got := testutil.ToFloat64(e.svc.requests.WithLabelValues(k[0], k[1])); got != n {
			t.Errorf("repool_grpc_requests_total{method=%q, code=%q} = %v, want %v", k[0], k[1], got, n)
		}
	}
}

// TestExclude: exclude on an acquire and on a release's next, unary and on
// the Leases stream: an excluded resource is not leased; after a FAILURE
// the released resource is not the next lease unless keep_failed; every
// resource excluded is no_resource_available with why all_excluded; too
// many ids are an invalid argument naming the field.
func TestExclude(t *testing.T) {
	e, _ := newSwitchEnv(t)
	a := as("key-a")
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r1", Capacity: 100}, {Id: "r2", Capacity: 100}}}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		resp, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60, Exclude: []string{"r1"}})
		if err != nil || resp.GetLease().GetResourceId() != "r2" {
			t.Fatalf("unary acquire excluding r1 = %v, %v; want r2", resp, err)
		}
	}
	_, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60, Exclude: []string{"r1", "r2"}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "excluded") {
		t.Fatalf("unary acquire excluding both = %v, want RESOURCE_EXHAUSTED naming the exclusion", err)
	}
	many := make([]string, 33)
	for i := range many {
		many[i] = fmt.Sprint("r", i)
	}
	if _, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 60, Exclude: many}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "exclude names 33 resources") {
		t.Fatalf("unary acquire excluding 33 = %v, want INVALID_ARGUMENT naming exclude", err)
	}

	st := openLeases(t, e, "key-a")
	call := acquireCall("x", 60)
	call.GetAcquire().Exclude = []string{"r2"}
	reply, err := do(st, call)
	l := reply.GetAcquire().GetLease()
	if err != nil || l.GetResourceId() != "r1" {
		t.Fatalf("stream acquire excluding r2 = %v, %v; want r1", reply, err)
	}
	call.GetAcquire().Exclude = []string{"r1", "r2"}
	reply, err = do(st, call)
	if pr := wantProblem(t, "stream acquire excluding both", reply, err, codes.ResourceExhausted, "no_resource_available"); pr.GetWhy() != "all_excluded" {
		t.Fatalf("why = %q, want all_excluded", pr.GetWhy())
	}
	for range 6 { // 3 failures each: fewer than quarantine a resource
		reply, err = do(st, releaseCall(l, repoolv1.Outcome_FAILURE, &repoolv1.NextLease{Context: "x", TtlSeconds: 60}))
		next := reply.GetRelease().GetNext().GetLease()
		if err != nil || next == nil || next.GetResourceId() == l.GetResourceId() {
			t.Fatalf("release FAILURE of %s with next = %v, %v; want the other resource", l.GetResourceId(), reply, err)
		}
		l = next
	}
	reply, err = do(st, releaseCall(l, repoolv1.Outcome_FAILURE, &repoolv1.NextLease{Context: "x", TtlSeconds: 60, KeepFailed: true, Exclude: []string{other(l.GetResourceId())}}))
	if next := reply.GetRelease().GetNext().GetLease(); err != nil || next.GetResourceId() != l.GetResourceId() {
		t.Fatalf("release FAILURE with keep_failed and the other resource excluded = %v, %v; want the failed resource again", reply, err)
	}
}

// other is the other of the two resources r1 and r2.
func other(id string) string {
	if id == "r1" {
		return "r2"
	}
	return "r1"
}

// TestLeasesStreamQuotaAndIdle: a tenant holds at most max_lease_streams
// Leases streams (one more is RESOURCE_EXHAUSTED, another tenant is not
// affected, a stream that ends gives its slot back), and a stream on which
// no call arrives for StreamIdle ends with UNAVAILABLE while a stream in
// use stays open.
func TestLeasesStreamQuotaAndIdle(t *testing.T) {
	e, _ := newSwitchEnv(t, func(c *Config) {
		others := c.Limit
		c.Limit = func(tenant string, l limits.Limit) float64 {
			if l == limits.MaxLeaseStreams {
				return 2
			}
			return others(tenant, l)
		}
		c.StreamIdle = 200 * time.Millisecond
	})
	if _, err := e.client.Register(as("key-a"), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "r", Capacity: 100}}}); err != nil {
		t.Fatal(err)
	}
	a1, a2 := openLeases(t, e, "key-a"), openLeases(t, e, "key-a2")
	for _, st := range []leaseStream{a1, a2} {
		if _, err := do(st, acquireCall("c", 30)); err != nil {
			t.Fatalf("a call on one of the tenant's 2 streams = %v, want an answer", err)
		}
	}
	_, err := do(openLeases(t, e, "key-a"), acquireCall("c", 30))
	wantCode(t, "a third Leases stream of a tenant limited to 2", err, codes.ResourceExhausted)
	if err == nil || !strings.Contains(err.Error(), "2 Leases streams") {
		t.Errorf("the refusal = %v, want it to name the limit of 2 Leases streams", err)
	}
	if _, err := do(openLeases(t, e, "key-b"), acquireCall("c", 30)); status.Code(err) == codes.ResourceExhausted {
		t.Errorf("another tenant's stream = %v, want it not refused for the first tenant's streams", err)
	}

	// a1 stays busy; a2 goes quiet and is ended within two idle periods.
	start := time.Now()
	for time.Since(start) < 700*time.Millisecond { // longer than twice StreamIdle: a2 must have been found idle
		if _, err := do(a1, acquireCall("c", 30)); err != nil {
			t.Fatalf("a call on a busy stream after %v = %v, want an answer", time.Since(start), err)
		}
		time.Sleep(20 * time.Millisecond) // a client's pace between calls
	}
	_, err = a2.Recv()
	wantCode(t, "Recv on a stream without a call for longer than StreamIdle", err, codes.Unavailable)
	testenv.Eventually(t, 5*time.Second, "the idle stream's slot to be given back", func() bool { return e.svc.LeaseStreams("a") == 1 })
	if _, err := do(openLeases(t, e, "key-a"), acquireCall("c", 30)); err != nil {
		t.Errorf("a new stream once the idle one ended = %v, want an answer", err)
	}
}

// TestAffinity: an affinity key on an acquire and on a release's next,
// unary and on the Leases stream: the same key gets the same resource
// (rebound false) while it succeeds, another one (rebound true) after a
// FAILURE, and a bad key or binding lifetime is an invalid argument naming
// the field.
func TestAffinity(t *testing.T) {
	e, _ := newSwitchEnv(t)
	a := as("key-a")
	var rs []*repoolv1.Resource
	for i := range 8 {
		rs = append(rs, &repoolv1.Resource{Id: fmt.Sprint("r", i), Capacity: 100})
	}
	if _, err := e.client.Register(a, &repoolv1.RegisterRequest{Resources: rs}); err != nil {
		t.Fatal(err)
	}
	first, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "login", TtlSeconds: 60, Affinity: "alice", AffinityTtlSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	bound := first.GetLease().GetResourceId()
	for range 20 {
		resp, err := e.client.Acquire(a, &repoolv1.AcquireRequest{Context: "login", TtlSeconds: 60, Affinity: "alice"})
		if err != nil || resp.GetLease().GetResourceId() != bound || resp.GetLease().GetRebound() {
			t.Fatalf("unary acquire with key alice = %v, %v; want %s, not rebound", resp, err, bound)
		}
	}
	for _, tc := range []struct {
		req  *repoolv1.AcquireRequest
		want string
	}{
		{&repoolv1.AcquireRequest{Context: "login", TtlSeconds: 60, Affinity: strings.Repeat("k", 257)}, "affinity key is 257 bytes"},
		{&repoolv1.AcquireRequest{Context: "login", TtlSeconds: 60, Affinity: "k", AffinityTtlSeconds: 86401}, "affinity_ttl_seconds 86401 is outside [1, 86400]"},
		{&repoolv1.AcquireRequest{Context: "login", TtlSeconds: 60, AffinityTtlSeconds: 60}, "affinity_ttl_seconds without affinity"},
	} {
		if _, err := e.client.Acquire(a, tc.req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("unary acquire %q = %v, want INVALID_ARGUMENT %q", tc.want, err, tc.want)
		}
	}

	st := openLeases(t, e, "key-a")
	call := acquireCall("login", 60)
	call.GetAcquire().Affinity = "bob"
	reply, err := do(st, call)
	l := reply.GetAcquire().GetLease()
	if err != nil || l == nil {
		t.Fatalf("stream acquire with key bob = %v, %v", reply, err)
	}
	next := &repoolv1.NextLease{Context: "login", TtlSeconds: 60, Affinity: "bob"}
	for range 5 {
		reply, err = do(st, releaseCall(l, repoolv1.Outcome_SUCCESS, next))
		n := reply.GetRelease().GetNext().GetLease()
		if err != nil || n.GetResourceId() != l.GetResourceId() || n.GetRebound() {
			t.Fatalf("stream release SUCCESS with next under key bob = %v, %v; want %s again", reply, err, l.GetResourceId())
		}
		l = n
	}
	reply, err = do(st, releaseCall(l, repoolv1.Outcome_FAILURE, next))
	n := reply.GetRelease().GetNext().GetLease()
	if err != nil || n.GetResourceId() == l.GetResourceId() || !n.GetRebound() {
		t.Fatalf("stream release FAILURE with next under key bob = %v, %v; want another resource than %s, rebound", reply, err, l.GetResourceId())
	}
	call.GetAcquire().Affinity = "bob"
	reply, err = do(st, call)
	if got := reply.GetAcquire().GetLease(); err != nil || got.GetResourceId() != n.GetResourceId() || got.GetRebound() {
		t.Fatalf("stream acquire with key bob after the rebind = %v, %v; want %s", reply, err, n.GetResourceId())
	}
	bad := &repoolv1.NextLease{Context: "login", TtlSeconds: 60, Affinity: "bob", AffinityTtlSeconds: -1}
	reply, err = do(st, releaseCall(n, repoolv1.Outcome_SUCCESS, bad))
	wantProblem(t, "stream release with next.affinity_ttl_seconds -1", reply, err, codes.InvalidArgument, "invalid_argument")
}
