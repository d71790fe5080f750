// Package client holds the load generator's two ways of using a provider:
// Sidecar, the backend that calls the sidecar's HTTP API (the "after"), and
// Naive, the backend the sidecar replaces (the "before"): it calls the
// servers itself over gRPC, walks the host list on failure, follows "not
// the active server" to the next host, and retries with fixed delays.
//
// Both are safe for concurrent use by many VUs.
package client

import (
	"google.golang.org/grpc/codes"

	"github.com/repool/repool/internal/sidecar/httpapi"
)

// Lease is an acquired lease.
type Lease struct {
	ID           string
	Resource     string
	FencingToken string // decimal, as the sidecar writes it
}

// Result is one call's outcome.
type Result struct {
	// Status is the HTTP status (Naive answers a gRPC code with the
	// sidecar's status for it, httpapi.StatusOf); 0 when no answer came
	// (transport error, timeout).
	Status int
	// Code is the error code, "" on success: the sidecar's error.code
	// (Naive: the sidecar's code for the gRPC code).
	Code string
	// FastFail is the sidecar's X-Repool-Fast-Fail header.
	FastFail string
}

// Failed reports whether the call failed (k6's http_req_failed: no answer,
// or a status outside 200-399).
func (r Result) Failed() bool { return r.Status < 200 || r.Status > 399 }

// resultOf is the Result of a call that failed with the gRPC code c: the
// status and error code the sidecar answers for c.
func resultOf(c codes.Code) Result {
	status, code := httpapi.StatusOf(c)
	return Result{Status: status, Code: code}
}
