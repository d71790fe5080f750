// Package dataplane implements repool's gRPC data plane: AuthService and
// PoolService over the per-tenant pools, behind interceptors that run in a
// fixed order — active-server gate, authentication, rate limit, stream
// quota — before any handler.
package dataplane

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/callbudget"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/ratelimit"
	"github.com/repool/repool/internal/tenants"
)

// Limiter decides whether a tenant may make a call now. It fails open on its
// own faults (and counts them); a refusal is an error with the decision's
// RetryAfter.
type Limiter interface {
	Allow(ctx context.Context, tenant, method string) (ratelimit.Decision, error)
}

// Authenticator resolves credentials and issues tokens.
type Authenticator interface {
	APIKey(ctx context.Context, plain string) (auth.Principal, error)
	Bearer(ctx context.Context, tok string) (auth.Principal, error)
	IssueToken(p auth.Principal) (string, time.Time, error)
	// Claim sorts a credential without the store (auth.Authenticator.Claim).
	Claim(apiKey, bearer string) (string, auth.Verdict)
	// ClaimBearer verifies a bearer token without the store, and
	// BearerVerified authenticates a call with what it verified
	// (auth.Authenticator.ClaimBearer, BearerVerified).
	ClaimBearer(tok string) (auth.Verified, bool)
	BearerVerified(ctx context.Context, v auth.Verified) (auth.Principal, error)
}

// Journal makes data-plane changes durable before they are acknowledged,
// so that they survive a failover. Each method returns once the change is
// committed; an error means it may not be. An error wrapping
// ErrStoreNotWritable (its text written for clients) says the store could
// not take the write; the call is answered with it.
type Journal interface {
	// Leased records a lease granted or renewed.
	Leased(ctx context.Context, tenant string, l pool.Lease) error
	// Ended records a lease released.
	Ended(ctx context.Context, tenant string, leaseID uint64) error
	// Swapped records a lease released and the next lease granted, as
	// one change (a release with next waits for one commit).
	Swapped(ctx context.Context, tenant string, ended uint64, next pool.Lease) error
	// Registered records the resources that a call created (never those it
	// found existing); Deregistered records resources removed.
	Registered(ctx context.Context, tenant string, ids []string) error
	Deregistered(ctx context.Context, tenant string, ids []string) error
	// Reported returns once the statistics of the outcomes reported so far
	// are durable, or at once if the server does not wait for that (they
	// then reach the store within its report flush window).
	Reported(ctx context.Context, tenant string) error
}

// Pools gives a tenant's pool, creating it on first use. It fails with
// tenants.ErrDeleted for a deleted tenant and tenants.ErrClosed while the
// server is not active (a *tenants.Registry does). Serves refuses, with a
// *tenants.ElsewhereError, a tenant another group of servers serves.
type Pools interface {
	Pool(tenant string) (*pool.Pool, error)
	Serves(tenant string) error
}

// Config wires a Service. Every field but Active, Journal, Audit, Metrics
// and Log is required. The budget is not here: each pool charges its own
// through the pool.Gate it was made with.
type Config struct {
	Pools   Pools
	Auth    Authenticator
	Limiter Limiter
	// Limit returns a tenant's limit in force (tenants.Lifecycle.Limit):
	// the data plane enforces limits.MaxStreams and
	// limits.MaxLeaseStreams.
	Limit func(tenant string, l limits.Limit) float64
	// StreamIdle ends a Leases stream on which no call arrived for this
	// long (within twice as long), so that a quiet stream does not keep
	// its connection from counting as idle; 0 means never.
	StreamIdle time.Duration
	// Attribute, when set, is told the connection (by its peer address,
	// gRPC's peer.FromContext) and the tenant of every authenticated call;
	// an error refuses the call (wrap ErrOverBudget for RESOURCE_EXHAUSTED).
	// It must not allocate for a connection it has seen.
	Attribute func(peer net.Addr, tenant string) error
	// Calls, when set, admits every new call before gRPC reads its
	// request (Tap): by the tenant its credential claims, or as
	// unverified. Nil admits every call.
	Calls *callbudget.Budget
	// Active returns nil while this server may serve the data plane, and an
	// error wrapping ErrNotActive otherwise. Nil means always active.
	Active func() error
	// Journal, when set, makes leases and registrations (and, if the
	// server says so, reports) durable before they are acknowledged. Nil
	// means in memory only (tests).
	Journal Journal
	// Audit records a change to a tenant's pool in its audit trail (it must
	// not block); nil means no audit.
	Audit func(tenant, actor, action, detail string)
	// Metrics registers the service's metrics; nil means none.
	Metrics prometheus.Registerer
	// Log receives errors that clients only see as INTERNAL.
	Log *slog.Logger
}

