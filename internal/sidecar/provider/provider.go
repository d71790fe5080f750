// Package provider is one reputation cluster as the sidecar sees it: a gRPC
// connection to its VIP, its tokens, its circuit breaker, its retrier and
// retry budget, and the one function that composes them (Provider.Do).
package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar/leases"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
)

// Method names a PoolService call, for metrics.
type Method int

// The PoolService calls the sidecar makes.
const (
	MethodRegister Method = iota
	MethodDeregister
	MethodAcquire
	MethodRenew
	MethodRelease
	MethodReport
	MethodSubscribeEvents
	MethodGetResource
	MethodListResources
	numMethods
)

// String returns the gRPC method name, for example "Acquire".
func (m Method) String() string {
	switch m {
	case MethodRegister:
		return "Register"
	case MethodDeregister:
		return "Deregister"
	case MethodAcquire:
		return "Acquire"
	case MethodRenew:
		return "Renew"
	case MethodRelease:
		return "Release"
	case MethodReport:
		return "Report"
	case MethodSubscribeEvents:
		return "SubscribeEvents"
	case MethodGetResource:
		return "GetResource"
	case MethodListResources:
		return "ListResources"
	}
	return "Method(" + strconv.Itoa(int(m)) + ")"
}

// Call is one attempt of a PoolService call: it must use ctx (which carries
// the bearer token and the call's deadline) and pass opts on to the client
// method.
type Call func(ctx context.Context, pool repoolv1.PoolServiceClient, opts ...grpc.CallOption) error

// Config configures New. Every field but Health is required.
type Config struct {
	// Health is the upstream's gRPC health service, which Ready asks
	// (CheckHealth); nil means Ready checks the token only.
	Health healthpb.HealthClient
	// Name is the provider's name in URLs, metrics and logs.
	Name string
	// Timeout bounds one logical call, its retries included.
	Timeout time.Duration
	// Pool is the provider's PoolService client.
	Pool repoolv1.PoolServiceClient
	// Tokens supplies the provider's bearer tokens.
	Tokens *token.Source
	// Breaker is the provider's circuit breaker.
	Breaker *resilience.Breaker
	// Retrier retries transient failures within the provider's budget.
	Retrier *resilience.Retrier
	// Bulkhead bounds the attempts in flight to the provider.
	Bulkhead *resilience.Bulkhead
	// Metrics counts the calls.
	Metrics *Metrics
	// Leases carries Acquire, Release, Report and Renew on the server's
	// Leases streams (unary calls when it cannot); nil makes them unary.
	Leases *leases.Client
}

// Provider makes calls to one reputation cluster. Safe for concurrent use.
// It owns nothing that needs closing: the connection and the token source
// belong to whoever created them, and may outlive the Provider across
// configuration reloads.
type Provider struct {
	name     string
	timeout  time.Duration
	pool     repoolv1.PoolServiceClient
	tokens   *token.Source
	breaker  *resilience.Breaker
	retrier  *resilience.Retrier
	bulkhead *resilience.Bulkhead
	series   *series
	health   healthpb.HealthClient
	leases   *leases.Client
	recent   recentBuckets
}

// New returns a Provider.
func New(cfg Config) (*Provider, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("provider: Config.Name is required")
	case cfg.Timeout <= 0, cfg.Pool == nil, cfg.Tokens == nil, cfg.Breaker == nil, cfg.Retrier == nil, cfg.Bulkhead == nil, cfg.Metrics == nil:
		return nil, fmt.Errorf("provider %q: Config.Timeout, Pool, Tokens, Breaker, Retrier, Bulkhead and Metrics are required", cfg.Name)
	}
	return &Provider{
		name: cfg.Name, timeout: cfg.Timeout, pool: cfg.Pool, tokens: cfg.Tokens,
		breaker: cfg.Breaker, retrier: cfg.Retrier, bulkhead: cfg.Bulkhead, health: cfg.Health, leases: cfg.Leases,
		series: newSeries(cfg.Metrics, cfg.Name,
			resilience.FastFailCircuitOpen, resilience.FastFailBulkhead, resilience.FastFailTimeout, resilience.FastFailUpstream),
	}, nil
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Breaker returns the provider's circuit breaker.
func (p *Provider) Breaker() *resilience.Breaker { return p.breaker }

// Bulkhead returns the provider's bulkhead.
func (p *Provider) Bulkhead() *resilience.Bulkhead { return p.bulkhead }

// Tokens returns the state of the provider's bearer token.
func (p *Provider) Tokens() token.Status { return p.tokens.Status() }

