package abuse

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// attackMetricsFromAnotherHost: the server's HTTP port on a non-loopback
// address, scraped from that address. Without a token the scraper gets
// the series of no tenant; a token of role metrics (or operator) gets the
// per-tenant ones, a tenant-admin's does not.
func attackMetricsFromAnotherHost(t *testing.T, bins binaries) {
	ip := nonLoopbackIPv4(t)
	// Plaintext on purpose (--insecure): the attack is on what is exposed,
	// not on the transport.
	srv := startServer(t, bins, ip, "--insecure")
	if _, err := srv.pool(t).Register(withKey(srv.key), &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "proxy-1"}}}); err != nil {
		t.Fatal(err)
	}
	const tenantSeries = `repool_pool_resources{tenant="demo"} 1`
	for _, tt := range []struct {
		name, token string
		tenants     bool
	}{
		{"no token", "", false},
		{"a tenant-admin's token", srv.adminToken(t, "tenant-admin", "demo"), false},
		{"a metrics token", srv.adminToken(t, "metrics", ""), true},
		{"the operator's token", srv.token, true},
	} {
		header := map[string]string{}
		if tt.token != "" {
			header["Authorization"] = "Bearer " + tt.token
		}
		code, body := request(t, http.DefaultClient, "GET", srv.httpURL+"/metrics", "", header)
		got := strings.Contains(body, tenantSeries)
		t.Logf("GET /metrics from %s with %s: %d, per-tenant series: %v", ip, tt.name, code, got)
		if code != 200 || !strings.Contains(body, "go_goroutines") {
			t.Errorf("GET /metrics from %s with %s = got %d without go_goroutines, want 200 with the series of no tenant", ip, tt.name, code)
		}
		if got != tt.tenants || (!tt.tenants && strings.Contains(body, `tenant="`)) {
			t.Errorf("GET /metrics from %s with %s: per-tenant series = got %v, want %v", ip, tt.name, got, tt.tenants)
		}
	}
	// A metrics token opens nothing of the control plane.
	if code, _ := srv.control(t, "GET", "/api/v1/tenants", srv.adminToken(t, "metrics", ""), ""); code != 403 {
		t.Errorf("GET /api/v1/tenants with a metrics token = got %d, want 403", code)
	}
}

// attackControlPlaneBodies: field names in another letter case, duplicate
// fields and trailing data, which encoding/json alone would take. Each is
// a 400 that names it, and nothing is created.
func attackControlPlaneBodies(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	for _, a := range []struct {
		name, method, path, body, says string
	}{
		{"id in upper case", "POST", "/api/v1/tenants", `{"ID":"x1","name":"x"}`, `unknown field \"ID\"`},
		{"name in mixed case", "POST", "/api/v1/tenants", `{"id":"x2","NaMe":"x"}`, `unknown field \"NaMe\"`},
		{"a duplicate id", "POST", "/api/v1/tenants", `{"id":"x3","id":"x4","name":"x"}`, `duplicate field \"id\"`},
		{"trailing data", "POST", "/api/v1/tenants", `{"id":"x5","name":"x"}{"id":"x6"}`, "data after the JSON value"},
		{"an unknown field", "POST", "/api/v1/tenants", `{"id":"x7","name":"x","owner":"me"}`, `unknown field \"owner\"`},
		{"a limit in another case", "PUT", "/api/v1/tenants/demo/limits", `{"Max_Streams":1000}`, `unknown field \"Max_Streams\"`},
		{"a nested limit in another case", "PUT", "/api/v1/tenants/demo/limits", `{"tenant_admin":{"BURST":1}}`, `unknown field \"tenant_admin.BURST\"`},
		{"a duplicate limit", "PUT", "/api/v1/tenants/demo/limits", `{"burst":1,"burst":1000000}`, `duplicate field \"burst\"`},
		{"a key name twice", "POST", "/api/v1/tenants/demo/keys", `{"name":"a","name":"b"}`, `duplicate field \"name\"`},
	} {
		code, body := srv.control(t, a.method, a.path, srv.token, a.body)
		if code != 400 || !strings.Contains(body, a.says) {
			t.Errorf("%s: %s %s %s = got %d %s, want 400 saying %s", a.name, a.method, a.path, a.body, code, body, a.says)
		}
	}
	code, body := srv.control(t, "GET", "/api/v1/tenants", srv.token, "")
	var list struct{ Tenants []struct{ ID string } }
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Tenants) != 1 {
		t.Errorf("tenants after the refused bodies = got %d %s, want only demo", code, body)
	}
	code, body = srv.control(t, "GET", "/api/v1/tenants/demo/keys", srv.token, "")
	if code != 200 || strings.Count(body, `"id":`) != 1 {
		t.Errorf("keys of demo after the refused bodies = got %d %s, want the one of the first start", code, body)
	}
	code, body = srv.control(t, "GET", "/api/v1/tenants/demo/limits", srv.token, "")
	if code != 200 || !strings.Contains(body, `"burst":null`) {
		t.Errorf("limits of demo after the refused bodies = got %d %s, want none set", code, body)
	}
}

// attackKeyHoarding: a tenant-admin issues keys without end. The cap
// (--max-keys-per-tenant) refuses the one over it; revoking one makes
// room.
func attackKeyHoarding(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "", "--max-keys-per-tenant", "5")
	admin := srv.adminToken(t, "tenant-admin", "demo")
	var last string
	for i := range 4 { // the first start issued one
		code, body := srv.control(t, "POST", "/api/v1/tenants/demo/keys", admin, fmt.Sprintf(`{"name":"k%d"}`, i))
		var k struct{ ID string }
		if code != 201 || json.Unmarshal([]byte(body), &k) != nil {
			t.Fatalf("key %d = got %d %s, want 201", i+2, code, body)
		}
		last = k.ID
	}
	code, body := srv.control(t, "POST", "/api/v1/tenants/demo/keys", admin, `{"name":"one too many"}`)
	if code != 409 || errorCode(body) != "resource_exhausted" || !strings.Contains(body, "5 API keys") {
		t.Fatalf("the 6th key = got %d %s, want 409 resource_exhausted naming the cap of 5", code, body)
	}
	t.Logf("attack: the 6th key at a cap of 5: %d %s", code, errorCode(body))
	if code, body := srv.control(t, "DELETE", "/api/v1/tenants/demo/keys/"+last, admin, ""); code != 204 {
		t.Fatalf("revoking a key = got %d %s, want 204", code, body)
	}
	if code, body := srv.control(t, "POST", "/api/v1/tenants/demo/keys", admin, `{"name":"replacement"}`); code != 201 {
		t.Errorf("a key after revoking one = got %d %s, want 201", code, body)
	}
}
