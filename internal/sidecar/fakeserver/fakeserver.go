// Package fakeserver is a fake repool server for the sidecar's tests:
// AuthService and PoolService over gRPC on a real loopback listener, with
// function-field handlers and per-method call counters.
//
// By default it behaves like the real server as far as the sidecar can
// tell: IssueToken trades the configured API key for a token of the
// configured tenant, and every PoolService call needs
// `authorization: Bearer <token>` with a token it issued, has not revoked,
// and that has not expired by the fake's clock. It counts the calls by the
// tenant they name in x-repool-tenant (RouteCalls).
package fakeserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
)

// DefaultAPIKey is the API key the fake accepts unless Config.APIKey says
// otherwise.
const DefaultAPIKey = "rpk_test-key"

// DefaultTenant is the tenant of the fake's tokens unless Config.Tenant
// says otherwise.
const DefaultTenant = "demo"

// Config configures Start. Every handler left nil has the default
// behaviour described on it; handlers run after the fake's authentication
// and may be called concurrently.
type Config struct {
	// APIKey is the key IssueToken accepts. Default DefaultAPIKey.
	APIKey string
	// Tenant is the tenant IssueToken names (IssueTokenResponse.tenant).
	// Default DefaultTenant.
	Tenant string
	// TokenTTL is the lifetime of issued tokens. Default 15m.
	TokenTTL time.Duration
	// Clock dates tokens and checks their expiry. Default the wall clock.
	Clock clock.Clock
	// NoAuth turns off the bearer check of PoolService calls.
	NoAuth bool
	// Leases offers the Leases stream, as the real server does; without
	// it Leases is UNIMPLEMENTED. Its calls go to the handlers below, one
	// at a time in the order sent, on the stream's context, and are
	// counted as their unary calls are (Calls) and apart (StreamCalls).
	// A call whose handler answers UNAUTHENTICATED, PERMISSION_DENIED,
	// UNAVAILABLE, CANCELED or DEADLINE_EXCEEDED ends the stream with that
	// status, as the real server ends it.
	Leases bool
	// EndsStream lists more codes with which a call's error ends its
	// Leases stream instead of being its reply, as a proxy's reset does
	// (INTERNAL); the real server's refusals always end it.
	EndsStream []codes.Code

	// IssueToken replaces the default (check the key, issue a token).
	IssueToken func(ctx context.Context, req *repoolv1.IssueTokenRequest) (*repoolv1.IssueTokenResponse, error)
	// Register: default counts every resource as registered.
	Register func(ctx context.Context, req *repoolv1.RegisterRequest) (*repoolv1.RegisterResponse, error)
	// Deregister: default counts every id as removed.
	Deregister func(ctx context.Context, req *repoolv1.DeregisterRequest) (*repoolv1.DeregisterResponse, error)
	// Acquire: default leases resource "r1" with a fresh lease id and
	// fencing token.
	Acquire func(ctx context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error)
	// Renew: default renews the lease.
	Renew func(ctx context.Context, req *repoolv1.RenewRequest) (*repoolv1.RenewResponse, error)
	// Release: default succeeds.
	Release func(ctx context.Context, req *repoolv1.ReleaseRequest) (*repoolv1.ReleaseResponse, error)
	// Report: default succeeds.
	Report func(ctx context.Context, req *repoolv1.ReportRequest) (*repoolv1.ReportResponse, error)
	// SubscribeEvents: default sends the response headers, as the real
	// server does once it has subscribed (they tell the client the
	// subscription exists), then nothing, and waits for the client to
	// leave. A handler set here sends its own headers (its first Send
	// does), or refuses without them, as a standby does.
	SubscribeEvents func(req *repoolv1.SubscribeEventsRequest, stream grpc.ServerStreamingServer[repoolv1.Event]) error
}

// Server is a running fake. Safe for concurrent use.
type Server struct {
	cfg  Config
	addr string
	grpc *grpc.Server

	next     atomic.Uint64 // token, lease and fencing numbers
	mu       sync.Mutex
	tokens   map[string]time.Time // issued token → expiry
	calls    map[string]int64     // method → calls received
	routes   map[route]int64      // method and x-repool-tenant → calls received
	streamed map[string]int64     // method → calls received on a Leases stream
	revoked  map[string]bool
}