// Do runs one logical call to the provider. This is the only place where
// the resilience layers are composed, and their order is the design
// (docs/sidecar.md):
//
//		breaker.Execute( retry( attempt rules( bulkhead( auth( call ) ) ) ) )
//
//	 1. The breaker is outermost, so an open breaker rejects the call before
//	    any attempt, any token fetch and any timer — in well under a
//	    microsecond, without allocating — and so it sees one outcome per
//	    logical call: the final one, after retries. A breaker inside the
//	    retry would count every attempt and trip on one unlucky call's
//	    retries.
//	 2. The retrier runs within the call's deadline (Timeout, which starts
//	    only once the breaker has admitted the call) and the provider's retry
//	    budget; it retries UNAVAILABLE only.
//	    A retry is not made once the breaker has opened meanwhile.
//	 3. Each attempt is admitted by breaker.Start, the attempt-level rules
//	    (an outage: every attempt failing as unavailable for outage_after;
//	    silence: attempts in flight and no answer for silence_after), which
//	    open the breaker; silence ends the attempts in flight at once, and
//	    the attempts waiting in the bulkhead with them.
//	 4. The bulkhead (its own type, resilience.Bulkhead) then bounds the
//	    attempts in flight by a limit that follows the provider's latency:
//	    while the provider answers fast an attempt beyond the limit waits
//	    for a slot (and the limit grows), while it is slow one is refused at
//	    once; a refusal is not retried and not counted by the breaker. It is
//	    inside the retry so that a call waiting to retry holds no slot, and
//	    inside the attempt rules so that their abort ends its waits.
//	 5. The auth layer is innermost, so each attempt carries a current token,
//	    (on a Leases stream opened with that token, when Config.Leases is
//	    set: leases.Client),
//	    and a token the server refuses is replaced and the attempt repeated
//	    once without spending a retry; an IssueToken that fails with
//	    UNAVAILABLE is retried like the call itself.
//
// The error is the call's (a gRPC status error, possibly wrapped), or one
// matching resilience.ErrCircuitOpen, resilience.ErrBulkheadFull, resilience.ErrBudgetSpent,
// token.ErrInvalidCredentials or a context error. A RESOURCE_EXHAUSTED
// answer with a retry-after trailer has a RetryAfter() time.Duration
// method, as does a circuit-open rejection.
func (p *Provider) Do(ctx context.Context, method Method, call Call) error {
	start := time.Now()
	err := p.breaker.Execute(func() error {
		ctx, cancel := context.WithTimeout(ctx, p.timeout)
		defer cancel()
		var trailer metadata.MD
		retry := false
		// A wait to retry ends as soon as the breaker opens (other calls
		// found the provider down: the next attempt is then refused at
		// once, circuit-open) or, one waiting call after another, when the
		// provider answers again (a failover's new active server is up),
		// instead of at the end of its backoff.
		err := p.retrier.DoUntil(ctx, p.breaker, func(ctx context.Context) error {
			if retry {
				if err := p.breaker.Admit(); err != nil {
					return err
				}
			}
			retry = true
			a, err := p.breaker.Start(ctx)
			if err != nil {
				return err
			}
			if err := p.bulkhead.Enter(a.Context()); err != nil {
				return a.End(err)
			}
			err = p.tokens.DoToken(a.Context(), func(ctx context.Context, t *token.Token) error {
				trailer = nil
				if a.SentAt().IsZero() { // from here the provider owes an answer
					a.Sent()          // (the silence rule)
					p.bulkhead.Sent() // (the bulkhead's slowness)
				}
				pool := p.pool
				if p.leases != nil {
					pool = p.leases.With(t)
				}
				return call(ctx, pool, grpc.Trailer(&trailer))
			})
			p.bulkhead.Leave(a.SentAt())
			return a.End(err)
		})
		return withRetryAfter(ownTimeout(ctx, err, p.timeout), trailer)
	})
	p.observe(method, start, err)
	return err
}

