package dataplane

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/ratelimit"
	"github.com/repool/repool/internal/tenants"
)

// Errors of the data plane itself.
var (
	// ErrOverBudget: creating state would exceed the tenant's ceiling or the
	// global budget. Budget implementations wrap it.
	ErrOverBudget = errors.New("state budget exhausted")
	// ErrNotActive: this server is a standby (or not ready); clients retry
	// through the VIP.
	ErrNotActive = errors.New("not the active server")
	// ErrStoreNotWritable: the server could not write a change to its
	// store (a disk full or read-only, a database that refuses writes).
	// Journal implementations wrap it, with the reason in words a client
	// may read: "store not writable: REASON". Clients retry (UNAVAILABLE,
	// reason STORE_NOT_WRITABLE).
	ErrStoreNotWritable = errors.New("store not writable")
	// errNoTenant: a handler ran without a principal on its context, which
	// is a wiring bug.
	errNoTenant = errors.New("no tenant on the request context")
)

// toStatus maps an error to the gRPC status the client sees. It is the one
// place where domain errors become codes: the status interceptors call it
// for every answer, and problem for a Release's next error. Our own errors carry messages
// written for clients; anything else is logged and answered with a generic
// INTERNAL so that no dependency's text leaks.
func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var code codes.Code
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code, msg = codes.DeadlineExceeded, "deadline exceeded"
	case errors.Is(err, context.Canceled):
		code, msg = codes.Canceled, "canceled"
	case errors.Is(err, pool.ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, pool.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, pool.ErrStaleToken):
		code = codes.FailedPrecondition
	case errors.Is(err, pool.ErrExhausted), errors.Is(err, pool.ErrOverBudget), errors.Is(err, ErrOverBudget), errors.Is(err, ratelimit.ErrLimited):
		return exhausted(err)
	case errors.Is(err, auth.ErrUnauthenticated), errors.Is(err, tenants.ErrDeleted):
		code, msg = codes.Unauthenticated, auth.ErrUnauthenticated.Error()
	case errors.Is(err, auth.ErrSuspended):
		code, msg = codes.PermissionDenied, auth.ErrSuspended.Error()
	case errors.Is(err, auth.ErrUnavailable):
		log.WarnContext(ctx, "credential store unavailable", "err", err)
		code, msg = codes.Unavailable, auth.ErrUnavailable.Error()
	case errors.Is(err, tenants.ErrElsewhere):
		return elsewhere(err)
	case errors.Is(err, ErrStoreNotWritable):
		return notWritable(msg)
	case errors.Is(err, ErrNotActive):
		code = codes.Unavailable
	case errors.Is(err, tenants.ErrClosed):
		code, msg = codes.Unavailable, ErrNotActive.Error()
	default:
		log.ErrorContext(ctx, "internal error", "err", err)
		code, msg = codes.Internal, "internal error"
	}
	return status.Error(code, msg)
}

// elsewhere is the UNAVAILABLE status of a call whose tenant another group
// of servers serves (or is moving to): retryable, with the ErrorInfo
// detail naming the reason, the caller's own tenant (the one its
// credential names: a client that called without the route entry, such as
// a first IssueToken, learns where to send the call) and, when known, the
// group.
func elsewhere(err error) error {
	info := &errdetails.ErrorInfo{Domain: repoolv1.ErrorDomain, Reason: repoolv1.ReasonTenantElsewhere, Metadata: map[string]string{}}
	var e *tenants.ElsewhereError
	msg := tenants.ErrElsewhere.Error()
	if errors.As(err, &e) {
		msg = e.Error()
		if e.Tenant != "" {
			info.Metadata[repoolv1.ErrorInfoTenant] = e.Tenant
		}
		if e.Group != "" {
			info.Metadata[repoolv1.ErrorInfoGroup] = e.Group
		}
	}
	st, derr := status.New(codes.Unavailable, msg).WithDetails(info)
	if derr != nil {
		return status.Error(codes.Unavailable, msg)
	}
	return st.Err()
}