// limit returns a tenant's limit l, a whole number, as a function of the
// tenant.
func (c Config) limit(l limits.Limit) func(tenant string) int {
	return func(tenant string) int { return int(c.Limit(tenant, l)) }
}

// Service implements AuthService and PoolService. Safe for concurrent use.
type Service struct {
	repoolv1.UnimplementedPoolServiceServer
	repoolv1.UnimplementedAuthServiceServer

	cfg          Config
	log          *slog.Logger
	streams      *streamQuota
	leaseStreams *streamQuota
	// open holds the end channel of every open Leases stream (EndLeases).
	open openStreams
	// calls counts the calls in progress (Drain).
	calls *callCount

	tokensIssued prometheus.Counter
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	ok           map[string]okSeries // method → its series of code OK; read-only after New
}

var (
	_ repoolv1.PoolServiceServer = (*Service)(nil)
	_ repoolv1.AuthServiceServer = (*Service)(nil)
)

// New returns a Service, or an error naming the missing field.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Pools == nil:
		return nil, errors.New("dataplane: Config.Pools is nil")
	case cfg.Auth == nil:
		return nil, errors.New("dataplane: Config.Auth is nil")
	case cfg.Limiter == nil:
		return nil, errors.New("dataplane: Config.Limiter is nil")
	case cfg.Limit == nil:
		return nil, errors.New("dataplane: Config.Limit is nil")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Audit == nil {
		cfg.Audit = func(string, string, string, string) {}
	}
	s := &Service{
		cfg: cfg,
		log: cfg.Log.With("component", "dataplane"),
		streams: newStreamQuota(cfg.limit(limits.MaxStreams), "event", prometheus.GaugeOpts{
			Name: "repool_event_streams", Help: "Open event streams per tenant.",
		}),
		calls: newCallCount(),
		leaseStreams: newStreamQuota(cfg.limit(limits.MaxLeaseStreams), "Leases", prometheus.GaugeOpts{
			Name: "repool_lease_streams", Help: "Open Leases streams per tenant.",
		}),
		tokensIssued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "repool_auth_tokens_issued_total", Help: "Bearer tokens issued by AuthService.IssueToken.",
		}),
	}
	s.requests, s.duration, s.ok = newRED()
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{s.tokensIssued, s.requests, s.duration, s.streams.gauge, s.leaseStreams.gauge} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("dataplane: registering metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Attach registers the services on a gRPC server.
func (s *Service) Attach(g *grpc.Server) {
	repoolv1.RegisterAuthServiceServer(g, s)
	repoolv1.RegisterPoolServiceServer(g, s)
}

// tenantPool returns the caller's tenant and pool. A call authenticated
// before its tenant was deleted, or admitted before a step-down, gets the
// registry's refusal (toStatus answers them as a deleted tenant's
// credential and as a standby are answered).
func (s *Service) tenantPool(ctx context.Context) (string, *pool.Pool, error) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return "", nil, errNoTenant
	}
	pl, err := s.cfg.Pools.Pool(p.Tenant)
	return p.Tenant, pl, err
}

// IssueToken trades the caller's credential for a bearer token.
func (s *Service) IssueToken(ctx context.Context, _ *repoolv1.IssueTokenRequest) (*repoolv1.IssueTokenResponse, error) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return nil, errNoTenant
	}
	tok, exp, err := s.cfg.Auth.IssueToken(p)
	if err != nil {
		return nil, err
	}
	s.tokensIssued.Inc()
	return &repoolv1.IssueTokenResponse{Token: tok, ExpiresAt: timestamppb.New(exp), Tenant: p.Tenant}, nil
}

