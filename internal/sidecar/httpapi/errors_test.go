package httpapi

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
)

type retryAfter struct {
	error
	d time.Duration
}

func (r retryAfter) RetryAfter() time.Duration { return r.d }
func (r retryAfter) Unwrap() error             { return r.error }

// openBreakerError returns a real rejection of an open breaker.
func openBreakerError() error {
	b := resilience.NewBreaker(resilience.BreakerConfig{Provider: "p", Policy: resilience.BreakerPolicy{MinRequests: 1, OpenTimeout: time.Minute}})
	_ = b.Execute(func() error { return status.Error(codes.Unavailable, "down") })
	return b.Execute(func() error { return nil })
}

// credentialsError returns the token layer's invalid-credentials error.
type credentials struct{ error }

func (credentials) Is(target error) bool { return target == token.ErrInvalidCredentials }

func TestClassify(t *testing.T) {
	st := func(c codes.Code) error { return status.Error(c, "server says "+c.String()) }
	tests := []struct {
		name       string
		err        error
		status     int
		code       string
		fastFail   string
		retryAfter string // Retry-After header
	}{
		{"UNAVAILABLE", st(codes.Unavailable), 503, "unavailable", "upstream", ""},
		{"budget spent", fmt.Errorf("%w: %w", resilience.ErrBudgetSpent, st(codes.Unavailable)), 503, "unavailable", "upstream", ""},
		{"DEADLINE_EXCEEDED", st(codes.DeadlineExceeded), 504, "deadline_exceeded", "timeout", ""},
		{"our deadline", context.DeadlineExceeded, 504, "deadline_exceeded", "timeout", ""},
		{"RESOURCE_EXHAUSTED with hint", retryAfter{st(codes.ResourceExhausted), 1500 * time.Millisecond}, 429, "resource_exhausted", "", "2"},
		{"RESOURCE_EXHAUSTED without hint: 1 s", st(codes.ResourceExhausted), 429, "resource_exhausted", "", "1"},
		{"INVALID_ARGUMENT", st(codes.InvalidArgument), 400, "invalid_argument", "", ""},
		{"NOT_FOUND", st(codes.NotFound), 404, "not_found", "", ""},
		{"ALREADY_EXISTS", st(codes.AlreadyExists), 409, "already_exists", "", ""},
		{"PERMISSION_DENIED", st(codes.PermissionDenied), 403, "permission_denied", "", ""},
		{"FAILED_PRECONDITION", st(codes.FailedPrecondition), 409, "failed_precondition", "", ""},
		{"INTERNAL", st(codes.Internal), 502, "internal", "upstream", ""},
		{"UNKNOWN", st(codes.Unknown), 502, "unknown", "upstream", ""},
		{"UNIMPLEMENTED", st(codes.Unimplemented), 502, "unimplemented", "upstream", ""},
		{"invalid credentials", credentials{st(codes.Unauthenticated)}, 502, "invalid_credentials", "", ""},
		{"bare UNAUTHENTICATED", st(codes.Unauthenticated), 502, "invalid_credentials", "", ""},
		{"open breaker", openBreakerError(), 503, "circuit_open", "circuit-open", "60"},
		{"the sidecar's own refusal", badRequest("bad"), 400, "invalid_argument", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeAnswer(w, classify(tt.err))
			if w.Code != tt.status || w.Header().Get(FastFailHeader) != tt.fastFail || w.Header().Get("Retry-After") != tt.retryAfter {
				t.Fatalf("answer to %v = %d (fast-fail %q, Retry-After %q) %s, want %d (fast-fail %q, Retry-After %q)",
					tt.err, w.Code, w.Header().Get(FastFailHeader), w.Header().Get("Retry-After"), w.Body, tt.status, tt.fastFail, tt.retryAfter)
			}
			if got := classify(tt.err).code; got != tt.code {
				t.Fatalf("code of %v = got %q, want %q", tt.err, got, tt.code)
			}
		})
	}
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		c      codes.Code
		status int
		code   string
	}{
		{codes.Unauthenticated, 502, "invalid_credentials"},
		{codes.Canceled, 499, "canceled"},
		{codes.NotFound, 404, "not_found"},
		{codes.OutOfRange, 400, "out_of_range"},
		{codes.Aborted, 409, "aborted"},
		{codes.DeadlineExceeded, 504, "deadline_exceeded"},
		{codes.DataLoss, 502, "data_loss"},
		{codes.OK, 502, "unknown"},
		{codes.Code(99), 502, "unknown"},
	}
	for _, tt := range tests {
		if got, code := StatusOf(tt.c); got != tt.status || code != tt.code {
			t.Errorf("StatusOf(%v) = %d %q, want %d %q", tt.c, got, code, tt.status, tt.code)
		}
	}
}

// TestStatusOfIsTheAnswer: a bare status error of every code is answered
// as StatusOf says.
func TestStatusOfIsTheAnswer(t *testing.T) {
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		ans := classify(status.Error(c, "server says "+c.String()))
		if want, code := StatusOf(c); ans.status != want || ans.code != code {
			t.Errorf("classify(%v) = %d %q, want StatusOf(%v) = %d %q", c, ans.status, ans.code, c, want, code)
		}
	}
}

func TestMessageKeepsTheServersWords(t *testing.T) {
	err := fmt.Errorf("%w: %w", resilience.ErrBudgetSpent, status.Error(codes.Unavailable, "no active server"))
	if got, want := classify(err).msg, "retry budget spent; last attempt: no active server"; got != want {
		t.Fatalf("message = got %q, want %q", got, want)
	}
}

// TestErrorEventBodyIsTheAnswerBody: an event stream's error event carries
// the body an error answer has, its hint rounded up to the millisecond.
func TestErrorEventBodyIsTheAnswerBody(t *testing.T) {
	ans := classify(retryAfter{status.Error(codes.ResourceExhausted, "slow down"), 1500*time.Millisecond + 500*time.Microsecond})
	w := httptest.NewRecorder()
	writeAnswer(w, ans)
	want := strings.TrimSuffix(w.Body.String(), "\n")
	if got := string(mustMarshalError(ans)); got != want || !strings.Contains(got, `"retry_after_ms":1501`) {
		t.Fatalf("mustMarshalError(1500.5ms hint) = %s, want %s with retry_after_ms 1501", got, want)
	}
}
