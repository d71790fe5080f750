package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/tracing"
)

// Leases serves a stream of lease calls: each call is checked and done as
// its unary call is, one at a time and answered in the order sent (see
// leaseCall). The stream was authenticated, rate limited and gated on the
// active server when it opened (admit, in the stream chain), and holds one of
// the tenant's Leases stream slots (admitStream); every call is checked
// again, so a revoked key, a suspended or deleted tenant, a step-down or an
// exhausted rate limit takes effect for the next call of an open stream as
// it does for the next unary call.
//
// What a stream holds is bounded: a reader goroutine receives the next call
// while one is done (one call ahead, no more), and an answer the client
// does not read blocks the stream's Send once gRPC's write quota is full,
// so the stream stops reading calls until the client reads; the calls sent
// ahead wait in the stream's HTTP/2 window, which the server fixes
// (grpc.InitialWindowSize: no growth). A stream on which no call arrives
// for Config.StreamIdle ends with UNAVAILABLE, so that a quiet stream does
// not keep its connection from counting as idle.
func (s *Service) Leases(stream grpc.BidiStreamingServer[repoolv1.LeaseCall, repoolv1.LeaseReply]) error {
	ctx := stream.Context()
	calls := make(chan *repoolv1.LeaseCall)
	recvErr := make(chan error, 1)
	go func() {
		for {
			call, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case calls <- call:
			case <-ctx.Done(): // the handler returned: the stream is over
				return
			}
		}
	}()
	end := s.open.add()
	defer s.open.remove(end)
	var idle <-chan time.Time
	if s.cfg.StreamIdle > 0 {
		// A ticker rather than a timer reset at every call: a call costs
		// only the count, and a stream is found idle within two periods.
		t := time.NewTicker(s.cfg.StreamIdle)
		defer t.Stop()
		idle = t.C
	}
	var n, seen uint64
	for {
		select {
		case call := <-calls:
			n++
			reply, err := s.leaseCall(ctx, call)
			if err != nil {
				return err
			}
			if err := stream.Send(reply); err != nil {
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil // the client is done sending; every call is answered
			}
			return err
		case <-idle:
			if n == seen {
				return status.Errorf(codes.Unavailable, "no call on this lease stream for %v: it is closed; open another to make more calls", s.cfg.StreamIdle)
			}
			seen = n
		case why := <-end:
			return why // between calls: the one in progress was answered
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// EndLeases ends every open Leases stream with why, each between two calls
// (a call in progress is answered first): the server is shutting down or
// stepping down. A stream with no call coming would otherwise stay open
// until it is idle for Config.StreamIdle, holding a graceful stop (which
// waits for every stream) and so the leader lock a standby is waiting for.
func (s *Service) EndLeases(why error) { s.open.end(why) }

// openStreams is the set of open Leases streams' end channels.
type openStreams struct {
	mu  sync.Mutex
	set map[chan error]struct{}
}

func (o *openStreams) add() chan error {
	ch := make(chan error, 1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.set == nil {
		o.set = map[chan error]struct{}{}
	}
	o.set[ch] = struct{}{}
	return ch
}

func (o *openStreams) remove(ch chan error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.set, ch)
}

func (o *openStreams) end(why error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for ch := range o.set {
		select {
		case ch <- why:
		default: // already told
		}
	}
}

// leaseCall does one call of a Leases stream and returns its reply, or the
// error that ends the stream: a refusal of the caller or of this server
// (endsStream), or a message that is no call.
func (s *Service) leaseCall(ctx context.Context, call *repoolv1.LeaseCall) (*repoolv1.LeaseReply, error) {
	ctx = tracing.WithHeader(ctx, call.GetTraceparent(), call.GetTracestate())
	method := ""
	switch call.GetCall().(type) {
	case *repoolv1.LeaseCall_Acquire:
		method = repoolv1.PoolService_Acquire_FullMethodName
	case *repoolv1.LeaseCall_Release:
		method = repoolv1.PoolService_Release_FullMethodName
	case *repoolv1.LeaseCall_Report:
		method = repoolv1.PoolService_Report_FullMethodName
	case *repoolv1.LeaseCall_Renew:
		method = repoolv1.PoolService_Renew_FullMethodName
	default:
		// An unset oneof, or a kind this server does not know (sent by a
		// newer client): no reply could say which call it answers.
		return nil, status.Error(codes.InvalidArgument, "a lease call sets none of acquire, release, report, renew")
	}
	start := time.Now()
	reply, err := s.leaseCallChecked(ctx, method, call)
	if err == nil {
		s.count(method, nil, start)
		s.logCall(ctx, method, nil, start)
		return reply, nil
	}
	st := toStatus(ctx, s.log, err)
	s.count(method, st, start)
	s.logCall(ctx, method, st, start)
	code := status.Code(st)
	if endsStream(code) {
		return nil, st
	}
	return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Error{Error: problem(ctx, s.log, err)}, Status: int32(code)}, nil
}

// endsStream tells the refusals of the caller or of this server, which end
// a Leases stream (the next call would be refused as well; a client
// retries elsewhere or with another credential), from those of one call.
func endsStream(c codes.Code) bool {
	switch c {
	case codes.Unauthenticated, codes.PermissionDenied, codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return false
}

// leaseCallChecked admits a call as the unary method would be (admit, at
// the unary method's cost, without a stream slot: the stream holds one),
// and then runs the unary handler, returning domain errors.
func (s *Service) leaseCallChecked(ctx context.Context, method string, call *repoolv1.LeaseCall) (*repoolv1.LeaseReply, error) {
	// A stream has no trailer per call: the retry-after reaches the client
	// in the reply's Problem.
	s.calls.enter()
	defer s.calls.exit()
	ctx, _, err := s.admit(ctx, method, func(metadata.MD) {}, nil)
	if err != nil {
		return nil, err
	}
	switch c := call.GetCall().(type) {
	case *repoolv1.LeaseCall_Acquire:
		resp, err := s.Acquire(ctx, orEmpty(c.Acquire))
		if err != nil {
			return nil, err
		}
		return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Acquire{Acquire: resp}}, nil
	case *repoolv1.LeaseCall_Release:
		resp, err := s.Release(ctx, orEmpty(c.Release))
		if err != nil {
			return nil, err
		}
		return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Release{Release: resp}}, nil
	case *repoolv1.LeaseCall_Report:
		resp, err := s.Report(ctx, orEmpty(c.Report))
		if err != nil {
			return nil, err
		}
		return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Report{Report: resp}}, nil
	case *repoolv1.LeaseCall_Renew:
		resp, err := s.Renew(ctx, orEmpty(c.Renew))
		if err != nil {
			return nil, err
		}
		return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Renew{Renew: resp}}, nil
	}
	return nil, fmt.Errorf("%w: unknown lease call %T", pool.ErrInvalidArgument, call.GetCall())
}

// orEmpty is req, or an empty request when the call's field is set to an
// empty message on the wire (decoded as nil), which the handlers then
// refuse as they refuse an empty unary request.
func orEmpty[T any, P interface{ *T }](req P) P {
	if req == nil {
		return new(T)
	}
	return req
}
