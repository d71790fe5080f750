package client

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
)

// NaivePolicy is how the naive client retries.
type NaivePolicy struct {
	// AttemptsPerHost is how often a host is tried before the next one.
	AttemptsPerHost int
	// RetryDelay is the fixed pause after every failed attempt but the
	// last.
	RetryDelay time.Duration
	// AttemptTimeout bounds one attempt.
	AttemptTimeout time.Duration
	// Clock times RetryDelay. Default the wall clock (clock.Real).
	Clock clock.Clock
}

// Naive is the backend the sidecar replaces. For every call it walks the
// provider's host list from the first host: on "not the active server" it
// moves to the next host at once (it follows the redirect); on any other
// transient failure (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
// ABORTED, INTERNAL, UNKNOWN) it waits RetryDelay and tries again, up to
// AttemptsPerHost times per host, then moves on; business errors end the
// call. It remembers nothing between calls and has no breaker, so every
// call of an outage pays the whole walk. It sends the API key on every
// call (x-api-key).
type Naive struct {
	policy NaivePolicy
	hosts  map[string][]repoolv1.PoolServiceClient
	keys   map[string]string
	conns  []*grpc.ClientConn
}

// NewNaive returns a naive client of the providers' hosts (host:port,
// h2c), with their API keys.
func NewNaive(hosts map[string][]string, keys map[string]string, policy NaivePolicy) (*Naive, error) {
	if policy.Clock == nil {
		policy.Clock = clock.Real{}
	}
	n := &Naive{policy: policy, hosts: map[string][]repoolv1.PoolServiceClient{}, keys: keys}
	for p, hs := range hosts {
		for _, h := range hs {
			conn, err := grpc.NewClient(h, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				n.Close()
				return nil, err
			}
			n.conns = append(n.conns, conn)
			n.hosts[p] = append(n.hosts[p], repoolv1.NewPoolServiceClient(conn))
		}
	}
	return n, nil
}

// Acquire acquires a lease.
func (n *Naive) Acquire(ctx context.Context, provider, workContext string, ttlSeconds int) (Lease, Result) {
	var l Lease
	r := n.call(ctx, provider, func(ctx context.Context, c repoolv1.PoolServiceClient) error {
		resp, err := c.Acquire(ctx, &repoolv1.AcquireRequest{Context: workContext, TtlSeconds: int32(ttlSeconds)})
		if err == nil {
			ls := resp.GetLease()
			l = Lease{ID: ls.GetLeaseId(), Resource: ls.GetResourceId(), FencingToken: strconv.FormatUint(ls.GetFencingToken(), 10)}
		}
		return err
	})
	return l, r
}

// Report reports an outcome for the lease.
func (n *Naive) Report(ctx context.Context, provider string, l Lease, workContext, outcome string) Result {
	tok, _ := strconv.ParseUint(l.FencingToken, 10, 64)
	req := &repoolv1.ReportRequest{ResourceId: l.Resource, Context: workContext, LeaseId: l.ID, FencingToken: tok,
		Outcome: repoolv1.Outcome(repoolv1.Outcome_value[outcome])}
	return n.call(ctx, provider, func(ctx context.Context, c repoolv1.PoolServiceClient) error {
		_, err := c.Report(ctx, req)
		return err
	})
}

// Release releases the lease.
func (n *Naive) Release(ctx context.Context, provider string, l Lease) Result {
	tok, _ := strconv.ParseUint(l.FencingToken, 10, 64)
	req := &repoolv1.ReleaseRequest{LeaseId: l.ID, FencingToken: tok}
	return n.call(ctx, provider, func(ctx context.Context, c repoolv1.PoolServiceClient) error {
		_, err := c.Release(ctx, req)
		return err
	})
}

// ReleaseNext releases the lease with the outcome and leases the next
// resource for workContext in the same call (Release with next). ok is
// false when the release succeeded without a next lease (none free), and
// when the call failed.
func (n *Naive) ReleaseNext(ctx context.Context, provider string, l Lease, outcome, workContext string, ttlSeconds int) (next Lease, ok bool, r Result) {
	tok, _ := strconv.ParseUint(l.FencingToken, 10, 64)
	req := &repoolv1.ReleaseRequest{LeaseId: l.ID, FencingToken: tok, Outcome: repoolv1.Outcome(repoolv1.Outcome_value[outcome]),
		Next: &repoolv1.NextLease{Context: workContext, TtlSeconds: int32(ttlSeconds)}}
	r = n.call(ctx, provider, func(ctx context.Context, c repoolv1.PoolServiceClient) error {
		resp, err := c.Release(ctx, req)
		if err == nil {
			if ls := resp.GetNext().GetLease(); ls != nil {
				next, ok = Lease{ID: ls.GetLeaseId(), Resource: ls.GetResourceId(), FencingToken: strconv.FormatUint(ls.GetFencingToken(), 10)}, true
			} else {
				next, ok = Lease{}, false
			}
		}
		return err
	})
	return next, ok, r
}

// Close closes the connections.
func (n *Naive) Close() error {
	var errs []error
	for _, c := range n.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// call walks the hosts as the type's comment says.
func (n *Naive) call(ctx context.Context, provider string, fn func(context.Context, repoolv1.PoolServiceClient) error) Result {
	hosts := n.hosts[provider]
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", n.keys[provider])
	last := status.New(codes.Unavailable, "no hosts")
	for hi, h := range hosts {
		for a := 0; a < n.policy.AttemptsPerHost; a++ {
			actx, cancel := context.WithTimeout(ctx, n.policy.AttemptTimeout)
			err := fn(actx, h)
			cancel()
			if err == nil {
				return Result{Status: 200}
			}
			if ctx.Err() != nil {
				return resultOf(codes.Canceled)
			}
			last = status.Convert(err)
			if !transient(last.Code()) {
				return resultOf(last.Code())
			}
			if last.Code() == codes.Unavailable && strings.Contains(last.Message(), "not the active server") {
				break // a standby: follow it to the next host at once
			}
			if hi == len(hosts)-1 && a == n.policy.AttemptsPerHost-1 {
				break
			}
			if clock.Sleep(ctx, n.policy.Clock, n.policy.RetryDelay) != nil {
				return resultOf(codes.Canceled)
			}
		}
	}
	return resultOf(last.Code())
}

func transient(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}
