// Package client holds the load generator's two ways of using a provider:
// Sidecar, the backend that calls the sidecar's HTTP API (the "after"), and
// Naive, the backend the sidecar replaces (the "before"): it calls the
// servers itself over gRPC, walks the host list on failure, follows "not
// the active server" to the next host, and retries with fixed delays.
//
// Both are safe for concurrent use by many VUs.
package client

import (
	"strings"

	"google.golang.org/grpc/codes"
)

// Lease is an acquired lease.
type Lease struct {
	ID           string
	Resource     string
	FencingToken string // decimal, as the sidecar writes it
}

// Result is one call's outcome.
type Result struct {
	// Status is the HTTP status (Naive maps gRPC codes to the sidecar's
	// statuses); 0 when no answer came (transport error, timeout).
	Status int
	// Code is the error code, "" on success: the sidecar's error.code, or
	// the gRPC code in snake case.
	Code string
	// FastFail is the sidecar's X-Repool-Fast-Fail header.
	FastFail string
}

// Failed reports whether the call failed (k6's http_req_failed: no answer,
// or a status outside 200-399).
func (r Result) Failed() bool { return r.Status < 200 || r.Status > 399 }

// httpStatus maps gRPC codes as the sidecar does (DESIGN.md section 8).
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return 200
	case codes.InvalidArgument, codes.OutOfRange:
		return 400
	case codes.Unauthenticated:
		return 401
	case codes.PermissionDenied:
		return 403
	case codes.NotFound:
		return 404
	case codes.AlreadyExists, codes.FailedPrecondition, codes.Aborted:
		return 409
	case codes.ResourceExhausted:
		return 429
	case codes.Canceled:
		return 499
	case codes.Unavailable:
		return 503
	case codes.DeadlineExceeded:
		return 504
	}
	return 502
}

// codeName is a gRPC code in snake case ("deadline_exceeded").
func codeName(c codes.Code) string {
	s := c.String() // "DeadlineExceeded"
	var b strings.Builder
	prevLower := false
	for _, r := range s {
		upper := r >= 'A' && r <= 'Z'
		if upper && prevLower {
			b.WriteByte('_')
		}
		prevLower = !upper
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}
