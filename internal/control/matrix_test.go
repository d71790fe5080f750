package control

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/token"
)

// fixture is what one matrix case runs against: two existing tenants A and
// B with a key each, and the id of a tenant that does not exist. Ids are
// fresh per case, so cases that delete or suspend do not affect others.
type fixture struct {
	a, b, ghost string
	keyA, keyB  string
	tokens      map[string]string // principal → Authorization header
}

// matrix principals.
const (
	pOperator = "operator"
	pAdminA   = "tenant-admin of A"
	pViewerA  = "tenant-viewer of A"
	pAdminB   = "tenant-admin of B"
	pMetrics  = "metrics reader"
)

// Targets of a matrix case, in the order of the want arrays.
const (
	targetA = iota
	targetB
	targetGhost
)

var targetNames = [...]string{"A", "B", "nonexistent"}

// principals are the matrix rows: the four authorized ones, then those that
// must get 401 on every route, then the metrics reader, which gets 403 on
// every route.
var principals = []string{
	pOperator, pAdminA, pViewerA, pAdminB,
	"no token", "garbage token", "wrong scheme", "expired operator token",
	"data-plane token of A", "data-plane token with operator role",
	"operator token naming a tenant", "unknown role", "tenant role without tenant",
	pMetrics,
}

func newFixture(h *harness, n int) fixture {
	h.t.Helper()
	f := fixture{a: fmt.Sprintf("a%d", n), b: fmt.Sprintf("b%d", n), ghost: fmt.Sprintf("ghost%d", n)}
	h.createTenant(f.a)
	h.createTenant(f.b)
	f.keyA, f.keyB = h.createKey(f.a), h.createKey(f.b)
	exp := h.clk.Now().Add(time.Hour)
	f.tokens = map[string]string{
		pOperator:       bearer(h.token(RoleOperator, "")),
		pAdminA:         bearer(h.token(RoleTenantAdmin, f.a)),
		pViewerA:        bearer(h.token(RoleTenantViewer, f.a)),
		pAdminB:         bearer(h.token(RoleTenantAdmin, f.b)),
		"no token":      "",
		"garbage token": "Bearer garbage",
		"wrong scheme":  "Basic " + h.token(RoleOperator, ""),
		"expired operator token": bearer(h.sign(token.Claims{
			Audience: token.AudienceControl, Role: RoleOperator, ExpiresAt: h.clk.Now().Add(-time.Second)})),
		"data-plane token of A": bearer(h.sign(token.Claims{
			Audience: token.AudienceData, Tenant: f.a, KeyID: f.keyA, ExpiresAt: exp})),
		"data-plane token with operator role": bearer(h.sign(token.Claims{
			Audience: token.AudienceData, Role: RoleOperator, ExpiresAt: exp})),
		"operator token naming a tenant": bearer(h.sign(token.Claims{
			Audience: token.AudienceControl, Role: RoleOperator, Tenant: f.a, ExpiresAt: exp})),
		"unknown role": bearer(h.sign(token.Claims{
			Audience: token.AudienceControl, Role: "superuser", Tenant: f.a, ExpiresAt: exp})),
		"tenant role without tenant": bearer(h.sign(token.Claims{
			Audience: token.AudienceControl, Role: RoleTenantAdmin, ExpiresAt: exp})),
		pMetrics: bearer(h.token(RoleMetrics, "")),
	}
	if len(f.tokens) != len(principals) {
		h.t.Fatalf("fixture has %d tokens for %d principals", len(f.tokens), len(principals))
	}
	return f
}

// target returns the tenant id and a key id of a target.
func (f fixture) target(t int) (tenant, key string) {
	switch t {
	case targetA:
		return f.a, f.keyA
	case targetB:
		return f.b, f.keyB
	}
	return f.ghost, "key_none"
}

// matrixRoute is one route of the matrix. path and body may hold {id}
// (the target tenant) and {key} (a key of the target tenant).
type matrixRoute struct {
	method, path, body string
	// setup prepares the target tenant (if it exists) before the request.
	setup func(h *harness, tenant string)
	// want is the status per authorized principal and target (A, B,
	// nonexistent); every other principal must get 401.
	want map[string][3]int
}

// Status rows shared by routes with the same access.
var (
	readWant = map[string][3]int{
		pOperator: {200, 200, 404},
		pAdminA:   {200, 403, 403},
		pViewerA:  {200, 403, 403},
		pAdminB:   {403, 200, 403},
	}
	operatorOnlyWant = func(ok int) map[string][3]int {
		return map[string][3]int{
			pOperator: {ok, ok, 404},
			pAdminA:   {403, 403, 403},
			pViewerA:  {403, 403, 403},
			pAdminB:   {403, 403, 403},
		}
	}
	writeWant = func(ok int) map[string][3]int {
		return map[string][3]int{
			pOperator: {ok, ok, 404},
			pAdminA:   {ok, 403, 403},
			pViewerA:  {403, 403, 403},
			pAdminB:   {403, ok, 403},
		}
	}
)

