package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/repool/repool/internal/sidecar/resilience"
)

// Example composes one provider's guard the way provider.Provider.Do does,
// CB(Retry(attempt rules(bulkhead(call)))): a policy overlaid on the
// defaults, the breaker around the retrier, each attempt admitted by the
// breaker's attempt rules and then by the bulkhead. The call fails once
// with UNAVAILABLE (transient: retried) and then succeeds.
func Example() {
	policy := resilience.Policy{}.WithDefaults().Overlay(resilience.Policy{
		Retry: resilience.RetryPolicy{MaxRetries: 2, InitialInterval: time.Millisecond},
	})
	if err := policy.Validate(); err != nil {
		fmt.Println("invalid policy:", err)
		return
	}
	g := resilience.NewGuard(resilience.GuardConfig{Provider: "default", Policy: policy}, nil)

	attempts := 0
	call := func(context.Context) error {
		attempts++
		if attempts == 1 {
			return status.Error(codes.Unavailable, "connection refused")
		}
		return nil
	}
	err := g.Breaker.Execute(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), g.Policy.Timeout)
		defer cancel()
		return g.Retrier.DoUntil(ctx, g.Breaker, func(ctx context.Context) error {
			a, err := g.Breaker.Start(ctx)
			if err != nil {
				return err // a rule found the provider down: circuit open
			}
			if err := g.Bulkhead.Enter(a.Context()); err != nil {
				return a.End(err)
			}
			a.Sent()
			g.Bulkhead.Sent()
			err = call(a.Context())
			g.Bulkhead.Leave(a.SentAt())
			return a.End(err)
		})
	})
	fmt.Println("error:", err)
	fmt.Println("attempts:", attempts)
	fmt.Println("breaker:", g.Breaker.State())
	// Output:
	// error: <nil>
	// attempts: 2
	// breaker: closed
}

// ExampleBreaker_Execute shows a business error passing through a closed
// breaker as a success: only UNAVAILABLE-like failures count against the
// provider (see Code).
func ExampleBreaker_Execute() {
	b := resilience.NewBreaker(resilience.BreakerConfig{Provider: "default"})
	for range 20 {
		_ = b.Execute(func() error { return status.Error(codes.NotFound, "no such lease") })
	}
	err := b.Execute(func() error { return nil })
	fmt.Println(err, b.State(), errors.Is(err, resilience.ErrCircuitOpen))
	// Output: <nil> closed false
}
