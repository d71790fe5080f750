package resilience

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// hopPrefix starts grpc-go's message for an answer that is not gRPC at all,
// such as a proxy's own error page; grpc-go reports 502, 503 and 504 alike
// as UNAVAILABLE, followed by this text and the HTTP status.
const hopPrefix = "unexpected HTTP status code received from server: "

// hopStatus returns the HTTP status of a proxy's non-gRPC answer, or 0.
func hopStatus(s *status.Status) int {
	msg := s.Message()
	i := strings.Index(msg, hopPrefix)
	if i < 0 {
		return 0
	}
	rest := msg[i+len(hopPrefix):]
	if j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
		rest = rest[:j]
	}
	n, _ := strconv.Atoi(rest)
	return n
}

// Code returns the gRPC code of err: codes.OK for nil, DEADLINE_EXCEEDED and
// CANCELED for context errors, UNAVAILABLE for an open breaker, the status
// code for a (possibly wrapped) status error, and UNKNOWN otherwise. Of a
// proxy's own answers, which grpc-go reports as UNAVAILABLE, only 502 and
// 503 stay UNAVAILABLE (retried): a 504 (its timeout) is DEADLINE_EXCEEDED
// and a 429 (its rate limit) RESOURCE_EXHAUSTED, both final.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if errors.Is(err, ErrCircuitOpen) || errors.Is(err, ErrBulkheadFull) {
		return codes.Unavailable
	}
	if s, ok := status.FromError(err); ok {
		if s.Code() == codes.Unavailable {
			switch hopStatus(s) {
			case 504:
				return codes.DeadlineExceeded
			case 429:
				return codes.ResourceExhausted
			}
		}
		return s.Code()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Unknown
}

// Retryable reports whether a failed attempt may be retried: only
// UNAVAILABLE, which is also what grpc-go reports for an HTTP 502 or 503
// from a proxy on the way (HAProxy with no server up yet, as during a
// handover), and neither a TLS failure nor the front end's answer that
// the whole cluster is down (ClusterDown). INTERNAL, DEADLINE_EXCEEDED (a proxy's 504 included) and every
// business code are final.
func Retryable(err error) bool {
	return err != nil && !errors.Is(err, ErrCircuitOpen) && !errors.Is(err, ErrBulkheadFull) && Code(err) == codes.Unavailable && !TLSFailure(err) && !ClusterDown(err)
}

// ClusterDown reports whether err is the front end's answer for a group
// none of whose servers is alive (HTTP 503 with repoolv1.ClusterDownText):
// no handover is under way, so the call fails at once instead of being
// retried, and it counts against the cluster like any failure.
func ClusterDown(err error) bool {
	is503, down := frontEnd503(err)
	return is503 && down
}

// Handover reports whether err is the front end's answer while its group
// changes leader: HTTP 503 from the proxy without repoolv1.ClusterDownText,
// which HAProxy gives when no server is active but one is alive (a standby
// taking over, the database tier failing over under the group). It is
// retried until the retry policy's max_elapsed whatever max_retries says,
// without spending the retry budget (the front end answers it, no server),
// and it is not the outage the breaker's outage rule is for: a dead
// cluster is answered with ClusterDown instead.
func Handover(err error) bool {
	is503, down := frontEnd503(err)
	return is503 && !down
}

// frontEnd503 reports whether err is a proxy's HTTP 503 (grpc-go reports
// it as UNAVAILABLE with the status in the message), and whether that
// answer carries repoolv1.ClusterDownText.
func frontEnd503(err error) (is503, clusterDown bool) {
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.Unavailable || hopStatus(s) != 503 {
		return false, false
	}
	return true, strings.Contains(s.Message(), repoolv1.ClusterDownText)
}

// TLSFailure reports whether err is a TLS handshake that failed for a
// reason that another attempt would meet again: a certificate that does
// not verify (unknown authority, wrong name, expired), one the server
// refused (mutual TLS), or an endpoint that does not speak TLS. grpc-go
// reports these as UNAVAILABLE; a connection lost during the handshake
// (EOF, reset, timeout) is not one of them.
func TLSFailure(err error) bool {
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.Unavailable {
		return false
	}
	msg := s.Message()
	if strings.Contains(msg, "remote error: tls:") || strings.Contains(msg, "x509: ") {
		return true
	}
	if !strings.Contains(msg, "authentication handshake failed") {
		return false
	}
	for _, lost := range []string{"EOF", "connection reset", "timeout", "deadline", "broken pipe", "connection refused"} {
		if strings.Contains(msg, lost) {
			return false
		}
	}
	return true
}

// TenantElsewhere reports whether err is a server's refusal of a call for
// a tenant its group does not serve (UNAVAILABLE with the ErrorInfo reason
// TENANT_ELSEWHERE): the tenant is being moved, or the front end's tenant
// map has not caught up yet. It is retried like any UNAVAILABLE.
func TenantElsewhere(err error) bool {
	s, ok := status.FromError(err)
	if !ok || s.Code() != codes.Unavailable {
		return false
	}
	for _, d := range s.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == repoolv1.ErrorDomain && info.GetReason() == repoolv1.ReasonTenantElsewhere {
			return true
		}
	}
	return false
}