// Start serves a fake on a free port of 127.0.0.1 until the test ends.
func Start(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = DefaultAPIKey
	}
	if cfg.Tenant == "" {
		cfg.Tenant = DefaultTenant
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = 15 * time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("fakeserver: listen: %v", err)
	}
	s := &Server{cfg: cfg, addr: ln.Addr().String(),
		tokens: map[string]time.Time{}, calls: map[string]int64{}, streamed: map[string]int64{}, routes: map[route]int64{}, revoked: map[string]bool{}}
	s.grpc = grpc.NewServer(grpc.ChainUnaryInterceptor(s.unary), grpc.ChainStreamInterceptor(s.stream))
	repoolv1.RegisterAuthServiceServer(s.grpc, authServer{s: s})
	repoolv1.RegisterPoolServiceServer(s.grpc, poolServer{s: s})
	go s.grpc.Serve(ln) // returns when Stop closes the listener
	tb.Cleanup(s.Stop)
	return s
}

// Addr returns the fake's host:port.
func (s *Server) Addr() string { return s.addr }

// Stop stops the fake at once, failing calls in flight. Idempotent.
func (s *Server) Stop() { s.grpc.Stop() }

// Calls returns how many calls of a method ("IssueToken", "Acquire", ...)
// the fake received, refused ones included.
func (s *Server) Calls(method string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// StreamCalls returns how many calls of a method ("Acquire", ...) the
// fake received on Leases streams (Calls counts them too).
func (s *Server) StreamCalls(method string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streamed[method]
}

// route is a method and the x-repool-tenant its call named.
type route struct{ method, tenant string }

// RouteCalls returns how many calls of a method the fake received naming
// tenant in x-repool-tenant ("" counts the calls without the entry).
func (s *Server) RouteCalls(method, tenant string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routes[route{method, tenant}]
}

// TenantElsewhere is the refusal of a call for a tenant this server's group
// does not serve: UNAVAILABLE with an ErrorInfo of reason TENANT_ELSEWHERE
// naming the tenant's group (and not the tenant: see TenantElsewhereOf).
func TenantElsewhere(group string) error { return TenantElsewhereOf("", group) }

// TenantElsewhereOf is TenantElsewhere naming the caller's tenant too, as
// the real server answers it.
func TenantElsewhereOf(tenant, group string) error {
	md := map[string]string{repoolv1.ErrorInfoGroup: group}
	if tenant != "" {
		md[repoolv1.ErrorInfoTenant] = tenant
	}
	st, err := status.New(codes.Unavailable, "tenant is served by group "+group).WithDetails(&errdetails.ErrorInfo{
		Domain:   repoolv1.ErrorDomain,
		Reason:   repoolv1.ReasonTenantElsewhere,
		Metadata: md,
	})
	if err != nil {
		panic(err) // an ErrorInfo always marshals
	}
	return st.Err()
}

// Revoke makes the fake refuse a token it issued (UNAUTHENTICATED).
func (s *Server) Revoke(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[token] = true
}

// RevokeAll revokes every token issued so far.
func (s *Server) RevokeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.tokens {
		s.revoked[t] = true
	}
}

// Bearer returns the token a call carried ("" if none).
func Bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("authorization")
	if len(v) != 1 {
		return ""
	}
	t, _ := strings.CutPrefix(v[0], "Bearer ")
	return t
}

func (s *Server) count(ctx context.Context, fullMethod string) {
	method := fullMethod[strings.LastIndex(fullMethod, "/")+1:]
	md, _ := metadata.FromIncomingContext(ctx)
	tenant := strings.Join(md.Get(repoolv1.TenantRouteKey), ",")
	s.mu.Lock()
	s.calls[method]++
	s.routes[route{method, tenant}]++
	s.mu.Unlock()
}