// Register adds resources; the pool charges new ones to the tenant's
// resource budget (bad input is refused before, and a refused budget
// creates nothing).
func (s *Service) Register(ctx context.Context, req *repoolv1.RegisterRequest) (*repoolv1.RegisterResponse, error) {
	tenant, p, err := s.tenantPool(ctx)
	if err != nil {
		return nil, err
	}
	specs := make([]pool.Spec, len(req.GetResources()))
	for i, r := range req.GetResources() {
		specs[i] = pool.Spec{ID: r.GetId(), Capacity: int(r.GetCapacity()), Labels: r.GetLabels(),
			MaxUses: int(r.GetMaxUses()), MaxAge: time.Duration(r.GetMaxAgeSeconds()) * time.Second}
	}
	created, existing, err := p.Register(specs)
	if err != nil {
		return nil, err
	}
	if len(created) > 0 && s.cfg.Journal != nil {
		if err := s.cfg.Journal.Registered(ctx, tenant, created); err != nil {
			// Take back what this call created, and only that (another call
			// may have created, and acknowledged, the rest): kept in
			// memory, a retry would find it "existing" and acknowledge it
			// undurably. The pool refunds the budget.
			_, _, _ = p.Deregister(created)
			return nil, s.notDurable(ctx, "registration", err)
		}
	}
	if len(created) > 0 {
		s.cfg.Audit(tenant, actor(ctx), "resources.register", fmt.Sprintf("registered %d, existing %d", len(created), existing))
	}
	return &repoolv1.RegisterResponse{Registered: int32(len(created)), Existing: int32(existing)}, nil
}

// Deregister removes resources; the pool returns their state to the
// budget.
func (s *Service) Deregister(ctx context.Context, req *repoolv1.DeregisterRequest) (*repoolv1.DeregisterResponse, error) {
	tenant, p, err := s.tenantPool(ctx)
	if err != nil {
		return nil, err
	}
	removed, cells, err := p.Deregister(req.GetResourceIds())
	if err != nil {
		return nil, err
	}
	// Journaled even when nothing was removed now: a retry of a call whose
	// journal write failed finds the resources gone and must still make the
	// removal durable before it is acknowledged.
	if s.cfg.Journal != nil {
		if err := s.cfg.Journal.Deregistered(ctx, tenant, req.GetResourceIds()); err != nil {
			return nil, s.notDurable(ctx, "deregistration", err)
		}
	}
	if removed > 0 {
		s.cfg.Audit(tenant, actor(ctx), "resources.deregister", fmt.Sprintf("removed %d resources and %d cells", removed, cells))
	}
	return &repoolv1.DeregisterResponse{Removed: int32(removed)}, nil
}

// actor names the caller in audit entries.
func actor(ctx context.Context) string {
	p, _ := auth.FromContext(ctx)
	return "key:" + p.KeyID
}

func leaseID(id uint64) string { return strconv.FormatUint(id, 10) }

func parseLeaseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%w: lease_id %q is not a lease id", pool.ErrInvalidArgument, s)
	}
	return id, nil
}

func toLease(l pool.Lease) *repoolv1.Lease {
	return &repoolv1.Lease{
		LeaseId: leaseID(l.ID), ResourceId: l.Resource, Context: l.Context,
		FencingToken: l.Token, ExpiresAt: timestamppb.New(l.ExpiresAt), Rebound: l.Rebound,
	}
}

