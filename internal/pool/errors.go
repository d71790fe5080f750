package pool

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of
// them (ErrOverBudget and ErrPoolClosed also wrap the error that caused
// them).
var (
	// ErrInvalidArgument: a malformed request (empty or oversize id, capacity
	// below 1, TTL out of range, unknown outcome, ...).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: unknown resource or lease (an expired lease is unknown).
	ErrNotFound = errors.New("not found")
	// ErrStaleToken: the fencing token does not match the lease; the caller
	// is not (or no longer) the holder.
	ErrStaleToken = errors.New("wrong or stale fencing token")
	// ErrExhausted: no resource with free capacity matches the request.
	ErrExhausted = errors.New("no resource available")
	// ErrOverBudget: the pool's Gate refused the state the call would
	// create; the error also wraps the Gate's.
	ErrOverBudget = errors.New("over budget")
	// ErrPoolClosed: the pool was closed (Close); the error also wraps the
	// reason Close was given.
	ErrPoolClosed = errors.New("pool closed")
)
