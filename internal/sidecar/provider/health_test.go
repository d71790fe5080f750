package provider

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthAnswer is a health service that answers one way.
type healthAnswer struct {
	healthpb.HealthClient
	st  healthpb.HealthCheckResponse_ServingStatus
	err error
}

func (h healthAnswer) Check(context.Context, *healthpb.HealthCheckRequest, ...grpc.CallOption) (*healthpb.HealthCheckResponse, error) {
	if h.err != nil {
		return nil, h.err
	}
	return &healthpb.HealthCheckResponse{Status: h.st}, nil
}

// TestCheckHealth pins the one rule of the breaker's probe and of Ready:
// SERVING and a server without the health service pass; NOT_SERVING fails
// as UNAVAILABLE, in words an operator reads; other errors fail as
// themselves.
func TestCheckHealth(t *testing.T) {
	tests := []struct {
		name   string
		answer healthAnswer
		want   codes.Code
		msg    string
	}{
		{"serving", healthAnswer{st: healthpb.HealthCheckResponse_SERVING}, codes.OK, ""},
		{"no health service", healthAnswer{err: status.Error(codes.Unimplemented, "unknown service")}, codes.OK, ""},
		{"a standby", healthAnswer{st: healthpb.HealthCheckResponse_NOT_SERVING}, codes.Unavailable, "the provider answers NOT_SERVING (a standby, or starting)"},
		{"unknown status", healthAnswer{st: healthpb.HealthCheckResponse_UNKNOWN}, codes.Unavailable, "the provider answers UNKNOWN (a standby, or starting)"},
		{"unreachable", healthAnswer{err: status.Error(codes.Unavailable, "connection refused")}, codes.Unavailable, "rpc error: code = Unavailable desc = connection refused"},
		{"permission", healthAnswer{err: status.Error(codes.PermissionDenied, "no")}, codes.PermissionDenied, "rpc error: code = PermissionDenied desc = no"},
	}
	for _, tt := range tests {
		err := CheckHealth(context.Background(), tt.answer)
		if status.Code(err) != tt.want || (err != nil && err.Error() != tt.msg) {
			t.Errorf("%s: CheckHealth() = %v (%v), want %v %q", tt.name, err, status.Code(err), tt.want, tt.msg)
		}
	}
}