// affinity is the pool.Affinity of a request's affinity fields (field names
// them in messages: "affinity" or "next.affinity").
func affinity(field, key string, ttlSeconds int32) (pool.Affinity, error) {
	hi := int32(pool.MaxAffinityTTL / time.Second)
	if ttlSeconds < 0 || ttlSeconds > hi {
		return pool.Affinity{}, fmt.Errorf("%w: %s_ttl_seconds %d is outside [1, %d] (0: %d)", pool.ErrInvalidArgument, field, ttlSeconds, hi, int(pool.DefaultAffinityTTL/time.Second))
	}
	if key == "" && ttlSeconds != 0 {
		return pool.Affinity{}, fmt.Errorf("%w: %s_ttl_seconds without %s", pool.ErrInvalidArgument, field, field)
	}
	return pool.Affinity{Key: key, TTL: time.Duration(ttlSeconds) * time.Second}, nil
}

// leaseTTL is the lifetime a request's ttl_seconds asks for: it has no
// default, and the message says so in the request's own terms.
func leaseTTL(seconds int32) (time.Duration, error) {
	lo, hi := int32(pool.MinTTL/time.Second), int32(pool.MaxTTL/time.Second)
	switch {
	case seconds == 0:
		return 0, fmt.Errorf("%w: ttl_seconds is required: the lease's lifetime, %d to %d seconds", pool.ErrInvalidArgument, lo, hi)
	case seconds < lo || seconds > hi:
		return 0, fmt.Errorf("%w: ttl_seconds %d is outside [%d, %d]", pool.ErrInvalidArgument, seconds, lo, hi)
	}
	return time.Duration(seconds) * time.Second, nil
}

// Acquire leases the best resource for a context.
func (s *Service) Acquire(ctx context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
	tenant, p, err := s.tenantPool(ctx)
	if err != nil {
		return nil, err
	}
	ttl, err := leaseTTL(req.GetTtlSeconds())
	if err != nil {
		return nil, err
	}
	aff, err := affinity("affinity", req.GetAffinity(), req.GetAffinityTtlSeconds())
	if err != nil {
		return nil, err
	}
	l, err := p.AcquireAffine(req.GetContext(), ttl, req.GetLabels(), req.GetExclude(), aff)
	if err != nil {
		return nil, err
	}
	if s.cfg.Journal != nil {
		if err := s.cfg.Journal.Leased(ctx, tenant, l); err != nil {
			// Unjournaled leases would not survive a failover: take it back.
			_, _ = p.Release(l.ID, l.Token, 0)
			return nil, s.notDurable(ctx, "lease", err)
		}
	}
	return &repoolv1.AcquireResponse{Lease: toLease(l)}, nil
}

