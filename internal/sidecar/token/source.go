// Package token supplies a provider's bearer tokens: an in-process cache,
// then an optional shared cache in Redis, then AuthService.IssueToken, one
// call at a time per provider (single-flight), refreshed ahead of expiry so
// that no request waits for a token once the first one is held.
//
// A token the server refuses (UNAUTHENTICATED) is dropped — from Redis only
// if Redis still holds that very token — and the call is retried once with a
// fresh one (Source.Do). A second refusal is an invalid-credentials error
// (ErrInvalidCredentials), which the circuit breaker ignores.
//
// Behind a front end that routes by tenant (tenant-sharded groups), every
// call, IssueToken included, must carry the tenant (TenantRouteKey) to
// reach the group that serves it. A Source remembers the tenant its key
// acts for once it has seen it — in a token, or in the TENANT_ELSEWHERE
// refusal of an IssueToken sent without it, which names the caller's own
// tenant — and sends it with every IssueToken from then on; the refused
// IssueToken is sent again at once with the tenant.
package token

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
)

// ErrInvalidCredentials is matched (errors.Is) by the error of a call whose
// API key or fresh token the server refused. The error keeps the server's
// UNAUTHENTICATED status.
var ErrInvalidCredentials = errors.New("invalid credentials")

// ErrClosed is returned by a Source after Close.
var ErrClosed = errors.New("token source closed")

// refreshRetry is how long after a failed fetch the next refresh-ahead may
// start, so that an outage does not turn every request into an IssueToken.
const refreshRetry = time.Second

// flightKey is the one single-flight key of a Source: it fetches one token.
const flightKey = "token"

// Issuer is the part of repoolv1.AuthServiceClient a Source uses.
type Issuer interface {
	IssueToken(ctx context.Context, in *repoolv1.IssueTokenRequest, opts ...grpc.CallOption) (*repoolv1.IssueTokenResponse, error)
}

var _ Issuer = repoolv1.AuthServiceClient(nil)

// Config configures New.
type Config struct {
	// Provider names the source in keys, metrics and logs. Required.
	Provider string
	// APIKey is sent as x-api-key to IssueToken. Required; never logged.
	APIKey string
	// Issuer issues tokens. Required.
	Issuer Issuer
	// Policy is the token policy; zero fields mean their defaults.
	Policy Policy
	// Redis, when set, is the shared cache. The Source owns its client.
	Redis *Redis
	// Clock tells the time for token lifetimes and schedules the
	// background refresher's waits. Default the wall clock.
	Clock clock.Clock
	// Log receives the source's logs. Default discards them.
	Log *slog.Logger
	// Metrics counts lookups, issuances, refreshes and Redis errors.
	// Default: metrics that are not registered anywhere.
	Metrics *Metrics
}

// Token is a bearer token with its lifetime and its tenant.
type Token struct {
	Value     string
	IssuedAt  time.Time
	ExpiresAt time.Time
	// Tenant is the tenant the token names (IssueTokenResponse.tenant), ""
	// from a server that does not say.
	Tenant string

	usableUntil time.Time // ExpiresAt - skew
	refreshAt   time.Time // jittered refresh point
	bearer      string    // "Bearer " + Value
	raw         string    // Redis value, for compare-and-delete
}

// Source supplies one provider's tokens. Safe for concurrent use. It runs
// one background goroutine (the refresher) until Close.
type Source struct {
	provider string
	apiKey   string
	issuer   Issuer
	policy   Policy
	clock    clock.Clock
	log      *slog.Logger
	redis    *shared // nil without Redis

	local     prometheus.Counter // lookups served by the local cache
	fromRedis prometheus.Counter
	issued    prometheus.Counter
	issuances *prometheus.CounterVec // curried: code
	// Fetches (past the local cache) by reason; see fetch.
	ahead, miss, unauthenticated prometheus.Counter

	cur     atomic.Pointer[Token]
	tenant  atomic.Pointer[string] // the key's tenant once known; see Tenant
	nextTry atomic.Int64           // clock unix nanos before which no refresh-ahead starts
	failing atomic.Bool            // a refresh-ahead failed and was logged
	group   singleflight.Group

	life context.Context // cancelled by Close; parent of every fetch
	stop context.CancelFunc
	wake chan struct{} // re-arm the refresher: a new token, or one past its refresh point
	done chan struct{} // closed when the refresher returns
}