// ownTimeout reports an UNAVAILABLE that arrives once the call's own
// deadline (ctx, from the provider's timeout) has passed as what it is, the
// sidecar's timeout: the server gave up because our deadline reached it.
// The server's deadline is never before ours (grpc-go rounds grpc-timeout
// up), so such an answer cannot come early. It is decided on the clock, not
// on ctx.Err(), which can lag the deadline by however long the runtime
// takes to run ctx's timer (much longer under the race detector).
// resilience.Code sees only the error, so this is decided here, in Do.
func ownTimeout(ctx context.Context, err error, timeout time.Duration) error {
	if err == nil || resilience.Code(err) != codes.Unavailable {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok || time.Now().Before(deadline) {
		return err
	}
	return status.Errorf(codes.DeadlineExceeded, "no answer within the provider timeout (%v): %s", timeout, status.Convert(err).Message())
}

// observe records a finished call.
func (p *Provider) observe(method Method, start time.Time, err error) {
	p.series.call(method, resilience.Code(err)).Inc()
	p.series.observer(method).Observe(time.Since(start).Seconds())
	reason := resilience.FastFail(err)
	if reason != "" {
		p.series.fastFail[reason].Inc()
	}
	p.recent.add(time.Now(), reason != "")
}

// Subscribe opens the provider's event stream. The breaker only admits the
// stream (an open breaker rejects it with an error matching
// resilience.ErrCircuitOpen); a stream has no single outcome for it to
// count. A token refused before the first event is replaced once, as in Do.
// The stream ends with ctx.
func (p *Provider) Subscribe(ctx context.Context, req *repoolv1.SubscribeEventsRequest) (*EventStream, error) {
	if err := p.breaker.Admit(); err != nil {
		p.observe(MethodSubscribeEvents, time.Now(), err)
		return nil, err
	}
	s := &EventStream{p: p, ctx: ctx, req: req}
	tok, err := p.tokens.Token(ctx)
	if err == nil {
		err = s.open(tok)
		if status.Code(err) == codes.Unauthenticated {
			s.retried = true
			if tok, err = p.tokens.Refresh(ctx, tok); err == nil {
				err = s.open(tok)
			}
		}
	}
	if err != nil {
		p.observe(MethodSubscribeEvents, time.Now(), err)
		return nil, err
	}
	return s, nil
}

// EventStream is an open event stream. Not safe for concurrent use.
type EventStream struct {
	p        *Provider
	ctx      context.Context
	req      *repoolv1.SubscribeEventsRequest
	tok      *token.Token
	stream   grpc.ServerStreamingClient[repoolv1.Event]
	received bool // an event arrived: a refusal can no longer be retried
	retried  bool
}

func (s *EventStream) open(tok *token.Token) error {
	s.tok = tok
	stream, err := s.p.pool.SubscribeEvents(tok.Outgoing(s.ctx), s.req)
	s.stream = stream
	if err != nil {
		return err
	}
	// The server sends its headers once it has subscribed: from then on no
	// event is missed. A refusal ends the stream without headers (nil, nil);
	// its status is what Recv returns, and it is returned here, so that the
	// caller answers the refusal instead of a stream that has ended.
	md, err := stream.Header()
	if err != nil || md != nil {
		return err
	}
	if _, err = stream.Recv(); err == nil || errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "the event stream ended before the server subscribed")
	}
	return err
}

// Recv returns the next event, or the error that ended the stream.
func (s *EventStream) Recv() (*repoolv1.Event, error) {
	for {
		ev, err := s.stream.Recv()
		if err == nil {
			s.received = true
			return ev, nil
		}
		if s.received || s.retried || status.Code(err) != codes.Unauthenticated {
			s.p.observe(MethodSubscribeEvents, time.Now(), err)
			return nil, err
		}
		s.retried = true
		tok, terr := s.p.tokens.Refresh(s.ctx, s.tok)
		if terr != nil {
			return nil, terr
		}
		if err := s.open(tok); err != nil {
			return nil, err
		}
	}
}

// Ready returns nil when the provider can serve calls: the sidecar holds a
// valid token for it (its API key is accepted) and its server passes
// CheckHealth. Otherwise the error says which, in words for an operator.
// It bypasses the breaker and the retrier, and it is not counted in the
// call metrics.
func (p *Provider) Ready(ctx context.Context) error {
	if _, err := p.tokens.Token(ctx); err != nil {
		switch {
		case errors.Is(err, token.ErrInvalidCredentials):
			return errors.New("the provider refuses the sidecar's API key")
		case ctx.Err() != nil:
			return errors.New("no token: the provider did not answer in time")
		}
		return fmt.Errorf("no token: %s", resilience.Cause(err))
	}
	if p.health == nil {
		return nil
	}
	err := CheckHealth(ctx, p.health)
	var ns *notServingError
	switch {
	case err == nil, errors.As(err, &ns):
		return err
	case ctx.Err() != nil:
		return errors.New("the provider's health check did not answer in time")
	}
	return fmt.Errorf("the provider's health check failed: %s", resilience.Cause(err))
}