// Renew extends a lease.
func (s *Service) Renew(ctx context.Context, req *repoolv1.RenewRequest) (*repoolv1.RenewResponse, error) {
	tenant, p, err := s.tenantPool(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseLeaseID(req.GetLeaseId())
	if err != nil {
		return nil, err
	}
	ttl, err := leaseTTL(req.GetTtlSeconds())
	if err != nil {
		return nil, err
	}
	l, err := p.Renew(id, req.GetFencingToken(), ttl)
	if err != nil {
		return nil, err
	}
	if s.cfg.Journal != nil {
		// Until the renewal is durable the client must not count on it: a
		// successor would expire the lease at its old time.
		if err := s.cfg.Journal.Leased(ctx, tenant, l); err != nil {
			return nil, s.notDurable(ctx, "renewal", err)
		}
	}
	return &repoolv1.RenewResponse{Lease: toLease(l)}, nil
}

// toOutcome converts a request's outcome. A value the enum does not
// define is refused here, named as the client sent it: the pool checks
// only values of its own type, into which it cannot be converted as it is.
// OUTCOME_UNSPECIFIED is 0, which the pool refuses where an outcome is
// required.
func toOutcome(o repoolv1.Outcome) (pool.Outcome, error) {
	switch o {
	case repoolv1.Outcome_SUCCESS:
		return pool.Success, nil
	case repoolv1.Outcome_FAILURE:
		return pool.Failure, nil
	case repoolv1.Outcome_BLOCKED:
		return pool.Blocked, nil
	case repoolv1.Outcome_OUTCOME_UNSPECIFIED:
		return 0, nil
	}
	return 0, fmt.Errorf("%w: outcome %d is not SUCCESS, FAILURE or BLOCKED", pool.ErrInvalidArgument, int32(o))
}

// latency converts a request's latency_ms; the pool checks its range.
func latency(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }

// Release ends a lease; an outcome that creates a cell takes from the
// tenant's cell budget first.
func (s *Service) Release(ctx context.Context, req *repoolv1.ReleaseRequest) (*repoolv1.ReleaseResponse, error) {
	tenant, p, err := s.tenantPool(ctx)
	if err != nil {
		return nil, err
	}
	id, err := parseLeaseID(req.GetLeaseId())
	if err != nil {
		return nil, err
	}
	if req.GetNext() != nil {
		return s.releaseNext(ctx, tenant, p, id, req)
	}
	// An outcome that creates a cell is charged to the budget by the pool,
	// after the lease and token are checked.
	outcome, err := toOutcome(req.GetOutcome())
	if err != nil {
		return nil, err
	}
	if _, err := p.ReleaseTimed(id, req.GetFencingToken(), outcome, latency(req.GetLatencyMs())); err != nil {
		return nil, err
	}
	if s.cfg.Journal != nil {
		// The lease is released; if the journal keeps it, a successor holds
		// it until its expiry, which wastes capacity but never overbooks it.
		if err := s.cfg.Journal.Ended(ctx, tenant, id); err != nil {
			s.log.Warn("lease release not journaled", "tenant", tenant, "lease", id, "err", err)
		}
		if req.GetOutcome() != repoolv1.Outcome_OUTCOME_UNSPECIFIED {
			if err := s.cfg.Journal.Reported(ctx, tenant); err != nil {
				return nil, s.notDurable(ctx, "outcome", err)
			}
		}
	}
	return &repoolv1.ReleaseResponse{}, nil
}

// releaseNext is a Release that also leases the next resource, in one
// critical section of the pool. A bad next field refuses the whole call
// before anything changes. Once the lease is released the call succeeds,
// and the answer's next says whether a next lease was granted or why not.
// The end of the old lease and the new lease are journaled together, as
// one change of one group commit; a next lease the journal did not take is taken back and
// answered as unavailable, the release standing.
func (s *Service) releaseNext(ctx context.Context, tenant string, p *pool.Pool, id uint64, req *repoolv1.ReleaseRequest) (*repoolv1.ReleaseResponse, error) {
	n := req.GetNext()
	ttl, err := leaseTTL(n.GetTtlSeconds())
	if err != nil {
		// The field is next's: say so in its name.
		msg := strings.TrimPrefix(err.Error(), pool.ErrInvalidArgument.Error()+": ")
		return nil, fmt.Errorf("%w: next.%s", pool.ErrInvalidArgument, msg)
	}
	outcome, err := toOutcome(req.GetOutcome())
	if err != nil {
		return nil, err
	}
	aff, err := affinity("next.affinity", n.GetAffinity(), n.GetAffinityTtlSeconds())
	if err != nil {
		return nil, err
	}
	_, l, nextErr, err := p.ReleaseNextTimed(id, req.GetFencingToken(), outcome, latency(req.GetLatencyMs()),
		pool.Next{Context: n.GetContext(), TTL: ttl, Labels: n.GetLabels(), Exclude: n.GetExclude(), KeepFailed: n.GetKeepFailed(), Affinity: aff})
	if err != nil {
		return nil, err
	}
	if s.cfg.Journal != nil {
		if nextErr == nil {
			if err := s.cfg.Journal.Swapped(ctx, tenant, id, l); err != nil {
				// Neither change is known durable: the release stands, as
				// it does when Ended fails; the next lease is taken back.
				s.log.Warn("lease release not journaled", "tenant", tenant, "lease", id, "err", err)
				_, _ = p.Release(l.ID, l.Token, 0)
				nextErr = s.notDurable(ctx, "lease", err)
			}
		} else if err := s.cfg.Journal.Ended(ctx, tenant, id); err != nil {
			s.log.Warn("lease release not journaled", "tenant", tenant, "lease", id, "err", err)
		}
		if req.GetOutcome() != repoolv1.Outcome_OUTCOME_UNSPECIFIED {
			if err := s.cfg.Journal.Reported(ctx, tenant); err != nil {
				if nextErr == nil {
					_, _ = p.Release(l.ID, l.Token, 0)
				}
				return nil, s.notDurable(ctx, "outcome", err)
			}
		}
	}
	if nextErr != nil {
		return &repoolv1.ReleaseResponse{Next: &repoolv1.NextResult{Result: &repoolv1.NextResult_Error{Error: problem(ctx, s.log, nextErr)}}}, nil
	}
	return &repoolv1.ReleaseResponse{Next: &repoolv1.NextResult{Result: &repoolv1.NextResult_Lease{Lease: toLease(l)}}}, nil
}

// notDurable answers a call whose change the journal did not make durable:
// the caller's own deadline or cancellation as such, a store that could not
// take the write (ErrStoreNotWritable, whose text the Journal wrote for
// clients) as "store not writable: REASON", anything else as "not the
// active server" (a fenced store, a journal stopped by a step-down), whose
// cause is logged and never sent, since it may carry the store's text.
func (s *Service) notDurable(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.log.Warn("change not journaled", "change", what, "err", err)
	if errors.Is(err, ErrStoreNotWritable) {
		return err
	}
	return fmt.Errorf("%w: %s not durable", ErrNotActive, what)
}

// Report records an outcome; the pool charges a cell it creates to the
// tenant's cell budget, after it has checked the report (bad input, an
// unknown resource or lease, a stale token are refused as such).
func (s *Service) Report(ctx context.Context, req *repoolv1.ReportRequest) (*repoolv1.ReportResponse, error) {
	tenant, p, err := s.tenantPool(ctx)
	if err != nil {
		return nil, err
	}
	outcome, err := toOutcome(req.GetOutcome())
	if err != nil {
		return nil, err
	}
	rep := pool.Report{Resource: req.GetResourceId(), Context: req.GetContext(), Outcome: outcome, Token: req.GetFencingToken(),
		Latency: latency(req.GetLatencyMs())}
	if req.GetLeaseId() != "" {
		if rep.LeaseID, err = parseLeaseID(req.GetLeaseId()); err != nil {
			return nil, err
		}
	}
	if _, err := p.Report(rep); err != nil {
		return nil, err
	}
	if s.cfg.Journal != nil {
		if err := s.cfg.Journal.Reported(ctx, tenant); err != nil {
			return nil, s.notDurable(ctx, "report", err)
		}
	}
	return &repoolv1.ReportResponse{}, nil
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func toStats(c pool.ContextStats) *repoolv1.ContextStats {
	return &repoolv1.ContextStats{
		Context: c.Context, Successes: c.Successes, Failures: c.Failures, SuccessRate: c.SuccessRate,
		ConsecutiveFailures: int32(c.ConsecutiveFailures), BlockedUntil: ts(c.BlockedUntil), Quarantine: c.Quarantine,
		LatencyMs:       float64(c.Latency) / float64(time.Millisecond),
		RecentSuccesses: int32(c.RecentSuccesses), RecentFailures: int32(c.RecentFailures),
	}
}

func toInfo(r pool.ResourceInfo) *repoolv1.ResourceInfo {
	out := &repoolv1.ResourceInfo{
		Id: r.ID, Capacity: int32(r.Capacity), Labels: r.Labels, ActiveLeases: int32(r.ActiveLeases),
		BlockedUntil: ts(r.BlockedUntil), Aggregate: toStats(r.Aggregate), Quarantine: r.Quarantine,
		State: r.State, RetiredReason: r.RetiredReason, Uses: int32(r.Uses), MaxUses: int32(r.MaxUses),
		MaxAgeSeconds: int32(r.MaxAge / time.Second), RegisteredAt: ts(r.RegisteredAt),
	}
	for _, c := range r.Contexts {
		out.Contexts = append(out.Contexts, toStats(c))
	}
	return out
}

// GetResource returns one resource with its statistics.
func (s *Service) GetResource(ctx context.Context, req *repoolv1.GetResourceRequest) (*repoolv1.GetResourceResponse, error) {
	_, p, err := s.tenantPool(ctx)
	if err != nil {
		return nil, err
	}
	r, err := p.Get(req.GetId())
	if err != nil {
		return nil, err
	}
	return &repoolv1.GetResourceResponse{Resource: toInfo(r)}, nil
}

// ListResources pages through the tenant's resources in id order. The page
// token is the last id of the previous page, encoded.
func (s *Service) ListResources(ctx context.Context, req *repoolv1.ListResourcesRequest) (*repoolv1.ListResourcesResponse, error) {
	_, p, err := s.tenantPool(ctx)
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0 || size > 1000:
		return nil, fmt.Errorf("%w: page_size %d is outside [0, 1000]", pool.ErrInvalidArgument, size)
	case size == 0:
		size = 100
	}
	after := ""
	if tok := req.GetPageToken(); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("%w: page_token is malformed", pool.ErrInvalidArgument)
		}
		after = string(b)
	}
	infos, more := p.List(after, size)
	resp := &repoolv1.ListResourcesResponse{}
	for _, r := range infos {
		resp.Resources = append(resp.Resources, toInfo(r))
	}
	if more && len(infos) > 0 {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(infos[len(infos)-1].ID))
	}
	return resp, nil
}