var matrixRoutes = []matrixRoute{
	{method: "POST", path: "/api/v1/tenants", body: `{"id":"{id}","name":"x"}`, want: map[string][3]int{
		pOperator: {409, 409, 201}, // A and B exist; the nonexistent one is created
		pAdminA:   {403, 403, 403},
		pViewerA:  {403, 403, 403},
		pAdminB:   {403, 403, 403},
	}},
	{method: "GET", path: "/api/v1/tenants", want: map[string][3]int{
		pOperator: {200, 200, 200},
		pAdminA:   {403, 403, 403},
		pViewerA:  {403, 403, 403},
		pAdminB:   {403, 403, 403},
	}},
	{method: "GET", path: "/api/v1/tenants/{id}", want: readWant},
	{method: "DELETE", path: "/api/v1/tenants/{id}", want: operatorOnlyWant(204)},
	{method: "POST", path: "/api/v1/tenants/{id}/suspend", want: operatorOnlyWant(200)},
	{
		method: "POST", path: "/api/v1/tenants/{id}/reactivate", want: operatorOnlyWant(200),
		setup: func(h *harness, tenant string) {
			if _, err := h.real.SetTenantStatus(context.Background(), tenant, store.StatusActive, store.StatusSuspended); err != nil {
				h.t.Fatalf("SetTenantStatus(%q, suspended) = got error %v, want nil", tenant, err)
			}
		},
	},
	{method: "GET", path: "/api/v1/tenants/{id}/limits", want: readWant},
	{method: "PUT", path: "/api/v1/tenants/{id}/limits", body: `{"burst":100}`, want: operatorOnlyWant(200)},
	{method: "PUT", path: "/api/v1/tenants/{id}/limits", body: `{"tenant_admin":{"burst":10}}`, want: writeWant(200)},
	{method: "GET", path: "/api/v1/tenants/{id}/policy", want: readWant},
	{method: "PUT", path: "/api/v1/tenants/{id}/policy", body: `{"quarantine_after":3,"cooldown_base_seconds":10}`, want: writeWant(200)},
	{method: "POST", path: "/api/v1/tenants/{id}/keys", body: `{"name":"ci"}`, want: writeWant(201)},
	{method: "GET", path: "/api/v1/tenants/{id}/keys", want: readWant},
	{method: "DELETE", path: "/api/v1/tenants/{id}/keys/{key}", want: writeWant(204)},
	{method: "GET", path: "/api/v1/tenants/{id}/audit", want: readWant},
	{method: "GET", path: "/api/v1/tenants/{id}/resources/r1", want: readWant, setup: withResource},
	{method: "POST", path: "/api/v1/tenants/{id}/resources/r1/quarantine", body: `{"seconds":60,"reason":"test"}`, want: writeWant(200), setup: withResource},
	{method: "POST", path: "/api/v1/tenants/{id}/resources/r1/lift", body: `{}`, want: writeWant(200), setup: withResource},
}

// withResource gives the tenant a pool holding resource r1.
func withResource(h *harness, tenant string) {
	p, err := pool.New(pool.Config{})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, _, err := p.Register([]pool.Spec{{ID: "r1"}}); err != nil {
		h.t.Fatal(err)
	}
	if h.hooks.pools == nil {
		h.hooks.pools = map[string]*pool.Pool{}
	}
	h.hooks.pools[tenant] = p
}

// wantCode is the error code each failing status of the matrix must carry.
var wantCode = map[int]string{
	http.StatusUnauthorized: codeUnauthenticated,
	http.StatusForbidden:    codePermissionDenied,
	http.StatusNotFound:     codeNotFound,
	http.StatusConflict:     codeAlreadyExists,
}

// runMatrix runs every route × principal × target against stores from open
// and checks the status, the error code, and that refused requests (401,
// 403) never reached the store.
func runMatrix(t *testing.T, open openFunc) {
	h := newHarness(t, open)
	n := 0
	for _, rt := range matrixRoutes {
		for _, p := range principals {
			for target := range 3 {
				t.Run(fmt.Sprintf("%s %s/%s/%s", rt.method, rt.path, p, targetNames[target]), func(t *testing.T) {
					h.t = t // the harness reports to the running subtest
					n++
					f := newFixture(h, n)
					tenant, key := f.target(target)
					if rt.setup != nil && target != targetGhost {
						rt.setup(h, tenant)
					}
					want := 401
					if w, ok := rt.want[p]; ok {
						want = w[target]
					} else if p == pMetrics {
						want = 403 // authenticated, but reads /metrics only
					}
					path := strings.NewReplacer("{id}", tenant, "{key}", key).Replace(rt.path)
					body := strings.ReplaceAll(rt.body, "{id}", tenant)
					before := h.st.calls.Load()
					r := h.doAuth(rt.method, path, f.tokens[p], body)
					if r.status != want {
						t.Fatalf("%s %s as %s = got %d %s, want %d", rt.method, path, p, r.status, r.body, want)
					}
					if code, ok := wantCode[want]; ok && r.errorCode() != code {
						t.Errorf("%s %s as %s: error code = got %q, want %q", rt.method, path, p, r.errorCode(), code)
					}
					if want == 401 || want == 403 {
						if calls := h.st.calls.Load() - before; calls != 0 {
							t.Errorf("%s %s as %s: refused with %d after %d store calls, want 0", rt.method, path, p, want, calls)
						}
					}
					if want == 401 && r.header.Get("WWW-Authenticate") == "" {
						t.Errorf("%s %s as %s: 401 without WWW-Authenticate", rt.method, path, p)
					}
				})
			}
		}
	}
}

func TestRouteRoleMatrix(t *testing.T) {
	runMatrix(t, openSQLite)
}