// authorize checks a PoolService call's bearer token.
func (s *Server) authorize(ctx context.Context, fullMethod string) error {
	if s.cfg.NoAuth || !strings.HasPrefix(fullMethod, "/repool.v1.PoolService/") {
		return nil
	}
	tok := Bearer(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.tokens[tok]
	if !ok || s.revoked[tok] || !s.cfg.Clock.Now().Before(exp) {
		return status.Error(codes.Unauthenticated, "unauthenticated")
	}
	return nil
}

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	s.count(ctx, info.FullMethod)
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	s.count(ss.Context(), info.FullMethod)
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// Issue is the default IssueToken: check the key and issue a token.
func (s *Server) Issue(ctx context.Context) (*repoolv1.IssueTokenResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if keys := md.Get("x-api-key"); len(keys) != 1 || keys[0] != s.cfg.APIKey {
		return nil, status.Error(codes.Unauthenticated, "unauthenticated")
	}
	tok := fmt.Sprintf("tok-%d", s.next.Add(1))
	exp := s.cfg.Clock.Now().Add(s.cfg.TokenTTL)
	s.mu.Lock()
	s.tokens[tok] = exp
	s.mu.Unlock()
	return &repoolv1.IssueTokenResponse{Token: tok, ExpiresAt: timestamppb.New(exp), Tenant: s.cfg.Tenant}, nil
}

type authServer struct {
	repoolv1.UnimplementedAuthServiceServer
	s *Server
}

func (a authServer) IssueToken(ctx context.Context, req *repoolv1.IssueTokenRequest) (*repoolv1.IssueTokenResponse, error) {
	if a.s.cfg.IssueToken != nil {
		return a.s.cfg.IssueToken(ctx, req)
	}
	return a.s.Issue(ctx)
}

type poolServer struct {
	repoolv1.UnimplementedPoolServiceServer
	s *Server
}

func (p poolServer) Register(ctx context.Context, req *repoolv1.RegisterRequest) (*repoolv1.RegisterResponse, error) {
	if p.s.cfg.Register != nil {
		return p.s.cfg.Register(ctx, req)
	}
	return &repoolv1.RegisterResponse{Registered: int32(len(req.GetResources()))}, nil
}

func (p poolServer) Deregister(ctx context.Context, req *repoolv1.DeregisterRequest) (*repoolv1.DeregisterResponse, error) {
	if p.s.cfg.Deregister != nil {
		return p.s.cfg.Deregister(ctx, req)
	}
	return &repoolv1.DeregisterResponse{Removed: int32(len(req.GetResourceIds()))}, nil
}

func (p poolServer) lease(ctx string, ttl int32) *repoolv1.Lease {
	n := p.s.next.Add(1)
	return &repoolv1.Lease{
		LeaseId: fmt.Sprintf("lease-%d", n), ResourceId: "r1", Context: ctx, FencingToken: n,
		ExpiresAt: timestamppb.New(p.s.cfg.Clock.Now().Add(time.Duration(ttl) * time.Second)),
	}
}

func (p poolServer) Acquire(ctx context.Context, req *repoolv1.AcquireRequest) (*repoolv1.AcquireResponse, error) {
	if p.s.cfg.Acquire != nil {
		return p.s.cfg.Acquire(ctx, req)
	}
	return &repoolv1.AcquireResponse{Lease: p.lease(req.GetContext(), req.GetTtlSeconds())}, nil
}

func (p poolServer) Renew(ctx context.Context, req *repoolv1.RenewRequest) (*repoolv1.RenewResponse, error) {
	if p.s.cfg.Renew != nil {
		return p.s.cfg.Renew(ctx, req)
	}
	l := p.lease("", req.GetTtlSeconds())
	l.LeaseId, l.FencingToken = req.GetLeaseId(), req.GetFencingToken()
	return &repoolv1.RenewResponse{Lease: l}, nil
}

func (p poolServer) Release(ctx context.Context, req *repoolv1.ReleaseRequest) (*repoolv1.ReleaseResponse, error) {
	if p.s.cfg.Release != nil {
		return p.s.cfg.Release(ctx, req)
	}
	return &repoolv1.ReleaseResponse{}, nil
}

func (p poolServer) Report(ctx context.Context, req *repoolv1.ReportRequest) (*repoolv1.ReportResponse, error) {
	if p.s.cfg.Report != nil {
		return p.s.cfg.Report(ctx, req)
	}
	return &repoolv1.ReportResponse{}, nil
}

// Leases serves the Leases stream when Config.Leases is set.
func (p poolServer) Leases(stream grpc.BidiStreamingServer[repoolv1.LeaseCall, repoolv1.LeaseReply]) error {
	if !p.s.cfg.Leases {
		return status.Error(codes.Unimplemented, "method Leases not implemented")
	}
	ctx := stream.Context()
	for {
		call, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		reply, err := p.leaseCall(ctx, call)
		if err != nil {
			switch c := status.Code(err); c {
			case codes.Unauthenticated, codes.PermissionDenied, codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
				return err
			default:
				if slices.Contains(p.s.cfg.EndsStream, c) {
					return err
				}
			}
			reply = &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Error{Error: problem(err)}, Status: int32(status.Code(err))}
		}
		if err := stream.Send(reply); err != nil {
			return err
		}
	}
}