var kindToProto = map[pool.EventKind]repoolv1.EventKind{
	pool.EventRegistered:   repoolv1.EventKind_EVENT_KIND_REGISTERED,
	pool.EventBlocked:      repoolv1.EventKind_EVENT_KIND_BLOCKED,
	pool.EventRecovered:    repoolv1.EventKind_EVENT_KIND_RECOVERED,
	pool.EventLeaseExpired: repoolv1.EventKind_EVENT_KIND_LEASE_EXPIRED,
	pool.EventRemoved:      repoolv1.EventKind_EVENT_KIND_REMOVED,
	pool.EventRetired:      repoolv1.EventKind_EVENT_KIND_RETIRED,
	pool.EventCapped:       repoolv1.EventKind_EVENT_KIND_QUARANTINE_CAPPED,
	pool.EventGap:          repoolv1.EventKind_EVENT_KIND_UNSPECIFIED,
}

// SubscribeEvents streams the tenant's pool events until the client goes
// away. A subscriber too slow for its buffer is cut off with
// RESOURCE_EXHAUSTED; a suspended tenant's streams end with
// PERMISSION_DENIED.
func (s *Service) SubscribeEvents(req *repoolv1.SubscribeEventsRequest, stream grpc.ServerStreamingServer[repoolv1.Event]) error {
	ctx := stream.Context()
	_, p, err := s.tenantPool(ctx)
	if err != nil {
		return err
	}
	var kinds pool.Kinds
	for _, k := range req.GetKinds() {
		found := false
		for pk, v := range kindToProto {
			if v == k && pk != pool.EventGap {
				kinds |= pool.KindsOf(pk)
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%w: event kind %v", pool.ErrInvalidArgument, k)
		}
	}
	sub := p.Subscribe(kinds, req.GetAfterSeq())
	defer sub.Close()
	// The headers tell the client that the subscription exists: every
	// event from now on reaches it (a client may wait for them before
	// acting on the pool).
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-sub.C:
			if !ok {
				return streamEnd(sub.Err())
			}
			if err := stream.Send(&repoolv1.Event{
				Kind: kindToProto[e.Kind], ResourceId: e.Resource, Context: e.Context,
				At: timestamppb.New(e.At), Detail: e.Detail, Seq: e.Seq,
			}); err != nil {
				return err
			}
		}
	}
}

func streamEnd(why error) error {
	switch {
	case errors.Is(why, pool.ErrSlowSubscriber):
		return fmt.Errorf("%w: %v", pool.ErrExhausted, why)
	case errors.Is(why, tenants.ErrSuspended):
		return auth.ErrSuspended
	case errors.Is(why, ErrNotActive), errors.Is(why, tenants.ErrDeleted):
		return why
	}
	return fmt.Errorf("%w: event stream closed", ErrNotActive)
}
