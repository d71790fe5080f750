package budget

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them.
var (
	// ErrInvalidArgument: a malformed request (empty tenant, unknown kind,
	// negative count, limits that do not fit the budget). Nothing changed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrExhausted: a tenant ceiling or the global budget refused the
	// request. Nothing changed. Reserve returns it as an *ExhaustedError;
	// SetLimits wraps it when the shared pool cannot back a raised
	// reservation.
	ErrExhausted = errors.New("budget exhausted")
	// ErrOverRelease: Release returned more units than the tenant held, which
	// is a bug in the caller's bookkeeping. The release was applied, clamped
	// at zero, and the excess is counted in Total.OverReleased.
	ErrOverRelease = errors.New("released more than held")
)

// Bound names the limit that refused a request.
type Bound uint8

// The bounds a request can run into.
const (
	// TenantCeiling: the tenant's usage plus the request would exceed its
	// ceiling.
	TenantCeiling Bound = iota + 1
	// GlobalBudget: the part of the request beyond the tenant's reservation
	// does not fit in what is free of the shared pool. The refusal says so
	// without the size of the pool or its use.
	GlobalBudget
)

// String returns "tenant ceiling" or "global budget".
func (b Bound) String() string {
	switch b {
	case TenantCeiling:
		return "tenant ceiling"
	case GlobalBudget:
		return "global budget"
	default:
		return fmt.Sprintf("Bound(%d)", uint8(b))
	}
}

// ExhaustedError describes a refused Reserve. It wraps ErrExhausted. It
// holds, and its message tells, only the tenant's own usage and limits:
// never other tenants' usage nor the global budget.
type ExhaustedError struct {
	// Kind is the kind of state that was requested.
	Kind Kind
	// Bound is the limit that refused the request.
	Bound Bound
	// Requested is the number of units asked for.
	Requested int64
	// Used is the tenant's usage of Kind when the request was refused.
	Used int64
	// Reserved is the tenant's reservation of Kind.
	Reserved int64
	// Max is the tenant's ceiling of Kind.
	Max int64
}

// Error tells which kind and which limit refused the request, with the
// tenant's own figures.
func (e *ExhaustedError) Error() string {
	if e.Bound == TenantCeiling {
		return fmt.Sprintf("%v: %s: tenant ceiling of %d reached (%d in use, %d requested)",
			ErrExhausted, e.Kind, e.Max, e.Used, e.Requested)
	}
	return fmt.Sprintf("%v: %s: no shared capacity is free on this server (this tenant holds %d, %d of them within its reservation, under its ceiling of %d; %d requested); only a reservation guarantees capacity",
		ErrExhausted, e.Kind, e.Used, min(e.Used, e.Reserved), e.Max, e.Requested)
}

// Unwrap returns ErrExhausted.
func (e *ExhaustedError) Unwrap() error { return ErrExhausted }
