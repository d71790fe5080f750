package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
)

// Error codes of {"error":{"code","message","retry_after_ms"}} bodies that
// are not gRPC codes. gRPC codes are written in snake case
// ("failed_precondition"), like the server's control plane does.
const (
	codeCircuitOpen        = "circuit_open"
	codeInvalidCredentials = "invalid_credentials"
	codeUnknownProvider    = "unknown_provider"
	codeBodyTooLarge       = "body_too_large"
	codeRequestTimeout     = "request_timeout"
	codeInvalidArgument    = "invalid_argument"
	codeNotFound           = "not_found"
	codeMethodNotAllowed   = "method_not_allowed"
	codeInternal           = "internal"
	codeTLS                = "tls"
	// RESOURCE_EXHAUSTED, told apart by the server's ErrorInfo detail.
	codeNoResource  = "no_resource_available"
	codeRateLimited = "rate_limited"
	codeOverBudget  = "over_budget"
)

// FastFailHeader says why a call failed fast: circuit-open, bulkhead-full,
// timeout or upstream.
const FastFailHeader = "X-Repool-Fast-Fail"

// httpStatus maps the gRPC codes of upstream answers to HTTP statuses
// (docs/sidecar.md). UNAUTHENTICATED, CANCELED and codes not listed are
// handled in StatusOf.
var httpStatus = [...]int{
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.OutOfRange:         http.StatusBadRequest,
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.FailedPrecondition: http.StatusConflict,
	codes.Aborted:            http.StatusConflict,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.Internal:           http.StatusBadGateway,
	codes.Unknown:            http.StatusBadGateway,
	codes.DataLoss:           http.StatusBadGateway,
	codes.Unimplemented:      http.StatusBadGateway,
}

// codeNames are the snake-case names of the gRPC codes.
var codeNames = [...]string{
	codes.OK: "ok", codes.Canceled: "canceled", codes.Unknown: "unknown",
	codes.InvalidArgument: "invalid_argument", codes.DeadlineExceeded: "deadline_exceeded",
	codes.NotFound: "not_found", codes.AlreadyExists: "already_exists",
	codes.PermissionDenied: "permission_denied", codes.ResourceExhausted: "resource_exhausted",
	codes.FailedPrecondition: "failed_precondition", codes.Aborted: "aborted",
	codes.OutOfRange: "out_of_range", codes.Unimplemented: "unimplemented",
	codes.Internal: "internal", codes.Unavailable: "unavailable", codes.DataLoss: "data_loss",
	codes.Unauthenticated: "unauthenticated",
}

// apiError is a refusal of the sidecar itself (bad request, unknown
// provider); the upstream was not called.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, codeInvalidArgument, fmt.Sprintf(format, args...)}
}

// errorBody is the JSON error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	// Why and FreesAt are set for no_resource_available.
	Why     string `json:"why,omitempty"`
	FreesAt string `json:"frees_at,omitempty"`
}

// answer is how an error is told to the backend.
type answer struct {
	status     int
	code       string
	msg        string
	fastFail   string        // X-Repool-Fast-Fail, or ""
	retryAfter time.Duration // Retry-After and retry_after_ms, or 0
	why        string        // no_resource_available: why
	freesAt    time.Time     // no_resource_available: when one frees up, if known
}

// classify is the one place where errors become HTTP answers.
func classify(err error) answer {
	var ae *apiError
	if errors.As(err, &ae) {
		return answer{status: ae.status, code: ae.code, msg: ae.msg}
	}
	a := answer{fastFail: resilience.FastFail(err), msg: message(err)}
	var hint interface{ RetryAfter() time.Duration }
	if errors.As(err, &hint) {
		a.retryAfter = hint.RetryAfter()
	}
	c := resilience.Code(err)
	switch {
	case errors.Is(err, resilience.ErrCircuitOpen):
		a.status, a.code = http.StatusServiceUnavailable, codeCircuitOpen
	case resilience.TLSFailure(err):
		// A certificate or a TLS setting to fix, not retried: 502 like
		// refused credentials.
		a.status, a.code = http.StatusBadGateway, codeTLS
		a.msg = "TLS with the provider failed (its certificate, the name it is valid for, the client certificate, or plaintext at the endpoint); not retried: " + a.msg
	case errors.Is(err, token.ErrInvalidCredentials), c == codes.Unauthenticated:
		a.status, a.code = StatusOf(codes.Unauthenticated)
		a.fastFail = ""
		a.msg = "the provider refused the sidecar's credentials (API key or token): " + a.msg
	case c == codes.ResourceExhausted:
		a.status, a.code = StatusOf(c)
		exhaustedKind(err, &a)
	default:
		a.status, a.code = StatusOf(c)
	}
	if a.status == http.StatusTooManyRequests && a.retryAfter <= 0 {
		// A 429 always says when to come back, also
		// when the upstream gave no hint (an exhausted pool, a proxy).
		a.retryAfter = defaultRetryAfter
	}
	return a
}