// New returns a Source holding no token yet and starts its refresher.
func New(cfg Config) (*Source, error) {
	switch {
	case cfg.Provider == "":
		return nil, errors.New("token: Config.Provider is required")
	case cfg.APIKey == "":
		return nil, fmt.Errorf("token: provider %q: Config.APIKey is required", cfg.Provider)
	case cfg.Issuer == nil:
		return nil, fmt.Errorf("token: provider %q: Config.Issuer is required", cfg.Provider)
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("token: provider %q: %w", cfg.Provider, err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	log := cfg.Log.With("provider", cfg.Provider)
	l := prometheus.Labels{"provider": cfg.Provider}
	s := &Source{
		provider:  cfg.Provider,
		apiKey:    cfg.APIKey,
		issuer:    cfg.Issuer,
		policy:    cfg.Policy.WithDefaults(),
		clock:     cfg.Clock,
		log:       log,
		local:     cfg.Metrics.lookups.WithLabelValues(cfg.Provider, TierLocal),
		fromRedis: cfg.Metrics.lookups.WithLabelValues(cfg.Provider, TierRedis),
		issued:    cfg.Metrics.lookups.WithLabelValues(cfg.Provider, TierIssue),
		issuances: cfg.Metrics.issuances.MustCurryWith(l),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),

		ahead:           cfg.Metrics.refreshes.WithLabelValues(cfg.Provider, reasonAhead),
		miss:            cfg.Metrics.refreshes.WithLabelValues(cfg.Provider, reasonMiss),
		unauthenticated: cfg.Metrics.refreshes.WithLabelValues(cfg.Provider, reasonUnauthenticated),
	}
	if cfg.Redis != nil {
		if cfg.Redis.Addr == "" {
			return nil, fmt.Errorf("token: provider %q: Redis.Addr is required", cfg.Provider)
		}
		s.redis = newShared(*cfg.Redis, Key(cfg.Redis.WithDefaults().KeyPrefix, cfg.Provider, cfg.APIKey),
			log, cfg.Metrics.redisErrors.MustCurryWith(l))
	}
	s.life, s.stop = context.WithCancel(context.Background())
	go s.refresher()
	return s, nil
}

// Status is the state of a Source's token, for the status page.
type Status struct {
	// Held: the Source holds a token now (it may have expired if the
	// provider stopped answering).
	Held bool
	// IssuedAt and ExpiresAt are the held token's; Tenant the tenant it
	// names.
	IssuedAt, ExpiresAt time.Time
	Tenant              string
	// Failing: the latest refresh ahead of expiry failed; the held token
	// is served until it expires.
	Failing bool
}

// Status returns the state of the Source's token. It never fetches one.
func (s *Source) Status() Status {
	st := Status{Failing: s.failing.Load(), Tenant: s.Tenant()}
	if t := s.cur.Load(); t != nil {
		st.Held, st.IssuedAt, st.ExpiresAt = true, t.IssuedAt, t.ExpiresAt
		if t.Tenant != "" {
			st.Tenant = t.Tenant
		}
	}
	return st
}

// Key is the Redis key of a provider's token: one per provider and API key,
// without revealing the key.
func Key(prefix, provider, apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return prefix + "token:" + provider + ":" + hex.EncodeToString(sum[:8])
}

// Close stops the refresher, waits for a fetch in flight, and closes the
// Redis client. Call it once no caller uses the Source any more.
func (s *Source) Close() error {
	s.stop()
	<-s.done
	// Do joins a fetch in flight (which ends soon: its context is gone) and
	// returns when it has.
	s.group.Do(flightKey, func() (any, error) { return nil, ErrClosed })
	if s.redis != nil {
		return s.redis.close()
	}
	return nil
}

// Token returns a usable token: the cached one (waking the refresher if it
// is past its refresh point), else the result of the shared fetch. It waits
// no longer than ctx allows; the fetch goes on for the other callers.
func (s *Source) Token(ctx context.Context) (*Token, error) {
	now := s.clock.Now()
	t := s.cur.Load()
	if t != nil && now.Before(t.usableUntil) {
		s.local.Inc()
		if !now.Before(t.refreshAt) && now.UnixNano() >= s.nextTry.Load() {
			s.poke()
		}
		return t, nil
	}
	// t (nil or expired) is the token to replace. Loading s.cur again
	// here could see the token a flight has just fetched, and replace that
	// one too.
	return s.await(ctx, t, s.miss)
}

// poke wakes the refresher without blocking.
func (s *Source) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// await joins (or starts) the shared fetch of a token other than stale and
// waits for it or for ctx; reason counts the fetch if it starts one. If the
// fetch it joined had started too early to know that stale is bad and
// returns it anyway, it fetches once more.
func (s *Source) await(ctx context.Context, stale *Token, reason prometheus.Counter) (*Token, error) {
	for range 2 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r := <-s.group.DoChan(flightKey, func() (any, error) { return s.fetch(stale, reason) }):
			if r.Err != nil {
				return nil, r.Err
			}
			t := r.Val.(*Token)
			if stale == nil || t.Value != stale.Value {
				return t, nil
			}
		}
	}
	return nil, fmt.Errorf("token: provider %q: the fetched token is the one being replaced", s.provider)
}