// notWritable is the UNAVAILABLE status of a call whose change the store
// did not take: retryable, with the ErrorInfo detail of reason
// STORE_NOT_WRITABLE; msg says why.
func notWritable(msg string) error {
	info := &errdetails.ErrorInfo{Domain: repoolv1.ErrorDomain, Reason: repoolv1.ReasonStoreNotWritable}
	st, derr := status.New(codes.Unavailable, msg).WithDetails(info)
	if derr != nil {
		return status.Error(codes.Unavailable, msg)
	}
	return st.Err()
}

// limitedError is a rate limiter's refusal with its retry-after.
type limitedError struct {
	err   error
	after time.Duration
}

func (e *limitedError) Error() string { return e.err.Error() }
func (e *limitedError) Unwrap() error { return e.err }

// exhausted is the RESOURCE_EXHAUSTED status of err, with the ErrorInfo
// detail that tells a client which kind it is (repoolv1.Reason*).
func exhausted(err error) error {
	info := &errdetails.ErrorInfo{Domain: repoolv1.ErrorDomain, Metadata: map[string]string{}}
	var ex *pool.ExhaustedError
	var lim *limitedError
	switch {
	case errors.As(err, &ex):
		info.Reason = repoolv1.ReasonNoResourceAvailable
		info.Metadata[repoolv1.ErrorInfoWhy] = ex.Why
		if !ex.FreesAt.IsZero() {
			info.Metadata[repoolv1.ErrorInfoFreesAt] = ex.FreesAt.UTC().Format(time.RFC3339Nano)
		}
	case errors.Is(err, pool.ErrExhausted):
		info.Reason = repoolv1.ReasonNoResourceAvailable
	case errors.Is(err, ratelimit.ErrLimited):
		info.Reason = repoolv1.ReasonRateLimited
		if errors.As(err, &lim) && lim.after > 0 {
			info.Metadata[repoolv1.ErrorInfoRetryAfterMS] = strconv.FormatInt(max(lim.after.Milliseconds(), 1), 10)
		}
	default:
		info.Reason = repoolv1.ReasonOverBudget
	}
	st, derr := status.New(codes.ResourceExhausted, err.Error()).WithDetails(info)
	if derr != nil {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	return st.Err()
}

// problem is err as the answer's next error of a Release: the code (the
// ErrorInfo reason in lower case, or the gRPC code's name), the message
// and what the detail says.
func problem(ctx context.Context, log *slog.Logger, err error) *repoolv1.Problem {
	st := status.Convert(toStatus(ctx, log, err))
	pr := &repoolv1.Problem{Code: codeName(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != repoolv1.ErrorDomain {
			continue
		}
		switch info.GetReason() {
		case repoolv1.ReasonNoResourceAvailable:
			pr.Code = "no_resource_available"
		case repoolv1.ReasonRateLimited:
			pr.Code = "rate_limited"
		case repoolv1.ReasonOverBudget:
			pr.Code = "over_budget"
		}
		pr.Why = info.GetMetadata()[repoolv1.ErrorInfoWhy]
		if t, err := time.Parse(time.RFC3339Nano, info.GetMetadata()[repoolv1.ErrorInfoFreesAt]); err == nil {
			pr.FreesAt = timestamppb.New(t)
		}
		if ms, err := strconv.ParseInt(info.GetMetadata()[repoolv1.ErrorInfoRetryAfterMS], 10, 64); err == nil {
			pr.RetryAfterMs = int32(min(ms, 1<<31-1))
		}
	}
	return pr
}

// codeName is a gRPC code in snake case, as error codes are written.
func codeName(c codes.Code) string {
	switch c {
	case codes.Unavailable:
		return "unavailable"
	case codes.DeadlineExceeded:
		return "deadline_exceeded"
	case codes.Canceled:
		return "canceled"
	case codes.InvalidArgument:
		return "invalid_argument"
	case codes.ResourceExhausted:
		return "resource_exhausted"
	case codes.PermissionDenied:
		return "permission_denied"
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.NotFound:
		return "not_found"
	case codes.FailedPrecondition:
		return "failed_precondition"
	}
	return "internal"
}
