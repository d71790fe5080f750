package provider

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
)

// refusingIssuer fails every IssueToken; it counts the calls.
type refusingIssuer struct{ calls int }

func (r *refusingIssuer) IssueToken(context.Context, *repoolv1.IssueTokenRequest, ...grpc.CallOption) (*repoolv1.IssueTokenResponse, error) {
	r.calls++
	return nil, status.Error(codes.Unavailable, "down")
}

// openProvider returns a provider whose breaker is open.
func openProvider(tb testing.TB) (*Provider, *refusingIssuer) {
	tb.Helper()
	iss := &refusingIssuer{}
	tokens, err := token.New(token.Config{Provider: "p", APIKey: "k", Issuer: iss})
	if err != nil {
		tb.Fatalf("token.New() = %v", err)
	}
	tb.Cleanup(func() { tokens.Close() })
	br := resilience.NewBreaker(resilience.BreakerConfig{Provider: "p", Policy: resilience.BreakerPolicy{MinRequests: 1, OpenTimeout: time.Hour}})
	_ = br.Execute(func() error { return status.Error(codes.Unavailable, "down") })
	p, err := New(Config{Name: "p", Timeout: time.Second, Pool: repoolv1.NewPoolServiceClient(nil), Tokens: tokens, Breaker: br,
		Retrier:  resilience.NewRetrier(resilience.RetrierConfig{Provider: "p", Budget: resilience.NewBudget(resilience.BudgetPolicy{}, nil)}),
		Bulkhead: resilience.NewBulkhead(resilience.BulkheadConfig{Provider: "p"}),
		Metrics:  NewMetrics(nil)})
	if err != nil {
		tb.Fatalf("New() = %v", err)
	}
	return p, iss
}

func TestDoWithAnOpenBreakerTouchesNothing(t *testing.T) {
	p, iss := openProvider(t)
	called := false
	err := p.Do(context.Background(), MethodAcquire, func(context.Context, repoolv1.PoolServiceClient, ...grpc.CallOption) error {
		called = true
		return nil
	})
	if !errors.Is(err, resilience.ErrCircuitOpen) || called || iss.calls != 0 {
		t.Fatalf("Do() with the breaker open = %v (call ran %v, IssueToken %d times), want ErrCircuitOpen and nothing run", err, called, iss.calls)
	}
	if got := testing.AllocsPerRun(1000, func() { _ = p.Do(context.Background(), MethodAcquire, nil) }); got != 0 {
		t.Fatalf("Do() with the breaker open allocates %v times per call, want 0", got)
	}
}

// BenchmarkDoOpenReject measures a whole logical call rejected by an open
// breaker, metrics included: what a backend's call costs in the sidecar
// during an outage, before HTTP.
func BenchmarkDoOpenReject(b *testing.B) {
	p, _ := openProvider(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Do(ctx, MethodAcquire, nil); err == nil {
			b.Fatal("Do() = nil with the breaker open")
		}
	}
}

// grantingIssuer issues a fresh token on every call.
type grantingIssuer struct{}

func (grantingIssuer) IssueToken(context.Context, *repoolv1.IssueTokenRequest, ...grpc.CallOption) (*repoolv1.IssueTokenResponse, error) {
	return &repoolv1.IssueTokenResponse{Token: "t", ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))}, nil
}

// TestUnavailableAfterOurDeadlineIsOurTimeout: a server that gives up
// because the call's deadline reached it answers UNAVAILABLE once the
// sidecar's own deadline has passed; Do reports the sidecar's timeout
// (DEADLINE_EXCEEDED, fast-fail "timeout") and does not retry.
func TestUnavailableAfterOurDeadlineIsOurTimeout(t *testing.T) {
	tokens, err := token.New(token.Config{Provider: "p", APIKey: "k", Issuer: grantingIssuer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tokens.Close()
	p, err := New(Config{Name: "p", Timeout: 300 * time.Millisecond, Pool: repoolv1.NewPoolServiceClient(nil), Tokens: tokens,
		// The attempt rules are an hour: the test is about how Do reads an
		// answer, and on a busy machine the two calls' attempts once spanned
		// the 200 ms outage rule and opened the breaker.
		Breaker: resilience.NewBreaker(resilience.BreakerConfig{Provider: "p", Policy: resilience.BreakerPolicy{MinRequests: 100, OpenTimeout: time.Hour, OutageAfter: time.Hour, SilenceAfter: time.Hour}}),
		Retrier: resilience.NewRetrier(resilience.RetrierConfig{Provider: "p", Policy: resilience.RetryPolicy{MaxRetries: 2, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond},
			Budget: resilience.NewBudget(resilience.BudgetPolicy{}, nil)}),
		Bulkhead: resilience.NewBulkhead(resilience.BulkheadConfig{Provider: "p"}),
		Metrics:  NewMetrics(nil)})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	err = p.Do(context.Background(), MethodAcquire, func(ctx context.Context, _ repoolv1.PoolServiceClient, _ ...grpc.CallOption) error {
		calls++
		// The server's deadline is ours, rounded up: it gives up at or
		// after ours, perhaps before ctx.Err() is set.
		d, _ := ctx.Deadline()
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(d)):
		}
		return status.Error(codes.Unavailable, "too late")
	})
	if resilience.Code(err) != codes.DeadlineExceeded || resilience.FastFail(err) != resilience.FastFailTimeout || calls != 1 {
		t.Fatalf("Do() answered UNAVAILABLE at the deadline = %v (%d attempts), want DEADLINE_EXCEEDED, fast-fail timeout, 1 attempt", err, calls)
	}
	// An UNAVAILABLE before the deadline is still the server's, and retried.
	calls = 0
	err = p.Do(context.Background(), MethodAcquire, func(context.Context, repoolv1.PoolServiceClient, ...grpc.CallOption) error {
		calls++
		return status.Error(codes.Unavailable, "down")
	})
	if resilience.Code(err) != codes.Unavailable || calls != 3 {
		t.Fatalf("Do() = %v (%d attempts), want UNAVAILABLE after 3 attempts", err, calls)
	}
}