// fetch runs inside the single flight, on a context no caller owns: the
// cached token if another flight already replaced stale, else the Redis
// entry if it is usable and is not stale, else a new token from
// IssueToken, stored in both caches. Going past the local cache counts
// one refresh for reason (s.ahead, s.miss or s.unauthenticated); only a
// refresh-ahead (s.ahead), which nobody waits for, logs its failure.
func (s *Source) fetch(stale *Token, reason prometheus.Counter) (*Token, error) {
	if err := s.life.Err(); err != nil {
		return nil, ErrClosed
	}
	fresh := func(t *Token, now time.Time) bool {
		return t != nil && now.Before(t.usableUntil) && (stale == nil || t.Value != stale.Value)
	}
	if t := s.cur.Load(); fresh(t, s.clock.Now()) && s.clock.Now().Before(t.refreshAt) {
		return t, nil
	}
	reason.Inc()
	ctx, cancel := context.WithTimeout(s.life, s.policy.IssueTimeout)
	defer cancel()
	// After a refusal the shared entry is not trusted: another sidecar's
	// token there may have been refused too (a key rotation revokes them
	// all), and the call has only one retry to spend.
	if s.redis != nil && reason != s.unauthenticated {
		if e, raw := s.redis.get(ctx); e != nil {
			if t := s.token(e, raw); fresh(t, s.clock.Now()) {
				s.fromRedis.Inc()
				s.hold(t)
				return t, nil
			}
		}
	}
	t, err := s.issue(ctx)
	if err == nil && !s.clock.Now().Before(t.usableUntil) {
		// Issuing again at once would get the same: wait as after a failure.
		err = fmt.Errorf("token: provider %q: IssueToken answered a token that expires at %v, before it can be used (check the clocks)", s.provider, t.ExpiresAt)
	}
	if err != nil {
		s.nextTry.Store(s.clock.Now().Add(refreshRetry).UnixNano())
		if reason == s.ahead && !s.failing.Swap(true) {
			// Nobody waits for a refresh-ahead: this is the only report,
			// once until a fetch succeeds again.
			s.log.Warn("token refresh failing; serving the current token until it expires", "err", err)
		}
		return nil, err
	}
	if s.failing.Swap(false) {
		s.log.Info("token refresh recovered")
	}
	if s.redis != nil {
		e := entry{Token: t.Value, IssuedAt: t.IssuedAt.UnixMilli(), ExpiresAt: t.ExpiresAt.UnixMilli(), Tenant: t.Tenant}
		t.raw = s.redis.set(ctx, e, t.usableUntil.Sub(s.clock.Now()))
	}
	s.issued.Inc()
	s.hold(t)
	return t, nil
}

