package dataplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/ratelimit"
)

// servicePrefix selects the calls the data-plane interceptors guard; health
// checks and reflection stay open.
const servicePrefix = "/repool.v1."

// ServerOptions returns the interceptor chains: the count of answers by
// code, the mapping of errors to status codes (the one place on the
// request path where that happens), then admission (admit) and the
// handler. Handlers and admit return domain errors.
func (s *Service) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		// The unary chain is one function (unary), in the same order: a
		// chain costs a closure and a call per interceptor per call.
		grpc.UnaryInterceptor(s.unary),
		grpc.ChainStreamInterceptor(s.countStream, s.statusStream, s.admitStream),
	}
}

// admit is the admission of a data-plane call, the one place its order is
// written, used by the unary chain (unary), the stream chain (admitStream)
// and each call on a Leases stream (leaseCallChecked). The order is part of
// the design:
//
//  1. active: only the active server serves;
//  2. authenticate: the principal, and so the tenant, from the credential;
//  3. placement: a tenant another group serves is sent there, before its
//     rate limit is charged (this server's limiter does not hold its
//     limits);
//  4. rate limit: the tenant's request limit for method; a refusal's
//     retry-after goes to setTrailer;
//  5. stream quota: with quota set (a stream), one of the tenant's slots
//     of that kind for the stream's life: the caller calls release when
//     the stream ends.
//
// A limiter before authentication would limit nothing, since it would not
// know the tenant; an unauthenticated call reaches neither the limiter nor
// a pool. It returns ctx with the principal on it.
func (s *Service) admit(ctx context.Context, method string, setTrailer func(metadata.MD), quota *streamQuota) (_ context.Context, release func(), err error) {
	if err := s.active(); err != nil {
		return nil, nil, err
	}
	ctx, p, err := s.authenticate(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.cfg.Pools.Serves(p.Tenant); err != nil {
		return nil, nil, err
	}
	if err := s.limit(ctx, p.Tenant, method, setTrailer); err != nil {
		return nil, nil, err
	}
	if quota == nil {
		return ctx, func() {}, nil
	}
	if release, err = quota.acquire(p.Tenant); err != nil {
		return nil, nil, err
	}
	return ctx, release, nil
}

// statusStream answers a stream handler's error as the gRPC status
// toStatus maps it to.
func (s *Service) statusStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return toStatus(ss.Context(), s.log, h(srv, ss))
}

func guarded(method string) bool { return strings.HasPrefix(method, servicePrefix) }

// unary is the unary interceptor chain in one function, in the order of
// the stream chain: count the answer by code, map errors to a status, and,
// for the data plane's calls, the active-server gate, authentication and
// the rate limit before the handler.
func (s *Service) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !guarded(info.FullMethod) {
		resp, err := h(ctx, req)
		if err != nil {
			return nil, toStatus(ctx, s.log, err)
		}
		return resp, nil
	}
	start := time.Now()
	resp, err := s.checkedUnary(ctx, req, info.FullMethod, h)
	if err != nil {
		err = toStatus(ctx, s.log, err)
		resp = nil
	}
	s.count(info.FullMethod, err, start)
	s.logCall(ctx, info.FullMethod, err, start)
	return resp, err
}

// checkedUnary admits a data-plane call and then runs its handler,
// returning domain errors.
func (s *Service) checkedUnary(ctx context.Context, req any, method string, h grpc.UnaryHandler) (any, error) {
	s.calls.enter()
	defer s.calls.exit()
	ctx, _, err := s.admit(ctx, method, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) }, nil)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Service) countStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	err := h(srv, ss)
	if guarded(info.FullMethod) {
		s.count(info.FullMethod, err, start)
		s.logCall(ss.Context(), info.FullMethod, err, start)
	}
	return err
}

func (s *Service) active() error {
	if s.cfg.Active == nil {
		return nil
	}
	if err := s.cfg.Active(); err != nil {
		return err
	}
	return nil
}

