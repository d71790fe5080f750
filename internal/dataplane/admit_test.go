package dataplane

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/ratelimit"
	"github.com/repool/repool/internal/tenants"
)

// steps records, in order, the admission steps a call went through.
type steps struct {
	mu  sync.Mutex
	got []string
}

func (s *steps) add(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, name)
}

func (s *steps) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got
	s.got = nil
	return got
}

type stepAuth struct {
	fakeAuth
	s *steps
}

func (a stepAuth) APIKey(ctx context.Context, k string) (auth.Principal, error) {
	a.s.add("authenticate")
	return a.fakeAuth.APIKey(ctx, k)
}

// stepPools refuses the tenants in elsewhere as served by another group.
type stepPools struct {
	*tenants.Registry
	s         *steps
	elsewhere map[string]bool
}

func (p stepPools) Serves(tenant string) error {
	p.s.add("placement")
	if p.elsewhere[tenant] {
		return tenants.ErrElsewhere
	}
	return p.Registry.Serves(tenant)
}

type stepLimiter struct {
	s    *steps
	deny map[string]bool
}

func (l stepLimiter) Allow(_ context.Context, tenant, _ string) (ratelimit.Decision, error) {
	l.s.add("rate limit")
	if l.deny[tenant] {
		return ratelimit.Decision{RetryAfter: time.Second}, ratelimit.ErrLimited
	}
	return ratelimit.Decision{Allowed: true}, nil
}

// TestAdmissionOrder checks that the unary chain, the stream chain and each
// call on a Leases stream admit a call in one order — active, authenticate,
// placement, rate limit, then (streams only) the stream quota — and stop at
// the first refusal: a tenant another group serves is never charged its
// rate limit, a rate-limited stream takes no stream slot.
func TestAdmissionOrder(t *testing.T) {
	var s steps
	e := newEnv(t, func(c *Config) {
		active := c.Active
		c.Active = func() error { s.add("active"); return active() }
		c.Auth = stepAuth{fakeAuth: c.Auth.(fakeAuth), s: &s}
		c.Pools = stepPools{Registry: c.Pools.(*tenants.Registry), s: &s, elsewhere: map[string]bool{"b": true}}
		c.Limiter = stepLimiter{s: &s, deny: map[string]bool{"c": true}}
		c.Limit = func(string, limits.Limit) float64 { s.add("stream quota"); return 2 }
		c.Auth.(stepAuth).keys["key-c"] = "c"
	})
	full := []string{"active", "authenticate", "placement", "rate limit"}
	stream := append(slices.Clone(full), "stream quota")

	// Each path, for tenant a (admitted), b (placed elsewhere) and c
	// (rate limited): the steps it ran and the code it got.
	paths := []struct {
		name string
		call func(key string) error
		want []string // the steps of an admitted call
	}{
		{"unary Acquire", func(key string) error {
			_, err := e.client.Acquire(as(key), &repoolv1.AcquireRequest{Context: "x", TtlSeconds: 5})
			return err
		}, full},
		{"stream SubscribeEvents", func(key string) error {
			ctx, cancel := context.WithCancel(as(key))
			defer cancel()
			st, err := e.client.SubscribeEvents(ctx, &repoolv1.SubscribeEventsRequest{})
			if err != nil {
				return err
			}
			// Headers are sent once the stream is admitted and subscribed;
			// nil headers and no error: it ended at once, with its status.
			md, err := st.Header()
			if err == nil && md == nil {
				_, err = st.Recv()
			}
			return err
		}, stream},
		{"stream Leases, then a call on it", func(key string) error {
			ctx, cancel := context.WithCancel(as(key))
			defer cancel()
			st, err := e.client.Leases(ctx)
			if err == nil {
				_, err = do(st, acquireCall("x", 5)) // the stream's status if it was refused
			}
			return err
		}, append(slices.Clone(stream), full...)}, // the stream, then its call
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			s.take()
			err := p.call("key-a")
			if c := status.Code(err); c != codes.OK && c != codes.ResourceExhausted { // Acquire on an empty pool: no resource
				t.Fatalf("tenant a = got %v, want admitted", err)
			}
			if got := s.take(); !slices.Equal(got, p.want) {
				t.Errorf("steps of an admitted call = %v, want %v", got, p.want)
			}
			err = p.call("key-b")
			wantCode(t, "tenant b (elsewhere)", err, status.Code(toStatus(context.Background(), nil, tenants.ErrElsewhere)))
			if got, want := s.take(), full[:3]; !slices.Equal(got, want) {
				t.Errorf("steps of a tenant placed elsewhere = %v, want %v (no rate limit charged)", got, want)
			}
			err = p.call("key-c")
			wantCode(t, "tenant c (rate limited)", err, codes.ResourceExhausted)
			if got := s.take(); !slices.Equal(got, full) {
				t.Errorf("steps of a rate-limited call = %v, want %v (no stream slot)", got, full)
			}
		})
	}

}
