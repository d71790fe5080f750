package server

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/control"
)

func TestMetricsHideTenantsFromRemoteCallers(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t)})
	if _, err := r.pool.Register(withKey(r.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "proxy-1"}}}); err != nil {
		t.Fatalf("Register() = got error %v, want nil", err)
	}
	mint := func(role, tenant string) string {
		t.Helper()
		tok, _, err := control.MintToken(r.s.signer, role, tenant, time.Hour)
		if err != nil {
			t.Fatalf("MintToken(%s) = got error %v, want nil", role, err)
		}
		return "Bearer " + tok
	}
	const tenantSeries, publicSeries = `repool_pool_resources{tenant="demo"} 1`, "repool_grpc_requests_total{"
	tests := []struct {
		name, remote, authz string
		tenants             bool
	}{
		{"loopback, no token", "127.0.0.1:40000", "", true},
		{"loopback IPv6, no token", "[::1]:40000", "", true},
		{"remote, no token", "192.0.2.7:40000", "", false},
		{"remote, metrics token", "192.0.2.7:40000", mint(control.RoleMetrics, ""), true},
		{"remote, operator token", "192.0.2.7:40000", mint(control.RoleOperator, ""), true},
		{"remote, tenant-admin token", "192.0.2.7:40000", mint(control.RoleTenantAdmin, "demo"), false},
		{"remote, bad token", "192.0.2.7:40000", "Bearer nope", false},
		{"remote, claiming loopback in X-Forwarded-For", "192.0.2.8:40000", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/metrics", nil)
			req.RemoteAddr = tt.remote
			req.Header.Set("X-Forwarded-For", "127.0.0.1")
			if tt.authz != "" {
				req.Header.Set("Authorization", tt.authz)
			}
			rec := httptest.NewRecorder()
			r.s.httpHandler().ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != 200 || !strings.Contains(body, publicSeries) {
				t.Fatalf("GET /metrics from %s = got %d without %q, want 200 with the series of no tenant", tt.remote, rec.Code, publicSeries)
			}
			if got := strings.Contains(body, tenantSeries); got != tt.tenants {
				t.Errorf("GET /metrics from %s (%s): holds %q = got %v, want %v", tt.remote, tt.name, tenantSeries, got, tt.tenants)
			}
			if !tt.tenants && strings.Contains(body, `tenant="`) {
				t.Errorf("GET /metrics from %s = got a series with a tenant label", tt.remote)
			}
		})
	}
}
