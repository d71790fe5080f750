package sidecar_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/sidecar/leases"
	"github.com/repool/repool/internal/testenv"
)

// TestCallsRideTheLeasesStream: a server that offers the Leases stream
// gets the sidecar's Acquire, Release, Report and Renew on at most
// leases.DefaultStreams streams, none as a unary call, whatever the
// callers' concurrency.
func TestCallsRideTheLeasesStream(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{Leases: true})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	const callers, each = 16, 8
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				if r := h.acquire("p"); r.status != 200 {
					t.Errorf("acquire = %d %s", r.status, r.raw)
				}
			}
		})
	}
	wg.Wait()
	for _, c := range []struct{ method, path, body string }{
		{"Release", "/v1/providers/p/leases/lease-1/release", `{"fencing_token":"1","outcome":"SUCCESS"}`},
		{"Report", "/v1/providers/p/reports", `{"resource_id":"r1","context":"search","outcome":"SUCCESS"}`},
		{"Renew", "/v1/providers/p/leases/lease-1/renew", `{"fencing_token":"1","ttl_seconds":30}`},
	} {
		if r := h.do("POST", c.path, c.body); r.status != 200 {
			t.Errorf("POST %s = %d %s", c.path, r.status, r.raw)
		}
		if got := fake.StreamCalls(c.method); got != 1 {
			t.Errorf("%s calls on the stream = %d, want 1", c.method, got)
		}
	}
	if got, all := fake.StreamCalls("Acquire"), fake.Calls("Acquire"); got != callers*each || all != got {
		t.Errorf("Acquire calls = %d on the stream of %d in all, want %d, every one on the stream", got, all, callers*each)
	}
	if n := fake.Calls("Leases"); n < 1 || n > leases.DefaultStreams {
		t.Errorf("Leases streams opened = %d, want 1 to %d", n, leases.DefaultStreams)
	}
}

// TestLeasesStreamAnswersAsUnary: a call refused for itself is answered
// through a stream exactly as through a unary call: the same HTTP status
// and body (no_resource_available with its why and frees_at,
// rate_limited with the server's retry-after, over_budget, not_found).
func TestLeasesStreamAnswersAsUnary(t *testing.T) {
	freesAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	refusals := map[string]error{
		"no resource": withInfo(codes.ResourceExhausted, "no resource is free", repoolv1.ReasonNoResourceAvailable,
			map[string]string{repoolv1.ErrorInfoWhy: "all_leased", repoolv1.ErrorInfoFreesAt: freesAt}),
		"rate limited": withInfo(codes.ResourceExhausted, "rate limited", repoolv1.ReasonRateLimited,
			map[string]string{repoolv1.ErrorInfoRetryAfterMS: "1500"}),
		"over budget": withInfo(codes.ResourceExhausted, "over budget", repoolv1.ReasonOverBudget, nil),
		"not found":   status.Error(codes.NotFound, "no such lease"),
		"fencing":     status.Error(codes.FailedPrecondition, "stale fencing token"),
	}
	for name, refusal := range refusals {
		t.Run(name, func(t *testing.T) {
			answers := map[bool]response{}
			for _, stream := range []bool{false, true} {
				fake := fakeserver.Start(t, fakeserver.Config{Leases: stream,
					Acquire: func(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
						return nil, refusal
					}})
				h := start(t, one("p", fast(fake)), sidecar.Options{})
				answers[stream] = h.acquire("p")
				if got := fake.StreamCalls("Acquire"); (got == 1) != stream {
					t.Fatalf("stream %v: Acquire calls on the stream = %d", stream, got)
				}
			}
			unary, streamed := answers[false], answers[true]
			if streamed.status != unary.status || streamed.raw != unary.raw || streamed.header.Get("Retry-After") != unary.header.Get("Retry-After") {
				t.Errorf("through the stream: %d %s (Retry-After %q); unary: %d %s (Retry-After %q); want the same",
					streamed.status, streamed.raw, streamed.header.Get("Retry-After"), unary.status, unary.raw, unary.header.Get("Retry-After"))
			}
		})
	}
}

func withInfo(c codes.Code, msg, reason string, md map[string]string) error {
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Domain: repoolv1.ErrorDomain, Reason: reason, Metadata: md})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// TestLeasesStreamBreakIsRetried: a stream that breaks answers the calls
// it had not answered with UNAVAILABLE, which the sidecar retries on a new
// stream; every lease the server granted reaches exactly one caller. It
// breaks as a server that steps down ends it (UNAVAILABLE), and as a
// proxy resets it when the server behind it dies (RST_STREAM, which gRPC
// reads as INTERNAL: once answered to a backend as a 502 when HAProxy's
// server was killed in test/e2e TestGroups).
func TestLeasesStreamBreakIsRetried(t *testing.T) {
	for _, end := range []error{
		status.Error(codes.Unavailable, "this server is not the active one"),
		status.Error(codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR"),
	} {
		t.Run(status.Code(end).String(), func(t *testing.T) { leasesStreamBreakIsRetried(t, end) })
	}
}

func leasesStreamBreakIsRetried(t *testing.T, end error) {
	var n, granted atomic.Int64
	fake := fakeserver.Start(t, fakeserver.Config{Leases: true, EndsStream: []codes.Code{codes.Internal},
		Acquire: func(_ context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			if k := n.Add(1); k == 10 || k == 40 {
				return nil, end
			}
			granted.Add(1)
			return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "l", ResourceId: "r1", FencingToken: 1, ExpiresAt: timestamppb.Now()}}, nil
		}})
	pc := fast(fake)
	pc.Retry.MaxRetries = 3
	h := start(t, one("p", pc), sidecar.Options{})
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if r := h.acquire("p"); r.status == 200 {
					ok.Add(1)
				} else {
					t.Errorf("acquire = %d %s, want 200 (retried)", r.status, r.raw)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 80 || granted.Load() != 80 {
		t.Errorf("answered 200: %d, leases granted: %d; want 80 and 80 (no lease lost, none granted twice)", ok.Load(), granted.Load())
	}
	if s := fake.Calls("Leases"); s < 2 {
		t.Errorf("Leases streams opened = %d, want at least 2 (a new one after the break)", s)
	}
	if got := fake.StreamCalls("Acquire"); got != n.Load() {
		t.Errorf("Acquire calls on the stream = %d of %d, want all", got, n.Load())
	}
}