// authenticate puts the caller's principal on ctx: from `x-api-key`, or from
// `authorization: Bearer <token>`.
func (s *Service) authenticate(ctx context.Context) (context.Context, auth.Principal, error) {
	// ValueFromIncomingContext reads one key without copying the whole
	// metadata, as FromIncomingContext does.
	var (
		p   auth.Principal
		err = auth.ErrUnauthenticated
	)
	if keys := metadata.ValueFromIncomingContext(ctx, "x-api-key"); len(keys) == 1 {
		p, err = s.cfg.Auth.APIKey(ctx, keys[0])
	} else if authz := metadata.ValueFromIncomingContext(ctx, "authorization"); len(authz) == 1 && len(authz[0]) > 7 && strings.EqualFold(authz[0][:7], "bearer ") {
		tok := authz[0][7:]
		if v, ok := verifiedBearer(ctx, tok); ok {
			p, err = s.cfg.Auth.BearerVerified(ctx, v) // Tap verified it
		} else {
			p, err = s.cfg.Auth.Bearer(ctx, tok)
		}
	}
	if err != nil {
		return nil, auth.Principal{}, err
	}
	authenticated(ctx, p.Tenant)
	if s.cfg.Attribute != nil {
		if pr, ok := peer.FromContext(ctx); ok {
			if err := s.cfg.Attribute(pr.Addr, p.Tenant); err != nil {
				return nil, auth.Principal{}, fmt.Errorf("%w: this tenant holds its share of the server's connections (%v); send its calls on the connections it holds", ErrOverBudget, err)
			}
		}
	}
	return auth.NewContext(ctx, p), p, nil
}

// wrappedStream replaces a stream's context.
type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w wrappedStream) Context() context.Context { return w.ctx }

// admitStream admits a data-plane stream (admit), holding one of the
// tenant's stream slots for the stream's life: an event stream slot for
// SubscribeEvents, a Leases stream slot for Leases (its calls are unary
// calls on one stream, each admitted again as they are; the slot bounds
// what a tenant's open streams hold).
func (s *Service) admitStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !guarded(info.FullMethod) {
		return h(srv, ss)
	}
	q := s.streams
	if info.FullMethod == repoolv1.PoolService_Leases_FullMethodName {
		q = s.leaseStreams
	}
	ctx, release, err := s.admit(ss.Context(), info.FullMethod, ss.SetTrailer, q)
	if err != nil {
		return err
	}
	defer release()
	return h(srv, wrappedStream{ServerStream: ss, ctx: ctx})
}

// limit applies tenant's request limit for method; a refusal carries the
// retry-after in trailing metadata.
func (s *Service) limit(ctx context.Context, tenant, method string, setTrailer func(metadata.MD)) error {
	d, err := s.cfg.Limiter.Allow(ctx, tenant, method)
	switch {
	case err == nil && d.Allowed:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case !errors.Is(err, ratelimit.ErrLimited):
		return err
	}
	if d.RetryAfter > 0 {
		setTrailer(metadata.Pairs(repoolv1.RetryAfterKey, strconv.FormatInt(max(d.RetryAfter.Milliseconds(), 1), 10)))
	}
	return &limitedError{err: err, after: d.RetryAfter}
}

// streamQuota counts open streams of one kind per tenant.
type streamQuota struct {
	limit func(tenant string) int
	kind  string
	gauge *prometheus.GaugeVec

	mu   sync.Mutex
	open map[string]int
}

func newStreamQuota(limit func(string) int, kind string, gauge prometheus.GaugeOpts) *streamQuota {
	return &streamQuota{
		limit: limit,
		kind:  kind,
		open:  map[string]int{},
		gauge: prometheus.NewGaugeVec(gauge, []string{"tenant"}),
	}
}

func (q *streamQuota) acquire(tenant string) (release func(), err error) {
	limit := q.limit(tenant)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.open[tenant] >= limit {
		return nil, fmt.Errorf("%w: the tenant's limit of %d %s streams is reached", ErrOverBudget, limit, q.kind)
	}
	q.open[tenant]++
	q.gauge.WithLabelValues(tenant).Set(float64(q.open[tenant]))
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.open[tenant]--
			q.gauge.WithLabelValues(tenant).Set(float64(q.open[tenant]))
			if q.open[tenant] == 0 {
				delete(q.open, tenant)
			}
		})
	}, nil
}

// Streams returns the number of open event streams of a tenant.
func (s *Service) Streams(tenant string) int {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	return s.streams.open[tenant]
}

// LeaseStreams returns the number of open Leases streams of a tenant.
func (s *Service) LeaseStreams(tenant string) int {
	s.leaseStreams.mu.Lock()
	defer s.leaseStreams.mu.Unlock()
	return s.leaseStreams.open[tenant]
}