// CheckHealth is a provider's one health check, both the half-open
// breaker's probe and the second half of Ready: the standard gRPC health
// check of the server behind the VIP, which needs no token. The rule:
// SERVING passes, and so does a server without the health service
// (UNIMPLEMENTED), which answered — all a check asks of a server that is
// up (Ready has had a token from it already). Anything else fails: another
// status (NOT_SERVING: a standby, or starting) as an UNAVAILABLE error, no
// answer or any other error as itself.
func CheckHealth(ctx context.Context, client healthpb.HealthClient, opts ...grpc.CallOption) error {
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	switch {
	case status.Code(err) == codes.Unimplemented:
		return nil
	case err != nil:
		return err
	case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return &notServingError{resp.GetStatus()}
	}
	return nil
}

// notServingError is a health check's answer other than SERVING.
type notServingError struct {
	st healthpb.HealthCheckResponse_ServingStatus
}

func (e *notServingError) Error() string {
	return fmt.Sprintf("the provider answers %s (a standby, or starting)", e.st)
}

// GRPCStatus makes it an UNAVAILABLE status error, as the breaker counts
// it.
func (e *notServingError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// rateLimitedError is a RESOURCE_EXHAUSTED answer with the server's
// retry-after hint.
type rateLimitedError struct {
	err   error
	after time.Duration
}

func (e *rateLimitedError) Error() string { return e.err.Error() }

// Unwrap returns the status error.
func (e *rateLimitedError) Unwrap() error { return e.err }

// RetryAfter is the server's hint.
func (e *rateLimitedError) RetryAfter() time.Duration { return e.after }

// withRetryAfter attaches the trailer's retry-after hint to a
// RESOURCE_EXHAUSTED error.
func withRetryAfter(err error, trailer metadata.MD) error {
	if resilience.Code(err) != codes.ResourceExhausted {
		return err
	}
	v := trailer.Get(repoolv1.RetryAfterKey)
	if len(v) == 0 {
		return err
	}
	ms, perr := strconv.ParseInt(v[0], 10, 64)
	if perr != nil || ms <= 0 {
		return err
	}
	return &rateLimitedError{err: err, after: time.Duration(ms) * time.Millisecond}
}

// Reconnector is the connection a Probe reconnects: a *grpc.ClientConn.
type Reconnector interface {
	ResetConnectBackoff()
}

// Probe is the half-open breaker's probe: CheckHealth, made so that a
// connection being made again is not taken for a failed provider. After a
// VIP move (HAProxy stopped on its holder, the holder's link cut) the
// sidecar's connection is either waiting out grpc-go's reconnect backoff
// (a call fails at once with the last connect error) or dead (a call waits
// until the new holder resets it). So the probe reconnects at once
// (ResetConnectBackoff), waits for the connection (WaitForReady) within
// ctx, and asks again, after probeRetryPause, when the connection it went
// out on broke before any answer (brokenConnection). An answer — SERVING,
// NOT_SERVING, a proxy's HTTP status, any gRPC status of a server — ends it,
// and so does ctx: with nothing listening it fails at ctx's deadline, with
// the last connect error (lastConnectError).
func Probe(ctx context.Context, conn Reconnector, client healthpb.HealthClient) error {
	for {
		conn.ResetConnectBackoff()
		err := CheckHealth(ctx, client, grpc.WaitForReady(true))
		if err == nil || ctx.Err() != nil || !brokenConnection(err) {
			return lastConnectError(err)
		}
		if clock.Sleep(ctx, clock.Real{}, probeRetryPause) != nil {
			return err
		}
	}
}

// lastConnectError is err, or, for a probe that waited for a connection
// until its deadline, the connection's last error as grpc-go reports it
// to a call that does not wait (UNAVAILABLE, which resilience.Cause words:
// "connection refused by ADDR: nothing is listening there"), in place of
// "no answer in time".
func lastConnectError(err error) error {
	if status.Code(err) != codes.DeadlineExceeded {
		return err
	}
	if _, last, ok := strings.Cut(status.Convert(err).Message(), "latest balancer error: "); ok {
		return status.Error(codes.Unavailable, last)
	}
	return err
}

// probeRetryPause paces a probe's tries on connections that break at once.
const probeRetryPause = 20 * time.Millisecond

// brokenConnection reports whether err is a connection that broke under a
// call before anything answered it (reset, closed, EOF): UNAVAILABLE that
// no server, proxy or dial error worded (resilience.TransportCause words
// those).
func brokenConnection(err error) bool {
	if status.Code(err) != codes.Unavailable || resilience.TransportCause(err) != "" {
		return false
	}
	var ns *notServingError
	if errors.As(err, &ns) {
		return false
	}
	msg := status.Convert(err).Message()
	for _, s := range []string{"connection reset", "error reading from server", "transport is closing", "connection closed", "EOF", "broken pipe"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