// leaseCall does one call of a Leases stream as its unary call.
func (p poolServer) leaseCall(ctx context.Context, call *repoolv1.LeaseCall) (*repoolv1.LeaseReply, error) {
	method := ""
	switch call.GetCall().(type) {
	case *repoolv1.LeaseCall_Acquire:
		method = "Acquire"
	case *repoolv1.LeaseCall_Release:
		method = "Release"
	case *repoolv1.LeaseCall_Report:
		method = "Report"
	case *repoolv1.LeaseCall_Renew:
		method = "Renew"
	default:
		return nil, status.Error(codes.InvalidArgument, "a lease call sets none of acquire, release, report, renew")
	}
	p.s.count(ctx, "/repool.v1.PoolService/"+method)
	p.s.mu.Lock()
	p.s.streamed[method]++
	p.s.mu.Unlock()
	if err := p.s.authorize(ctx, "/repool.v1.PoolService/"+method); err != nil {
		return nil, err
	}
	switch c := call.GetCall().(type) {
	case *repoolv1.LeaseCall_Acquire:
		r, err := p.Acquire(ctx, c.Acquire)
		return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Acquire{Acquire: r}}, err
	case *repoolv1.LeaseCall_Release:
		r, err := p.Release(ctx, c.Release)
		return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Release{Release: r}}, err
	case *repoolv1.LeaseCall_Report:
		r, err := p.Report(ctx, c.Report)
		return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Report{Report: r}}, err
	default:
		r, err := p.Renew(ctx, call.GetRenew())
		return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Renew{Renew: r}}, err
	}
}

// problem is a handler's error as a LeaseReply's Problem, as the real
// server writes it.
func problem(err error) *repoolv1.Problem {
	st := status.Convert(err)
	pr := &repoolv1.Problem{Code: strings.ToLower(st.Code().String()), Message: st.Message()}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != repoolv1.ErrorDomain {
			continue
		}
		pr.Code = strings.ToLower(info.GetReason())
		pr.Why = info.GetMetadata()[repoolv1.ErrorInfoWhy]
		if t, err := time.Parse(time.RFC3339Nano, info.GetMetadata()[repoolv1.ErrorInfoFreesAt]); err == nil {
			pr.FreesAt = timestamppb.New(t)
		}
		if ms, err := strconv.ParseInt(info.GetMetadata()[repoolv1.ErrorInfoRetryAfterMS], 10, 64); err == nil {
			pr.RetryAfterMs = int32(ms)
		}
	}
	return pr
}

func (p poolServer) SubscribeEvents(req *repoolv1.SubscribeEventsRequest, stream grpc.ServerStreamingServer[repoolv1.Event]) error {
	if p.s.cfg.SubscribeEvents != nil {
		return p.s.cfg.SubscribeEvents(req, stream)
	}
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return status.FromContextError(stream.Context().Err()).Err()
}