// Tenant returns the tenant the source's API key acts for, "" until a
// token or a TENANT_ELSEWHERE refusal has named it.
func (s *Source) Tenant() string {
	if t := s.tenant.Load(); t != nil {
		return *t
	}
	return ""
}

func (s *Source) setTenant(tenant string) {
	if tenant != "" && tenant != s.Tenant() {
		s.tenant.Store(&tenant)
	}
}

// issue calls IssueToken with the API key and, once known, the tenant
// (TenantRouteKey), by which a front end with tenant-sharded groups sends
// it to the tenant's group. An IssueToken refused as TENANT_ELSEWHERE (it
// reached a group that does not serve the tenant: sent before the tenant
// was known, or while the front end's map lagged a move) names the
// caller's tenant; when that is news, it is remembered and the call sent
// once more, at once, with it. Any other refusal, or a second one, is the
// error (UNAVAILABLE: the retry layer tries again).
func (s *Source) issue(ctx context.Context) (*Token, error) {
	sent := s.Tenant()
	resp, err := s.issueAs(ctx, sent)
	if named := elsewhereTenant(err); named != "" && named != sent {
		s.log.Info("IssueToken reached a group that does not serve the key's tenant; sending it again with the tenant", "tenant", named)
		s.setTenant(named)
		resp, err = s.issueAs(ctx, named)
	}
	switch {
	case status.Code(err) == codes.Unauthenticated:
		return nil, &credentialsError{err: err}
	case err != nil:
		return nil, err
	case resp.GetToken() == "" || resp.GetExpiresAt() == nil:
		return nil, status.Error(codes.Internal, "IssueToken answered without a token or an expiry")
	}
	s.setTenant(resp.GetTenant())
	now := s.clock.Now()
	return s.token(&entry{Token: resp.GetToken(), IssuedAt: now.UnixMilli(), ExpiresAt: resp.GetExpiresAt().AsTime().UnixMilli(), Tenant: resp.GetTenant()}, ""), nil
}

// issueAs calls IssueToken once, with the tenant's route entry unless
// tenant is empty, and counts the answer.
func (s *Source) issueAs(ctx context.Context, tenant string) (*repoolv1.IssueTokenResponse, error) {
	md := []string{"x-api-key", s.apiKey}
	if tenant != "" {
		md = append(md, repoolv1.TenantRouteKey, tenant)
	}
	resp, err := s.issuer.IssueToken(metadata.AppendToOutgoingContext(ctx, md...), &repoolv1.IssueTokenRequest{})
	s.issuances.WithLabelValues(status.Code(err).String()).Inc()
	return resp, err
}

// elsewhereTenant returns the tenant an UNAVAILABLE TENANT_ELSEWHERE
// refusal names (the caller's own), "" for any other error.
func elsewhereTenant(err error) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == repoolv1.ErrorDomain && info.GetReason() == repoolv1.ReasonTenantElsewhere {
			return info.GetMetadata()[repoolv1.ErrorInfoTenant]
		}
	}
	return ""
}

// token builds a Token from an entry, with its jittered refresh point.
func (s *Source) token(e *entry, raw string) *Token {
	t := &Token{
		Value:     e.Token,
		IssuedAt:  time.UnixMilli(e.IssuedAt),
		ExpiresAt: time.UnixMilli(e.ExpiresAt),
		Tenant:    e.Tenant,
		bearer:    "Bearer " + e.Token,
		raw:       raw,
	}
	// The skew keeps back at most half the token's lifetime: a skew as
	// long as the lifetime would make every token unusable on arrival.
	skew := s.policy.Skew
	if half := t.ExpiresAt.Sub(t.IssuedAt) / 2; half < skew {
		skew = max(half, 0)
	}
	t.usableUntil = t.ExpiresAt.Add(-skew)
	life := t.usableUntil.Sub(t.IssuedAt)
	frac := s.policy.RefreshAt - 0.05*rand.Float64()
	t.refreshAt = t.IssuedAt.Add(time.Duration(frac * float64(life)))
	return t
}

// hold caches t locally and re-arms the refresher.
func (s *Source) hold(t *Token) {
	s.setTenant(t.Tenant)
	s.cur.Store(t)
	s.nextTry.Store(0)
	s.poke()
}

