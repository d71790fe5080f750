package client

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar/httpapi"
)

// fakePool answers Acquire with the error of its function field.
type fakePool struct {
	repoolv1.UnimplementedPoolServiceServer
	calls   atomic.Int64
	acquire func(n int64) error
	// released is the last Release; noNext answers it without a next lease.
	released atomic.Pointer[repoolv1.ReleaseRequest]
	noNext   atomic.Bool
}

func (f *fakePool) Release(_ context.Context, req *repoolv1.ReleaseRequest) (*repoolv1.ReleaseResponse, error) {
	f.released.Store(req)
	if f.noNext.Load() {
		return &repoolv1.ReleaseResponse{Next: &repoolv1.NextResult{Result: &repoolv1.NextResult_Error{Error: &repoolv1.Problem{Code: "NO_RESOURCE_AVAILABLE"}}}}, nil
	}
	return &repoolv1.ReleaseResponse{Next: &repoolv1.NextResult{Result: &repoolv1.NextResult_Lease{Lease: &repoolv1.Lease{LeaseId: "8", ResourceId: "r", FencingToken: 43}}}}, nil
}

func (f *fakePool) Acquire(context.Context, *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
	if err := f.acquire(f.calls.Add(1)); err != nil {
		return nil, err
	}
	return &repoolv1.AcquireResponse{Lease: &repoolv1.Lease{LeaseId: "7", ResourceId: "r", FencingToken: 42}}, nil
}

// serve runs f on a loopback listener until the test ends.
func serve(t *testing.T, f *fakePool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	repoolv1.RegisterPoolServiceServer(s, f)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func TestNaiveWalksHosts(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "overloaded")
	standby := status.Error(codes.Unavailable, "not the active server")
	tests := []struct {
		name          string
		first, second func(int64) error
		wantFirst     int64 // calls that reached each host
		wantSecond    int64
		wantStatus    int
		wantDelays    time.Duration // the fixed delays taken, on the client's clock
	}{
		{"first host answers", func(int64) error { return nil }, func(int64) error { return nil }, 1, 0, 200, 0},
		{"standby is followed at once", func(int64) error { return standby }, func(int64) error { return nil }, 1, 1, 200, 0},
		{"transient failure is retried on the same host", func(n int64) error {
			if n < 3 {
				return unavailable
			}
			return nil
		}, func(int64) error { return nil }, 3, 0, 200, 2 * 20 * time.Millisecond},
		{"all hosts down: every attempt, then the last error", func(int64) error { return unavailable }, func(int64) error { return unavailable }, 3, 3, 503, 5 * 20 * time.Millisecond},
		{"business error ends the call", func(int64) error { return status.Error(codes.NotFound, "no resource") }, func(int64) error { return nil }, 1, 0, 404, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := &fakePool{acquire: tt.first}, &fakePool{acquire: tt.second}
			fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			n, err := NewNaive(map[string][]string{"p": {serve(t, a), serve(t, b)}}, map[string]string{"p": "key"},
				NaivePolicy{AttemptsPerHost: 3, RetryDelay: 20 * time.Millisecond, AttemptTimeout: 5 * time.Second, Clock: fake})
			if err != nil {
				t.Fatalf("NewNaive() = %v", err)
			}
			defer n.Close()
			start := fake.Now()
			l, r := acquireAdvancing(t, n, fake, 20*time.Millisecond)
			elapsed := fake.Now().Sub(start)
			if r.Status != tt.wantStatus || a.calls.Load() != tt.wantFirst || b.calls.Load() != tt.wantSecond {
				t.Errorf("Acquire() = status %d after %d+%d calls, want %d after %d+%d", r.Status, a.calls.Load(), b.calls.Load(), tt.wantStatus, tt.wantFirst, tt.wantSecond)
			}
			if elapsed != tt.wantDelays {
				t.Errorf("Acquire() waited %v, want the fixed delays, %v", elapsed, tt.wantDelays)
			}
			if r.Status == 200 && (l.ID != "7" || l.FencingToken != "42") {
				t.Errorf("Acquire() lease = %+v, want id 7 and token 42", l)
			}
		})
	}
}

// acquireAdvancing calls n.Acquire and advances fake by step each time the
// client waits on it, until the call returns.
func acquireAdvancing(t *testing.T, n *Naive, fake *clock.Fake, step time.Duration) (Lease, Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type answer struct {
		l Lease
		r Result
	}
	done := make(chan answer, 1)
	go func() {
		l, r := n.Acquire(ctx, "p", "search", 30)
		done <- answer{l, r}
	}()
	for {
		waitCtx, stopWait := context.WithCancel(ctx)
		armed := make(chan error, 1)
		go func() { armed <- fake.Wait(waitCtx, 1) }()
		select {
		case a := <-done:
			stopWait()
			return a.l, a.r
		case err := <-armed:
			stopWait()
			if err != nil {
				t.Fatalf("Acquire() did not return: %v", err)
			}
			fake.Advance(step)
		}
	}
}

