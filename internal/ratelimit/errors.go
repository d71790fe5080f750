package ratelimit

import "errors"

// Sentinel errors. Every error returned by this package, other than a
// caller's context error, wraps exactly one of them.
var (
	// ErrInvalidArgument: a malformed configuration or request (empty
	// tenant, rate or burst out of range, cost below 1).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrLimited: the tenant's request rate refused the request. The
	// Decision returned with it carries the reason and the retry-after.
	ErrLimited = errors.New("rate limited")
	// ErrBackend: the backend failed to apply a change (Set). Allow never
	// returns it: a backend fault there fails open.
	ErrBackend = errors.New("rate limiter backend failed")
)