// excluded reports whether the breaker should ignore an outcome: invalid
// credentials, TLS failures (a certificate or configuration to fix), rate
// limits, callers that went away and the bulkhead's rejections (a slow
// cluster, or a burst, not a failed one) say nothing about the cluster's
// health; nor does a refusal because the tenant is served by another
// group (TenantElsewhere) — a working server answered, and during a
// tenant move every call of the tenant is refused for up to the move's
// window, which must not open the breaker for the calls that follow it.
func excluded(err error) bool {
	if errors.Is(err, ErrBulkheadFull) || TLSFailure(err) || TenantElsewhere(err) {
		return true
	}
	switch Code(err) {
	case codes.Unauthenticated, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}

// successful reports whether the breaker should count an outcome as a
// success: no error, or a business answer from a working cluster.
func successful(err error) bool {
	switch Code(err) {
	case codes.OK, codes.NotFound, codes.InvalidArgument, codes.PermissionDenied,
		codes.FailedPrecondition, codes.AlreadyExists, codes.OutOfRange, codes.Aborted:
		return true
	}
	return false
}

// Fast-fail reasons, as sent in the X-Repool-Fast-Fail header.
const (
	FastFailCircuitOpen = "circuit-open"
	FastFailBulkhead    = "bulkhead-full"
	FastFailTimeout     = "timeout"
	FastFailUpstream    = "upstream"
)

// FastFail names why a call failed fast, or returns "" when err is not a
// fast failure (nil, or an answer the backend should act on such as
// NOT_FOUND or RESOURCE_EXHAUSTED).
func FastFail(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, ErrCircuitOpen) {
		return FastFailCircuitOpen
	}
	if errors.Is(err, ErrBulkheadFull) {
		return FastFailBulkhead
	}
	switch Code(err) {
	case codes.DeadlineExceeded:
		return FastFailTimeout
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return FastFailUpstream
	}
	return ""
}

// Cause says in our words why an attempt or a call failed, for an error
// message, /v1/breakers and /readyz: a transport's failure as
// TransportCause words it, anything else as its gRPC code and message. ""
// for nil.
func Cause(err error) string {
	if err == nil {
		return ""
	}
	if c := TransportCause(err); c != "" {
		return c
	}
	s, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch s.Code() {
	case codes.Unauthenticated:
		return "credentials refused: " + s.Message()
	case codes.DeadlineExceeded:
		return "no answer in time: " + s.Message()
	}
	return s.Code().String() + ": " + s.Message()
}

// TransportCause words what grpc-go reports with a transport's text — as
// UNAVAILABLE, or UNIMPLEMENTED for a gRPC server without repool's
// services — and tells the cases apart: nothing listening at the address, a
// name that does not resolve, an endpoint that answers HTTP/1.1 (not a gRPC
// server: a server's HTTP port, say), one that does not speak TLS, a
// certificate that does not verify, a proxy's own HTTP answer, a gRPC
// server that is not a repool server. "" for anything else.
func TransportCause(err error) string {
	s, ok := status.FromError(err)
	if !ok || err == nil {
		return ""
	}
	msg := s.Message()
	if s.Code() == codes.Unimplemented && strings.HasPrefix(msg, "unknown service ") {
		return "not a repool server: " + msg
	}
	if s.Code() != codes.Unavailable {
		return ""
	}
	switch {
	case strings.Contains(msg, "connect: connection refused"):
		return "connection refused by " + dialAddr(msg) + ": nothing is listening there"
	case strings.Contains(msg, "no such host"):
		return "cannot resolve the endpoint's name (" + dialAddr(msg) + ")"
	case strings.Contains(msg, "Error while dialing") && strings.Contains(msg, "i/o timeout"):
		return "connecting to " + dialAddr(msg) + " timed out"
	case strings.Contains(msg, "looked like an HTTP/1.1 header"), strings.Contains(msg, "malformed HTTP response"):
		return "not a gRPC server: the endpoint answers HTTP/1.1 (a server's HTTP port instead of its gRPC port?)"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "TLS: the endpoint does not speak TLS (plaintext, or not a gRPC server)"
	case strings.Contains(msg, "x509: "), strings.Contains(msg, "remote error: tls:"):
		return "TLS: " + msg[strings.LastIndex(msg, "tls: ")+len("tls: "):]
	case hopStatus(s) != 0:
		return fmt.Sprintf("a proxy on the way answered HTTP %d instead of the server", hopStatus(s))
	}
	return ""
}

// dialAddr returns the address of grpc-go's "dial tcp ADDR: ..." text, or
// "the endpoint" when there is none.
func dialAddr(msg string) string {
	_, rest, ok := strings.Cut(msg, "dial tcp ")
	if !ok {
		return "the endpoint"
	}
	if i := strings.Index(rest, ": "); i > 0 {
		return rest[:i]
	}
	return "the endpoint"
}
