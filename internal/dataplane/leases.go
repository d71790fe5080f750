package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/pool"
)

// Leases serves a stream of lease calls: each call is checked and done as
// its unary call is, one at a time and answered in the order sent (see
// leaseCall). The stream was authenticated, rate limited and gated on the
// active server when it opened (the stream interceptors); every call is
// checked again, so a revoked key, a suspended or deleted tenant, a
// step-down or an exhausted rate limit takes effect for the next call of
// an open stream as it does for the next unary call. It holds no event
// stream slot: a lease stream is a connection's worth of unary calls, and
// bounded as they are (HTTP/2 concurrent streams per connection, the
// connection limit, flow control for the calls sent ahead).
func (s *Service) Leases(stream grpc.BidiStreamingServer[repoolv1.LeaseCall, repoolv1.LeaseReply]) error {
	ctx := stream.Context()
	for {
		call, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the client is done sending; every call is answered
			}
			return err
		}
		reply, err := s.leaseCall(ctx, call)
		if err != nil {
			return err
		}
		if err := stream.Send(reply); err != nil {
			return err
		}
	}
}

// leaseCall does one call of a Leases stream and returns its reply, or the
// error that ends the stream: a refusal of the caller or of this server
// (endsStream), or a message that is no call.
func (s *Service) leaseCall(ctx context.Context, call *repoolv1.LeaseCall) (*repoolv1.LeaseReply, error) {
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
	reply, err := s.leaseCallChecked(ctx, method, call)
	if err == nil {
		s.count(method, nil)
		return reply, nil
	}
	st := toStatus(s.log, err)
	s.count(method, st)
	code := status.Code(st)
	if endsStream(code) {
		return nil, st
	}
	return &repoolv1.LeaseReply{Reply: &repoolv1.LeaseReply_Error{Error: problem(s.log, err)}, Status: int32(code)}, nil
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

// leaseCallChecked runs the unary interceptors' checks, in their order
// (active server, credential, rate limit at the unary method's cost), and
// then the unary handler, returning domain errors.
func (s *Service) leaseCallChecked(ctx context.Context, method string, call *repoolv1.LeaseCall) (*repoolv1.LeaseReply, error) {
	if err := s.active(); err != nil {
		return nil, err
	}
	ctx, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	// A stream has no trailer per call: the retry-after reaches the client
	// in the reply's Problem.
	if err := s.limit(ctx, method, func(metadata.MD) {}); err != nil {
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