func TestSidecarClient(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/providers/ok/acquire", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"lease":{"lease_id":"9","resource_id":"r1","context":"search","fencing_token":"18446744073709551615"}}`))
	})
	mux.HandleFunc("POST /v1/providers/down/acquire", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(httpapi.FastFailHeader, "circuit-open")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"code":"circuit_open","message":"open","retry_after_ms":900}}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := NewSidecar(srv.URL, 5*time.Second, 4)
	defer c.Close()

	l, r := c.Acquire(context.Background(), "ok", "search", 30)
	if r.Failed() || l.ID != "9" || l.Resource != "r1" || l.FencingToken != "18446744073709551615" {
		t.Errorf("Acquire(ok) = %+v, %+v; want lease 9 on r1 with the token kept exact", l, r)
	}
	_, r = c.Acquire(context.Background(), "down", "search", 30)
	if want := (Result{Status: 503, Code: "circuit_open", FastFail: "circuit-open"}); r != want {
		t.Errorf("Acquire(down) = %+v, want %+v", r, want)
	}
	if r = c.Release(context.Background(), "none", Lease{ID: "1"}); !r.Failed() || r.Status != 404 {
		t.Errorf("Release(unknown route) = %+v, want a failed 404", r)
	}
}

// TestReleaseNext: both clients release with the outcome and a next lease
// in one call, and tell a next lease from a release without one.
func TestReleaseNext(t *testing.T) {
	var bodies []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/providers/{p}/leases/{lease}/release", func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		bodies = append(bodies, r.PathValue("lease")+" "+string(raw))
		w.Header().Set("Content-Type", "application/json")
		if r.PathValue("p") == "full" {
			w.Write([]byte(`{"next":{"error":{"code":"no_resource_available","message":"all leased"}}}`))
			return
		}
		w.Write([]byte(`{"next":{"lease":{"lease_id":"10","resource_id":"r2","context":"search","fencing_token":"18446744073709551615"}}}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := NewSidecar(srv.URL, 5*time.Second, 4)
	defer c.Close()
	next, ok, r := c.ReleaseNext(context.Background(), "ok", Lease{ID: "9", FencingToken: "7"}, "FAILURE", "search", 30)
	if r.Failed() || !ok || next != (Lease{ID: "10", Resource: "r2", FencingToken: "18446744073709551615"}) {
		t.Errorf("Sidecar.ReleaseNext(ok) = %+v, %v, %+v; want lease 10 on r2", next, ok, r)
	}
	if want := `9 {"fencing_token":"7","next":{"context":"search","ttl_seconds":30},"outcome":"FAILURE"}`; len(bodies) != 1 || bodies[0] != want {
		t.Errorf("release request = %q, want %q", bodies, want)
	}
	if _, ok, r := c.ReleaseNext(context.Background(), "full", Lease{ID: "9", FencingToken: "7"}, "SUCCESS", "search", 30); r.Failed() || ok {
		t.Errorf("Sidecar.ReleaseNext(full) = %v, %+v; want a release without a next lease", ok, r)
	}

	f := &fakePool{acquire: func(int64) error { return nil }}
	n, err := NewNaive(map[string][]string{"p": {serve(t, f)}}, map[string]string{"p": "key"},
		NaivePolicy{AttemptsPerHost: 1, AttemptTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("NewNaive() = %v", err)
	}
	defer n.Close()
	next, ok, r = n.ReleaseNext(context.Background(), "p", Lease{ID: "9", FencingToken: "7"}, "FAILURE", "search", 30)
	if r.Failed() || !ok || next != (Lease{ID: "8", Resource: "r", FencingToken: "43"}) {
		t.Errorf("Naive.ReleaseNext() = %+v, %v, %+v; want lease 8 on r", next, ok, r)
	}
	got := f.released.Load()
	if got == nil || got.GetLeaseId() != "9" || got.GetFencingToken() != 7 || got.GetOutcome() != repoolv1.Outcome_FAILURE ||
		got.GetNext().GetContext() != "search" || got.GetNext().GetTtlSeconds() != 30 {
		t.Errorf("Naive.ReleaseNext() sent %v, want lease 9, token 7, FAILURE, next search for 30s", got)
	}
	f.noNext.Store(true)
	if _, ok, r := n.ReleaseNext(context.Background(), "p", Lease{ID: "9", FencingToken: "7"}, "SUCCESS", "search", 30); r.Failed() || ok {
		t.Errorf("Naive.ReleaseNext() without a next = %v, %+v; want a release without a next lease", ok, r)
	}
}

// TestNaiveAnswersAsTheSidecar: a call that ends in a gRPC error gets the
// status and error code the sidecar answers for it.
func TestNaiveAnswersAsTheSidecar(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Result
	}{
		{"UNAUTHENTICATED is the sidecar's credentials refused", status.Error(codes.Unauthenticated, "bad key"), Result{Status: 502, Code: "invalid_credentials"}},
		{"NOT_FOUND", status.Error(codes.NotFound, "no resource"), Result{Status: 404, Code: "not_found"}},
		{"FAILED_PRECONDITION", status.Error(codes.FailedPrecondition, "stale token"), Result{Status: 409, Code: "failed_precondition"}},
		{"UNIMPLEMENTED", status.Error(codes.Unimplemented, "no"), Result{Status: 502, Code: "unimplemented"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakePool{acquire: func(int64) error { return tt.err }}
			n, err := NewNaive(map[string][]string{"p": {serve(t, f)}}, map[string]string{"p": "key"},
				NaivePolicy{AttemptsPerHost: 1, AttemptTimeout: 5 * time.Second})
			if err != nil {
				t.Fatalf("NewNaive() = %v", err)
			}
			defer n.Close()
			if _, r := n.Acquire(context.Background(), "p", "search", 30); r != tt.want {
				t.Errorf("Acquire() = %+v, want %+v", r, tt.want)
			}
		})
	}
}
