package pool

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of
// them.
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
)