// TestLeasesStreamNotOfferedFallsBack: a server without Leases
// (UNIMPLEMENTED) gets unary calls, after one try of the stream.
func TestLeasesStreamNotOfferedFallsBack(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	h := start(t, one("p", fast(fake)), sidecar.Options{})
	for range 20 {
		if r := h.acquire("p"); r.status != 200 {
			t.Fatalf("acquire = %d %s", r.status, r.raw)
		}
	}
	if got := fake.Calls("Acquire"); got != 20 {
		t.Errorf("Acquire calls = %d, want 20 (unary)", got)
	}
	if s := fake.Calls("Leases"); s != 1 {
		t.Errorf("Leases streams tried = %d, want 1 (then unary for a while)", s)
	}
}

// TestLeasesStreamDeadline: a streamed call's deadline (the provider's
// timeout) ends its wait as it ends a unary call's, with the same answer,
// though the server, which sees no deadline per call on a stream, does
// it; the lease it then grants is released, not left to expire.
func TestLeasesStreamDeadline(t *testing.T) {
	answers := map[bool]response{}
	for _, stream := range []bool{false, true} {
		unblock := make(chan struct{})
		var first atomic.Bool
		fake := fakeserver.Start(t, fakeserver.Config{Leases: stream,
			Acquire: func(ctx context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
				if first.CompareAndSwap(false, true) {
					select {
					case <-unblock:
					case <-ctx.Done(): // a unary call's deadline
						return nil, status.FromContextError(ctx.Err()).Err()
					}
				}
				return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "late", ResourceId: "r1", FencingToken: 7, ExpiresAt: timestamppb.Now()}}, nil
			}})
		pc := fast(fake)
		pc.Timeout = 300 * time.Millisecond
		h := start(t, one("p", pc), sidecar.Options{})
		began := time.Now()
		answers[stream] = h.acquire("p")
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("stream %v: the call was answered after %v, want about the 300ms timeout", stream, d)
		}
		close(unblock)
		if !stream {
			continue
		}
		testenv.Eventually(t, 5*time.Second, "the late lease is released", func() bool { return fake.StreamCalls("Release") == 1 })
		// The stream goes on: the next call is answered on it.
		if r := h.acquire("p"); r.status != 200 {
			t.Errorf("acquire after the timeout = %d %s", r.status, r.raw)
		}
	}
	unary, streamed := answers[false], answers[true]
	if streamed.status != unary.status || streamed.errCode() != unary.errCode() {
		t.Errorf("a timed-out call through the stream: %d %s; unary: %d %s; want the same", streamed.status, streamed.raw, unary.status, unary.raw)
	}
}

// TestLeaseStreamsOff: lease_streams -1 makes every call unary, though the
// server offers the stream.
func TestLeaseStreamsOff(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{Leases: true})
	pc := fast(fake)
	pc.LeaseStreams = -1
	h := start(t, one("p", pc), sidecar.Options{})
	for range 10 {
		if r := h.acquire("p"); r.status != 200 {
			t.Fatalf("acquire = %d %s", r.status, r.raw)
		}
	}
	if got, s := fake.Calls("Acquire"), fake.Calls("Leases"); got != 10 || s != 0 {
		t.Errorf("Acquire calls = %d, Leases streams = %d; want 10 unary calls and no stream", got, s)
	}
}

// TestLeasesStreamBackedUpGoesUnary: calls beyond the 128 a stream may
// have waiting are made unary, so that none waits to be sent while the
// server does not read the stream.
func TestLeasesStreamBackedUpGoesUnary(t *testing.T) {
	unblock := make(chan struct{})
	fake := fakeserver.Start(t, fakeserver.Config{Leases: true,
		Acquire: func(ctx context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
			if _, unary := ctx.Deadline(); !unary { // a stream's call: the server is stuck on it
				<-unblock
			}
			return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "l", ResourceId: "r1", FencingToken: 1, ExpiresAt: timestamppb.Now()}}, nil
		}})
	pc := fast(fake)
	pc.LeaseStreams, pc.Timeout = 1, 20*time.Second
	h := start(t, one("p", pc), sidecar.Options{})
	const calls = 130
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			if r := h.acquire("p"); r.status != 200 {
				t.Errorf("acquire = %d %s", r.status, r.raw)
			}
		})
	}
	// At least two calls are made unary while the stream is stuck (more if
	// a call found no stream yet, as the connection came up).
	unary := func() int64 { return fake.Calls("Acquire") - fake.StreamCalls("Acquire") }
	testenv.Eventually(t, 15*time.Second, "two calls made unary", func() bool { return unary() >= calls-128 })
	close(unblock)
	wg.Wait()
	if streamed, all := fake.StreamCalls("Acquire"), fake.Calls("Acquire"); streamed > 128 || all != calls {
		t.Errorf("Acquire calls = %d on the stream of %d in all; want at most 128 on it, %d in all", streamed, all, calls)
	}
}