// Bearer returns the authorization metadata value: "Bearer <token>".
func (t *Token) Bearer() string { return t.bearer }

// Outgoing returns ctx with the call metadata for t: authorization
// (Bearer) and, when t names its tenant, x-repool-tenant
// (repoolv1.TenantRouteKey), by which a front end with tenant-sharded
// groups routes the call to the tenant's group.
func (t *Token) Outgoing(ctx context.Context) context.Context {
	if t.Tenant == "" {
		return metadata.AppendToOutgoingContext(ctx, "authorization", t.bearer)
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", t.bearer, repoolv1.TenantRouteKey, t.Tenant)
}

// Refresh replaces a token the server refused: it drops bad (Invalidate)
// and returns another token from the shared fetch.
func (s *Source) Refresh(ctx context.Context, bad *Token) (*Token, error) {
	s.Invalidate(ctx, bad)
	return s.await(ctx, bad, s.unauthenticated)
}

// Invalidate drops t from the caches if they still hold it: locally by
// compare-and-swap, in Redis by compare-and-delete.
func (s *Source) Invalidate(ctx context.Context, t *Token) {
	s.cur.CompareAndSwap(t, nil)
	if s.redis != nil && t.raw != "" {
		s.redis.delete(ctx, t.raw)
	}
}

// Do is the authentication layer of a call: it runs call with a context
// carrying the token's metadata (Token.Outgoing: the bearer, and the
// tenant when known) and, if the server answers UNAUTHENTICATED, drops
// that token, fetches a fresh one through the single flight and runs call
// once more. It returns call's error, or the token fetch's error; a second
// UNAUTHENTICATED (or IssueToken refusing the key) matches
// ErrInvalidCredentials.
func (s *Source) Do(ctx context.Context, call func(ctx context.Context) error) error {
	return s.DoToken(ctx, func(ctx context.Context, _ *Token) error { return call(ctx) })
}

// DoToken is Do for a call that needs the token itself as well (a Leases
// stream is opened with it): call gets the context Do would give it and
// the token that context carries.
func (s *Source) DoToken(ctx context.Context, call func(ctx context.Context, t *Token) error) error {
	t, err := s.Token(ctx)
	if err != nil {
		return err
	}
	err = call(t.Outgoing(ctx), t)
	if status.Code(err) != codes.Unauthenticated {
		return err
	}
	if t, err = s.Refresh(ctx, t); err != nil {
		return err
	}
	if err = call(t.Outgoing(ctx), t); status.Code(err) == codes.Unauthenticated {
		return &credentialsError{err: err}
	}
	return err
}

// refresher refreshes the held token at its refresh point, so that no
// request waits for a token at expiry. It sleeps until the refresh point
// (or, after a failed fetch, until the next try) and is woken early by a
// new token or by a request that finds the token past its refresh point.
func (s *Source) refresher() {
	defer close(s.done)
	timer := s.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var fire <-chan time.Time
		if t := s.cur.Load(); t != nil {
			at := t.refreshAt
			if next := time.Unix(0, s.nextTry.Load()); next.After(at) {
				at = next
			}
			timer.Reset(max(at.Sub(s.clock.Now()), 0))
			fire = timer.Chan()
		}
		select {
		case <-s.life.Done():
			return
		case <-s.wake:
			timer.Stop()
		case <-fire:
			t := s.cur.Load()
			now := s.clock.Now()
			if t == nil || now.Before(t.refreshAt) || now.UnixNano() < s.nextTry.Load() {
				continue
			}
			select {
			case <-s.group.DoChan(flightKey, func() (any, error) { return s.fetch(t, s.ahead) }):
			case <-s.life.Done():
				return
			}
		}
	}
}

// credentialsError is an UNAUTHENTICATED answer after the one refresh.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return "invalid credentials: " + e.err.Error() }

// Is makes the error match ErrInvalidCredentials.
func (e *credentialsError) Is(target error) bool { return target == ErrInvalidCredentials }

// Unwrap returns the server's UNAUTHENTICATED status error.
func (e *credentialsError) Unwrap() error { return e.err }
