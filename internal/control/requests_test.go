package control

import (
	"net/http"
	"strings"
	"testing"
)

func TestBadRequestsChangeNothing(t *testing.T) {
	big := `{"name":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	tests := []struct {
		name, method, path, body string
		message                  string // part of the error message
	}{
		// POST /api/v1/tenants
		{"tenant: empty body", "POST", "/api/v1/tenants", "", "empty"},
		{"tenant: not JSON", "POST", "/api/v1/tenants", `{"id":`, "truncated"},
		{"tenant: syntax error", "POST", "/api/v1/tenants", `{"id" "x"}`, "not valid JSON"},
		{"tenant: unknown field", "POST", "/api/v1/tenants", `{"id":"x","name":"x","owner":"me"}`, `unknown field "owner"`},
		{"tenant: trailing data", "POST", "/api/v1/tenants", `{"id":"x","name":"x"} junk`, "after the JSON value"},
		{"tenant: two values", "POST", "/api/v1/tenants", `{"id":"x","name":"x"}{"id":"y"}`, "after the JSON value"},
		{"tenant: array", "POST", "/api/v1/tenants", `[]`, "want a JSON object"},
		{"tenant: field name in upper case", "POST", "/api/v1/tenants", `{"ID":"x","name":"x"}`, `unknown field "ID" (field names are case-sensitive: did you mean "id"?)`},
		{"tenant: field name in mixed case", "POST", "/api/v1/tenants", `{"id":"x","Name":"x"}`, `unknown field "Name"`},
		{"tenant: duplicate field", "POST", "/api/v1/tenants", `{"id":"x","name":"x","name":"y"}`, `duplicate field "name"`},
		{"tenant: duplicate id", "POST", "/api/v1/tenants", `{"id":"x","id":"y","name":"x"}`, `duplicate field "id"`},
		{"tenant: case variant of a field given twice", "POST", "/api/v1/tenants", `{"id":"x","name":"x","nAme":"y"}`, `unknown field "nAme"`},
		{"tenant: trailing garbage after whitespace", "POST", "/api/v1/tenants", "{\"id\":\"x\",\"name\":\"x\"}\n\n1", "after the JSON value"},
		{"tenant: null", "POST", "/api/v1/tenants", `null`, "tenant id"},
		{"tenant: wrong type", "POST", "/api/v1/tenants", `{"id":7,"name":"x"}`, `field "id": got JSON number, want a string`},
		{"tenant: missing id", "POST", "/api/v1/tenants", `{"name":"x"}`, "tenant id"},
		{"tenant: bad id", "POST", "/api/v1/tenants", `{"id":"Bad Id","name":"x"}`, "tenant id"},
		{"tenant: id starts with a dash", "POST", "/api/v1/tenants", `{"id":"-x","name":"x"}`, "tenant id"},
		{"tenant: id too long", "POST", "/api/v1/tenants", `{"id":"` + strings.Repeat("a", 65) + `","name":"x"}`, "tenant id"},
		{"tenant: name too long", "POST", "/api/v1/tenants", `{"id":"x","name":"` + strings.Repeat("n", 257) + `"}`, "name"},
		{"tenant: name with NUL", "POST", "/api/v1/tenants", `{"id":"x","name":"a\u0000b"}`, "name"},
		{"tenant: body over 64 KiB", "POST", "/api/v1/tenants", big, "larger than 65536 bytes"},
		{"tenant: trailing data over 64 KiB", "POST", "/api/v1/tenants", `{"id":"x","name":"x"}` + strings.Repeat(" ", MaxBodyBytes), "larger than 65536 bytes"},
		// PUT .../limits
		{"limits: empty object", "PUT", "/api/v1/tenants/a/limits", `{}`, "no limits given"},
		{"limits: negative", "PUT", "/api/v1/tenants/a/limits", `{"burst":-1}`, "burst -1 is out of range: want 0 to 1073741824"},
		{"limits: negative rate", "PUT", "/api/v1/tenants/a/limits", `{"rate_per_second":-0.5}`, "rate_per_second -0.5 is out of range"},
		{"limits: one good, one negative", "PUT", "/api/v1/tenants/a/limits", `{"burst":5,"max_leases":-3}`, "max_leases -3 is out of range: want 0 to 10000000; 0 means no cap"},
		{"limits: fraction for an integer", "PUT", "/api/v1/tenants/a/limits", `{"max_streams":1.5}`, "max_streams 1.5 is not a whole number"},
		{"limits: 2^62 streams", "PUT", "/api/v1/tenants/a/limits", `{"max_streams":4611686018427387904}`, "max_streams 4611686018427387904 is out of range: want 0 to 1000"},
		{"limits: rate too high", "PUT", "/api/v1/tenants/a/limits", `{"rate_per_second":1000000001}`, "rate_per_second 1000000001 is out of range: want 0 to 1000000000"},
		{"limits: no resources at all", "PUT", "/api/v1/tenants/a/limits", `{"max_resources":0}`, "max_resources 0 is out of range: want 1 to 1000"},
		{"limits: ceiling above the global budget", "PUT", "/api/v1/tenants/a/limits", `{"max_cells":6001}`, "max_cells 6001 is out of range: want 1 to 6000"},
		{"limits: reservation above the global budget", "PUT", "/api/v1/tenants/a/limits", `{"reserved_resources":1001,"max_resources":1000}`, "reserved_resources 1001 is out of range"},
		{"limits: reservation above the default ceiling", "PUT", "/api/v1/tenants/a/limits", `{"reserved_resources":251}`, "reserved_resources 251 exceeds max_resources 250"},
		{"limits: too many leases", "PUT", "/api/v1/tenants/a/limits", `{"max_leases":10000001}`, "max_leases 10000001 is out of range"},
		{"limits: tenant-admin value out of range", "PUT", "/api/v1/tenants/a/limits", `{"tenant_admin":{"burst":-1}}`, "tenant_admin.burst -1 is out of range"},
		{"limits: tenant_admin not an object", "PUT", "/api/v1/tenants/a/limits", `{"tenant_admin":3}`, `field "tenant_admin"`},
		{"limits: tenant_admin field in another case", "PUT", "/api/v1/tenants/a/limits", `{"tenant_admin":{"Burst":1}}`, `unknown field "tenant_admin.Burst" (field names are case-sensitive: did you mean "tenant_admin.burst"?)`},
		{"limits: tenant_admin duplicate field", "PUT", "/api/v1/tenants/a/limits", `{"tenant_admin":{"burst":1,"burst":2}}`, `duplicate field "tenant_admin.burst"`},
		{"limits: effective is read-only", "PUT", "/api/v1/tenants/a/limits", `{"effective":{"burst":1}}`, `unknown field "effective"`},
		{"limits: string", "PUT", "/api/v1/tenants/a/limits", `{"burst":"100"}`, `field "burst": got JSON string`},
		{"limits: overflow", "PUT", "/api/v1/tenants/a/limits", `{"max_cells":99999999999999999999}`, "max_cells 99999999999999999999 is out of range"},
		{"limits: rate overflow", "PUT", "/api/v1/tenants/a/limits", `{"rate_per_second":1e999}`, `field "rate_per_second"`},
		{"limits: unknown field", "PUT", "/api/v1/tenants/a/limits", `{"burst":1,"max_tenants":3}`, `unknown field "max_tenants"`},
		{"limits: field name in another case", "PUT", "/api/v1/tenants/a/limits", `{"Burst":5}`, `unknown field "Burst"`},
		{"limits: duplicate field", "PUT", "/api/v1/tenants/a/limits", `{"burst":1,"burst":2}`, `duplicate field "burst"`},
		{"limits: reservation above ceiling", "PUT", "/api/v1/tenants/a/limits", `{"reserved_resources":10,"max_resources":5}`, "reserved_resources 10 exceeds max_resources 5"},
		{"limits: reservation above stored ceiling", "PUT", "/api/v1/tenants/a/limits", `{"reserved_cells":101}`, "reserved_cells 101 exceeds max_cells 100"},
		{"limits: trailing data", "PUT", "/api/v1/tenants/a/limits", `{"burst":1}]`, "after the JSON value"},
		{"limits: bad tenant id", "PUT", "/api/v1/tenants/A!/limits", `{"burst":1}`, "tenant id"},
		// PUT .../policy
		{"policy: empty object", "PUT", "/api/v1/tenants/a/policy", `{}`, "no policy given"},
		{"policy: half-life too short", "PUT", "/api/v1/tenants/a/policy", `{"half_life_seconds":59}`, "half_life_seconds 59 is out of range: want 60 to 2592000 seconds"},
		{"policy: half-life not whole", "PUT", "/api/v1/tenants/a/policy", `{"half_life_seconds":90.5}`, "half_life_seconds 90.5 is out of range"},
		{"policy: no failures", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_after":0}`, "quarantine_after 0 is out of range: want 1 to 1000 consecutive failures"},
		{"policy: too many whole failures", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_whole_after":100001}`, "quarantine_whole_after 100001 is out of range"},
		{"policy: threshold of 1", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_below":1}`, "quarantine_below 1 is out of range: want a success rate above 0 and below 1"},
		{"policy: threshold of 0", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_below":0}`, "or -1 to turn the rule off"},
		{"policy: negative threshold other than -1", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_below":-0.5}`, "quarantine_below -0.5 is out of range"},
		{"policy: no evidence", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_min_evidence":0.5}`, "quarantine_min_evidence 0.5 is out of range: want 1 to 1000000 observations"},
		{"policy: zero cooldown", "PUT", "/api/v1/tenants/a/policy", `{"cooldown_base_seconds":0}`, "cooldown_base_seconds 0 is out of range: want 1 to 86400 seconds"},
		{"policy: cooldown max too long", "PUT", "/api/v1/tenants/a/policy", `{"cooldown_max_seconds":2592001}`, "cooldown_max_seconds 2592001 is out of range"},
		{"policy: max below base", "PUT", "/api/v1/tenants/a/policy", `{"cooldown_base_seconds":60,"cooldown_max_seconds":30}`, "cooldown_max_seconds 30 is below cooldown_base_seconds 60"},
		{"policy: base above the default max", "PUT", "/api/v1/tenants/a/policy", `{"cooldown_base_seconds":7200}`, "cooldown_max_seconds 3600 is below cooldown_base_seconds 7200"},
		{"policy: one good, one bad", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_after":3,"half_life_seconds":-1}`, "half_life_seconds -1 is out of range"},
		{"policy: string", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_after":"3"}`, `field "quarantine_after": got JSON string`},
		{"policy: duration text", "PUT", "/api/v1/tenants/a/policy", `{"half_life":"1h"}`, `unknown field "half_life"`},
		{"policy: effective is read-only", "PUT", "/api/v1/tenants/a/policy", `{"effective":{"quarantine_after":1}}`, `unknown field "effective"`},
		{"policy: overflow", "PUT", "/api/v1/tenants/a/policy", `{"quarantine_after":99999999999999999999}`, "quarantine_after 99999999999999999999 is out of range"},
		{"policy: bad tenant id", "PUT", "/api/v1/tenants/A!/policy", `{"quarantine_after":3}`, "tenant id"},
		// POST .../keys
		{"key: empty body", "POST", "/api/v1/tenants/a/keys", "", "empty"},
		{"key: unknown field", "POST", "/api/v1/tenants/a/keys", `{"name":"x","key":"rpk_mine"}`, `unknown field "key"`},
		{"key: field name in upper case", "POST", "/api/v1/tenants/a/keys", `{"NAME":"x"}`, `unknown field "NAME"`},
		{"key: duplicate field", "POST", "/api/v1/tenants/a/keys", `{"name":"x","name":"y"}`, `duplicate field "name"`},
		{"key: name too long", "POST", "/api/v1/tenants/a/keys", `{"name":"` + strings.Repeat("n", 257) + `"}`, "name"},
		{"key: body over 64 KiB", "POST", "/api/v1/tenants/a/keys", big, "larger than 65536 bytes"},
		{"key: bad tenant id", "POST", "/api/v1/tenants/a..b/keys", `{"name":"x"}`, "tenant id"},
		// ids in paths and query parameters
		{"get: bad tenant id", "GET", "/api/v1/tenants/UPPER", "", "tenant id"},
		{"get: escaped slash in id", "GET", "/api/v1/tenants/a%2Fb", "", "tenant id"},
		{"delete: bad tenant id", "DELETE", "/api/v1/tenants/_a", "", "tenant id"},
		{"suspend: bad tenant id", "POST", "/api/v1/tenants/a%20b/suspend", "", "tenant id"},
		{"revoke: bad key id", "DELETE", "/api/v1/tenants/a/keys/k%21", "", "key id"},
		{"revoke: key id too long", "DELETE", "/api/v1/tenants/a/keys/" + strings.Repeat("k", 65), "", "key id"},
		{"audit: limit zero", "GET", "/api/v1/tenants/a/audit?limit=0", "", "limit"},
		{"audit: limit too big", "GET", "/api/v1/tenants/a/audit?limit=1001", "", "limit"},
		{"audit: limit not a number", "GET", "/api/v1/tenants/a/audit?limit=ten", "", "limit"},
		{"audit: negative before", "GET", "/api/v1/tenants/a/audit?before=-1", "", "before"},
		{"list: bad include_deleted", "GET", "/api/v1/tenants?include_deleted=maybe", "", "include_deleted"},
	}
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	h.createKey("a")
	op := h.token(RoleOperator, "")
	h.mustDo("PUT", "/api/v1/tenants/a/limits", op, `{"max_cells":100}`, 200, nil)
	h.hooks.Calls()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			before := h.snapshot()
			r := h.do(tt.method, tt.path, op, tt.body)
			if r.status != http.StatusBadRequest || r.errorCode() != codeInvalidArgument || !strings.Contains(r.errorMessage(), tt.message) {
				t.Fatalf("%s %s = got %d %s, want 400 invalid_argument mentioning %q", tt.method, tt.path, r.status, r.body, tt.message)
			}
			if strings.Contains(r.body, "json:") || strings.Contains(r.body, "store:") || strings.Contains(r.body, "Request") {
				t.Errorf("%s %s = got %s, which echoes a library's error", tt.method, tt.path, r.body)
			}
			h.unchanged(tt.name, before)
			if got := h.hooks.Calls(); len(got) != 0 {
				t.Errorf("hooks = got %q, want none for a bad request", got)
			}
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	tests := []struct{ method, path, allow string }{
		{"PUT", "/api/v1/tenants", "POST, GET, HEAD"},
		{"DELETE", "/api/v1/tenants", "POST, GET, HEAD"},
		{"POST", "/api/v1/tenants/a", "GET, HEAD, DELETE"},
		{"PATCH", "/api/v1/tenants/a", "GET, HEAD, DELETE"},
		{"GET", "/api/v1/tenants/a/suspend", "POST"},
		{"DELETE", "/api/v1/tenants/a/reactivate", "POST"},
		{"POST", "/api/v1/tenants/a/limits", "GET, HEAD, PUT"},
		{"DELETE", "/api/v1/tenants/a/policy", "GET, HEAD, PUT"},
		{"PUT", "/api/v1/tenants/a/keys", "POST, GET, HEAD"},
		{"GET", "/api/v1/tenants/a/keys/k1", "DELETE"},
		{"POST", "/api/v1/tenants/a/audit", "GET, HEAD"},
	}
	h := newHarness(t, openSQLite)
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			h.t = t
			for _, tok := range []string{"", h.token(RoleOperator, "")} {
				r := h.do(tt.method, tt.path, tok, "")
				if r.status != http.StatusMethodNotAllowed || r.errorCode() != codeMethodNotAllowed {
					t.Fatalf("%s %s = got %d %s, want 405 method_not_allowed", tt.method, tt.path, r.status, r.body)
				}
				if got := r.header.Get("Allow"); got != tt.allow {
					t.Errorf("%s %s: Allow = got %q, want %q", tt.method, tt.path, got, tt.allow)
				}
				if got := r.header.Get("Content-Type"); got != "application/json" {
					t.Errorf("%s %s: Content-Type = got %q, want application/json", tt.method, tt.path, got)
				}
			}
		})
	}
	if calls := h.st.calls.Load(); calls != 0 {
		t.Errorf("store calls = got %d, want 0 for 405s", calls)
	}
}

func TestUnknownPath(t *testing.T) {
	h := newHarness(t, openSQLite)
	op := h.token(RoleOperator, "")
	for _, path := range []string{"/api/v1/", "/api/v1/tenant", "/api/v1/tenants/a/", "/api/v1/tenants/a/keys/k/x", "/api/v2/tenants", "/"} {
		r := h.do("GET", path, op, "")
		if r.status != http.StatusNotFound || r.errorCode() != codeNotFound {
			t.Errorf("GET %s = got %d %s, want 404 not_found", path, r.status, r.body)
		}
	}
}
