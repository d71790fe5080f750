package dataplane

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	// errNoTenant: a handler ran without a principal on its context, which
	// is a wiring bug.
	errNoTenant = errors.New("no tenant on the request context")
)

// toStatus maps an error to the gRPC status the client sees. It is the one
// place where domain errors become codes. Our own errors carry messages
// written for clients; anything else is logged and answered with a generic
// INTERNAL so that no dependency's text leaks.
func toStatus(log *slog.Logger, err error) error {
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
		code = codes.ResourceExhausted
	case errors.Is(err, auth.ErrUnauthenticated), errors.Is(err, tenants.ErrDeleted):
		code, msg = codes.Unauthenticated, auth.ErrUnauthenticated.Error()
	case errors.Is(err, auth.ErrSuspended):
		code, msg = codes.PermissionDenied, auth.ErrSuspended.Error()
	case errors.Is(err, auth.ErrUnavailable):
		log.Warn("credential store unavailable", "err", err)
		code, msg = codes.Unavailable, auth.ErrUnavailable.Error()
	case errors.Is(err, ErrNotActive):
		code = codes.Unavailable
	case errors.Is(err, tenants.ErrClosed):
		code, msg = codes.Unavailable, ErrNotActive.Error()
	default:
		log.Error("internal error", "err", err)
		code, msg = codes.Internal, "internal error"
	}
	return status.Error(code, msg)
}