// exhaustedKind tells the kinds of RESOURCE_EXHAUSTED apart by the
// server's ErrorInfo detail (a proxy's 429 has none and stays
// resource_exhausted): no_resource_available (429, with why, frees_at
// when known, and a retry-after of at most defaultRetryAfter),
// rate_limited (429, with the server's retry-after) and over_budget (409:
// waiting does not help).
func exhaustedKind(err error, a *answer) {
	var gs interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &gs) {
		return
	}
	for _, d := range gs.GRPCStatus().Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != repoolv1.ErrorDomain {
			continue
		}
		md := info.GetMetadata()
		switch info.GetReason() {
		case repoolv1.ReasonNoResourceAvailable:
			a.code, a.why = codeNoResource, md[repoolv1.ErrorInfoWhy]
			a.retryAfter = defaultRetryAfter
			if t, err := time.Parse(time.RFC3339Nano, md[repoolv1.ErrorInfoFreesAt]); err == nil {
				a.freesAt = t
				if d := time.Until(t); d > 0 && d < a.retryAfter {
					a.retryAfter = d
				}
			}
		case repoolv1.ReasonRateLimited:
			a.code = codeRateLimited
			if a.retryAfter <= 0 {
				if ms, err := strconv.ParseInt(md[repoolv1.ErrorInfoRetryAfterMS], 10, 64); err == nil && ms > 0 {
					a.retryAfter = time.Duration(ms) * time.Millisecond
				}
			}
		case repoolv1.ReasonOverBudget:
			a.status, a.code = http.StatusConflict, codeOverBudget
		}
		return
	}
}

// defaultRetryAfter is a 429's Retry-After when the upstream gave none.
const defaultRetryAfter = time.Second

// StatusOf returns the HTTP status and the error code (error.code of the
// JSON body) with which the sidecar answers a call that the upstream failed
// with the gRPC code c. UNAUTHENTICATED is
// invalid_credentials, a 502: the backend did nothing wrong and cannot fix
// it, the sidecar's own credentials for the provider are refused. CANCELED
// is 499 (the client closed the request). Codes without a status of their
// own, OK included, are a 502 "unknown". It is safe for concurrent use.
func StatusOf(c codes.Code) (int, string) {
	switch {
	case c == codes.Unauthenticated:
		return http.StatusBadGateway, codeInvalidCredentials
	case c == codes.Canceled:
		return 499, codeNames[c]
	case int(c) < len(httpStatus) && httpStatus[c] != 0:
		return httpStatus[c], codeNames[c]
	}
	return http.StatusBadGateway, codeNames[codes.Unknown]
}

// message is the text for the backend: the server's own message for a
// status error (with why retries stopped), otherwise the error's text.
func message(err error) string {
	var gs interface{ GRPCStatus() *status.Status }
	msg := err.Error()
	if errors.As(err, &gs) {
		msg = gs.GRPCStatus().Message()
		if c := resilience.TransportCause(err); c != "" {
			msg = c // what the transport said, in our words
		}
	}
	if errors.Is(err, resilience.ErrBudgetSpent) {
		msg = "retry budget spent; last attempt: " + msg
	}
	return msg
}

// writeError answers err as JSON and logs what the backend cannot act on.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ans := classify(err)
	level := slog.LevelDebug
	if ans.code == codeInternal || ans.code == codeNames[codes.Unknown] || ans.code == codeInvalidCredentials || ans.code == codeTLS {
		level = slog.LevelWarn
	}
	a.log.Log(r.Context(), level, "call failed", "route", r.Pattern, "provider", r.PathValue("p"),
		"status", ans.status, "code", ans.code, "fast_fail", ans.fastFail, "err", err)
	writeAnswer(w, ans)
}

// body is the JSON error body of ans. retry_after_ms is the hint rounded up
// to a whole millisecond, so that a client that waits for it never comes
// back early.
func (ans answer) body() errorBody {
	b := errorBody{Error: errorDetail{Code: ans.code, Message: ans.msg, Why: ans.why}}
	if !ans.freesAt.IsZero() {
		b.Error.FreesAt = ans.freesAt.UTC().Format(time.RFC3339Nano)
	}
	if ans.retryAfter > 0 {
		ms := ans.retryAfter.Milliseconds()
		if time.Duration(ms)*time.Millisecond < ans.retryAfter {
			ms++
		}
		b.Error.RetryAfterMS = ms
	}
	return b
}

// writeAnswer writes ans as an HTTP answer: status, headers and body.
func writeAnswer(w http.ResponseWriter, ans answer) {
	h := w.Header()
	if ans.fastFail != "" {
		h.Set(FastFailHeader, ans.fastFail)
	}
	body := ans.body()
	if ms := body.Error.RetryAfterMS; ms > 0 {
		h.Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
	}
	writeJSON(w, ans.status, body)
}

// mustMarshalError encodes an answer's error body, as writeAnswer writes
// it, for the error event of an event stream.
func mustMarshalError(ans answer) []byte {
	raw, err := json.Marshal(ans.body())
	if err != nil {
		panic(fmt.Sprintf("httpapi: encoding an error body: %v", err)) // strings and numbers always encode
	}
	return raw
}
