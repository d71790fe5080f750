package provider

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/repool/repool/internal/sidecar/resilience"
)

// serveHealth serves the gRPC health service (SERVING) on l until the
// returned stop is called.
func serveHealth(t *testing.T, l net.Listener) (stop func()) {
	t.Helper()
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(l)
	return s.Stop
}

// TestProbeReconnects: a provider that went away and came back on the same
// address, while the sidecar's connection waits out a long reconnect
// backoff: a plain health check fails at once with the last connect error
// (what a half-open probe did after a VIP move), the probe reconnects and
// passes.
func TestProbeReconnects(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	stop := serveHealth(t, l)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Minute, Multiplier: 1, MaxDelay: time.Minute}, MinConnectTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a test timeout
	defer cancel()
	if err := CheckHealth(ctx, client); err != nil {
		t.Fatalf("CheckHealth with the provider up = %v", err)
	}
	stop()
	// Until a reconnect was refused: then the connection waits a minute.
	for err := CheckHealth(ctx, client); err == nil || !strings.Contains(err.Error(), "connection refused"); err = CheckHealth(ctx, client) {
		if ctx.Err() != nil {
			t.Fatalf("the health check with the provider gone = %v, want a refused connection", err)
		}
	}
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on the provider's port %s = %v", addr, err)
	}
	defer serveHealth(t, l2)()
	if err := CheckHealth(ctx, client); status.Code(err) != codes.Unavailable {
		t.Fatalf("CheckHealth during the backoff, the provider back = %v, want UNAVAILABLE at once (the cached connect error): the test shows nothing", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if err := Probe(pctx, conn, client); err != nil {
		t.Fatalf("Probe with the provider back = %v, want nil (reconnected at once)", err)
	}
}

// brokenThenServing answers its first n checks with a connection reset,
// then SERVING.
type brokenThenServing struct {
	healthpb.HealthClient
	n, calls int
}

func (b *brokenThenServing) Check(context.Context, *healthpb.HealthCheckRequest, ...grpc.CallOption) (*healthpb.HealthCheckResponse, error) {
	b.calls++
	if b.calls <= b.n {
		return nil, status.Error(codes.Unavailable, "error reading from server: read tcp 10.0.0.30:40528->10.0.0.100:9090: read: connection reset by peer")
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

type resets struct{ n int }

func (r *resets) ResetConnectBackoff() { r.n++ }

// TestProbeAsksAgainOnABrokenConnection: a check whose connection broke
// under it (the VIP's new holder resets the old one) is asked again, on a
// connection made anew; an answer ends the probe at once.
func TestProbeAsksAgainOnABrokenConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a test timeout
	defer cancel()
	h, r := &brokenThenServing{n: 2}, &resets{}
	if err := Probe(ctx, r, h); err != nil || h.calls != 3 || r.n != 3 {
		t.Fatalf("Probe over two broken connections = got %v after %d checks and %d reconnects, want nil after 3 and 3", err, h.calls, r.n)
	}
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"a standby", status.Error(codes.Unavailable, "the provider answers NOT_SERVING (a standby, or starting)")},
		{"a proxy's 503", status.Error(codes.Unavailable, "unexpected HTTP status code received from server: 503 (Service Unavailable)")},
		{"nothing listening", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.100:9090: connect: connection refused"`)},
		{"rate limited", status.Error(codes.ResourceExhausted, "rate limited")},
	} {
		h, r := &answers{err: tt.err}, &resets{}
		if err := Probe(ctx, r, h); status.Code(err) != status.Code(tt.err) || h.calls != 1 {
			t.Errorf("Probe answered %s = got %v after %d checks, want the answer after 1", tt.name, err, h.calls)
		}
	}
}

// answers answers every check with err.
type answers struct {
	healthpb.HealthClient
	err   error
	calls int
}

func (a *answers) Check(context.Context, *healthpb.HealthCheckRequest, ...grpc.CallOption) (*healthpb.HealthCheckResponse, error) {
	a.calls++
	return nil, a.err
}

// TestProbeOfAProviderNotListening: a probe of an address where nothing
// listens waits for a connection until its deadline and fails with the
// connect error in our words, not as a call that had no answer in time.
func TestProbeOfAProviderNotListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = Probe(ctx, conn, healthpb.NewHealthClient(conn))
	if cause := resilience.Cause(err); status.Code(err) != codes.Unavailable || !strings.Contains(cause, "nothing is listening there") {
		t.Fatalf("Probe of %s, nothing listening = got %v (cause %q), want UNAVAILABLE saying nothing is listening", addr, err, cause)
	}
}
