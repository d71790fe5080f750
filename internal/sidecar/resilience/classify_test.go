package resilience

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// errorInfo is a status error with code c and an ErrorInfo detail.
func errorInfo(c codes.Code, domain, reason string) error {
	st, err := status.New(c, "refused").WithDetails(&errdetails.ErrorInfo{Domain: domain, Reason: reason})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestTenantElsewhere(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"TENANT_ELSEWHERE", errorInfo(codes.Unavailable, repoolv1.ErrorDomain, repoolv1.ReasonTenantElsewhere), true},
		{"wrapped", fmt.Errorf("call: %w", errorInfo(codes.Unavailable, repoolv1.ErrorDomain, repoolv1.ReasonTenantElsewhere)), true},
		{"plain UNAVAILABLE", grpcErr(codes.Unavailable), false},
		{"another reason", errorInfo(codes.Unavailable, repoolv1.ErrorDomain, repoolv1.ReasonRateLimited), false},
		{"another domain", errorInfo(codes.Unavailable, "other", repoolv1.ReasonTenantElsewhere), false},
		{"another code", errorInfo(codes.FailedPrecondition, repoolv1.ErrorDomain, repoolv1.ReasonTenantElsewhere), false},
		{"nil", nil, false},
		{"not a status", errors.New("TENANT_ELSEWHERE"), false},
	}
	for _, tt := range tests {
		if got := TenantElsewhere(tt.err); got != tt.want {
			t.Errorf("TenantElsewhere(%s) = got %v, want %v", tt.name, got, tt.want)
		}
		if got := excluded(tt.err); got != tt.want {
			t.Errorf("excluded(%s) = got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// handoverErr is how grpc-go reports HAProxy's own 503 when no server of
// the backend is usable and the cluster-down rule did not answer.
func handoverErr() error {
	return status.Error(codes.Unavailable, hopPrefix+"503 (Service Unavailable); transport: received unexpected content-type \"text/html\"\ndata: \"<html><body><h1>503 Service Unavailable</h1>\\nNo server is available to handle this request.\\n</body></html>\"")
}

func TestClassify(t *testing.T) {
	open := NewBreaker(BreakerConfig{Provider: "p"}).errOpen
	tests := []struct {
		name      string
		err       error
		code      codes.Code
		retryable bool
		fastFail  string
		handover  bool
	}{
		{"nil", nil, codes.OK, false, "", false},
		{"UNAVAILABLE", grpcErr(codes.Unavailable), codes.Unavailable, true, FastFailUpstream, false},
		{"wrapped UNAVAILABLE", fmt.Errorf("x: %w", grpcErr(codes.Unavailable)), codes.Unavailable, true, FastFailUpstream, false},
		{"INTERNAL", grpcErr(codes.Internal), codes.Internal, false, FastFailUpstream, false},
		{"DEADLINE_EXCEEDED", grpcErr(codes.DeadlineExceeded), codes.DeadlineExceeded, false, FastFailTimeout, false},
		{"context deadline", context.DeadlineExceeded, codes.DeadlineExceeded, false, FastFailTimeout, false},
		{"context canceled", context.Canceled, codes.Canceled, false, "", false},
		{"open breaker", open, codes.Unavailable, false, FastFailCircuitOpen, false},
		{"NOT_FOUND", grpcErr(codes.NotFound), codes.NotFound, false, "", false},
		{"RESOURCE_EXHAUSTED", grpcErr(codes.ResourceExhausted), codes.ResourceExhausted, false, "", false},
		{"plain error", fmt.Errorf("boom"), codes.Unknown, false, FastFailUpstream, false},
		{"a proxy's 503 is a handover", handoverErr(), codes.Unavailable, true, FastFailUpstream, true},
		{"a proxy's 502", status.Error(codes.Unavailable, hopPrefix+"502 (Bad Gateway)"), codes.Unavailable, true, FastFailUpstream, false},
		{"a proxy's 504 is a timeout", status.Error(codes.Unavailable, hopPrefix+"504 (Gateway Timeout); transport: received unexpected content-type \"text/html\""), codes.DeadlineExceeded, false, FastFailTimeout, false},
		{"TENANT_ELSEWHERE is retried", errorInfo(codes.Unavailable, repoolv1.ErrorDomain, repoolv1.ReasonTenantElsewhere), codes.Unavailable, true, FastFailUpstream, false},
		{"the front end's cluster-down 503 is final", status.Error(codes.Unavailable, hopPrefix+"503 (Service Unavailable); transport: received unexpected content-type \"text/plain\"\ndata: \""+repoolv1.ClusterDownText+"\""), codes.Unavailable, false, FastFailUpstream, false},
		{"a 502 naming the text is not cluster down", status.Error(codes.Unavailable, hopPrefix+"502 (Bad Gateway)\ndata: \""+repoolv1.ClusterDownText+"\""), codes.Unavailable, true, FastFailUpstream, false},
		{"a proxy's 429 is a rate limit", status.Error(codes.Unavailable, hopPrefix+"429 (Too Many Requests); transport: received unexpected content-type \"text/html\""), codes.ResourceExhausted, false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Code(tt.err); got != tt.code {
				t.Errorf("Code(%v) = got %v, want %v", tt.err, got, tt.code)
			}
			if got := Retryable(tt.err); got != tt.retryable {
				t.Errorf("Retryable(%v) = got %v, want %v", tt.err, got, tt.retryable)
			}
			if got := FastFail(tt.err); got != tt.fastFail {
				t.Errorf("FastFail(%v) = got %q, want %q", tt.err, got, tt.fastFail)
			}
			if got := Handover(tt.err); got != tt.handover {
				t.Errorf("Handover(%v) = got %v, want %v", tt.err, got, tt.handover)
			}
		})
	}
}

func TestPolicyValidation(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"defaults are valid", BreakerPolicy{}.Validate(), ""},
		{"failure ratio above 1", BreakerPolicy{FailureRatio: 1.5}.Validate(), "failure_ratio 1.5: want a value in (0, 1]"},
		{"too many buckets", BreakerPolicy{Buckets: 5000}.Validate(), "buckets 5000: want 1 to 1000"},
		{"retry defaults are valid", RetryPolicy{}.Validate(), ""},
		{"multiplier below 1", RetryPolicy{Multiplier: 0.5}.Validate(), "multiplier 0.5: want at least 1"},
		{"max interval below initial", RetryPolicy{InitialInterval: 2e9, MaxInterval: 1e9}.Validate(), "max_interval 1s: want at least initial_interval 2s"},
		{"randomization above 1", RetryPolicy{RandomizationFactor: 2}.Validate(), "randomization_factor 2: want at most 1"},
		{"budget defaults are valid", BudgetPolicy{}.Validate(), ""},
		{"budget window too short", BudgetPolicy{Window: 1}.Validate(), "window 1ns: want at least 10ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if tt.err != nil {
				got = tt.err.Error()
			}
			if got != tt.want {
				t.Fatalf("Validate() = got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTLSFailure(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`), true},
		{status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: certificate required"`), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`), false},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.1:9090: connect: connection refused"`), false},
		{status.Error(codes.Internal, "x509: something"), false},
		{errors.New("x509: not a status"), false},
	} {
		if got := TLSFailure(tt.err); got != tt.want {
			t.Errorf("TLSFailure(%v) = %v, want %v", tt.err, got, tt.want)
		}
		if tt.want && Retryable(tt.err) {
			t.Errorf("Retryable(%v) = true, want a TLS failure final", tt.err)
		}
	}
}
