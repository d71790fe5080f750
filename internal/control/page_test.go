package control

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/repool/repool/internal/pool"
)

// page sends a page request with a bearer token (none when tok is empty)
// and returns the answer.
func (h *harness) page(method, path, tok string) response {
	h.t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	h.api.StatusPages().ServeHTTP(rec, req)
	return response{rec.Code, rec.Result().Header, rec.Body.String()}
}

// TestStatusPagesRoles checks who sees which page: the operator every
// page, a tenant's admin or viewer its own tenant's page only, the metrics
// role and a stranger none.
func TestStatusPagesRoles(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	h.createTenant("b")
	withResource(h, "a")
	op, viewer, metrics := h.token(RoleOperator, ""), h.token(RoleTenantViewer, "a"), h.token(RoleMetrics, "")
	before := h.snapshot()

	for _, c := range []struct {
		name, path, tok string
		want            int
		wantText        string
	}{
		{"no token: the sign-in form", "/status", "", 401, `name="token"`},
		{"a bad token: the sign-in form", "/status", "x.y.z", 401, "invalid or has expired"},
		{"operator: the overview", "/status", op, 200, `<a href="/status/tenants/b">b</a>`},
		{"operator: a tenant", "/status/tenants/a", op, 200, "<code>r1</code>"},
		{"viewer: the overview sends it to its tenant", "/status", viewer, 303, ""},
		{"viewer: its tenant", "/status/tenants/a", viewer, 200, "<code>r1</code>"},
		{"viewer: another tenant", "/status/tenants/b", viewer, 403, "scoped to another tenant"},
		{"metrics: no page", "/status", metrics, 403, "reads /metrics only"},
		{"operator: an unknown tenant", "/status/tenants/zz", op, 404, "There is no tenant"},
		{"operator: a tenant without a pool here", "/status/tenants/b", op, 200, "holds no pool of this tenant"},
		{"an unknown page", "/status/nothing", op, 404, "There is no page"},
	} {
		r := h.page("GET", c.path, c.tok)
		if r.status != c.want || !strings.Contains(r.body, c.wantText) {
			t.Errorf("%s: GET %s = %d, want %d with %q:\n%s", c.name, c.path, r.status, c.want, c.wantText, r.body)
		}
		if ct := r.header.Get("Content-Type"); r.status != 303 && ct != "text/html; charset=utf-8" {
			t.Errorf("%s: Content-Type %q, want HTML", c.name, ct)
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q, want frame-ancestors 'none'", c.name, csp)
		}
	}
	if loc := h.page("GET", "/status", viewer).header.Get("Location"); loc != "/status/tenants/a" {
		t.Errorf("the viewer's overview sends it to %q, want /status/tenants/a", loc)
	}
	// A page reads; it changes nothing.
	h.unchanged("the status pages", before)
}

// TestStatusPageEscapes checks that a resource id with markup is shown as
// text: html/template escapes it for its context.
func TestStatusPageEscapes(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	withResource(h, "a")
	hostile := `<script>alert(1)</script>"onmouseover="x`
	if _, _, err := h.hooks.pools["a"].Register([]pool.Spec{{ID: hostile}}); err != nil {
		t.Fatal(err)
	}
	r := h.page("GET", "/status/tenants/a", h.token(RoleOperator, ""))
	if r.status != 200 {
		t.Fatalf("GET the tenant's page = %d:\n%s", r.status, r.body)
	}
	if strings.Contains(r.body, "<script") || strings.Contains(r.body, `"onmouseover`) {
		t.Fatalf("the page holds the hostile id as markup:\n%s", r.body)
	}
	if !strings.Contains(r.body, "&lt;script&gt;alert(1)&lt;/script&gt;&#34;onmouseover=&#34;x") {
		t.Fatalf("the page does not show the hostile id as text:\n%s", r.body)
	}
}

// TestStatusLogin checks the sign-in form: a token posted from the page
// sets an HttpOnly, SameSite=Strict cookie for /status that opens the
// pages; one posted from another site sets nothing.
func TestStatusLogin(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op := h.token(RoleOperator, "")
	post := func(body string, header map[string]string) *http.Response {
		req := httptest.NewRequest("POST", "http://repool.example/status/login", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.api.StatusPages().ServeHTTP(rec, req)
		return rec.Result()
	}
	for _, hdr := range []map[string]string{{"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}} {
		if resp := post("token="+op, hdr); resp.StatusCode != 403 || len(resp.Cookies()) != 0 {
			t.Errorf("sign-in with %v = %d, cookies %v, want 403 and none", hdr, resp.StatusCode, resp.Cookies())
		}
	}
	if resp := post("token=nonsense", nil); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Errorf("sign-in with a bad token = %d, cookies %v, want 401 and none", resp.StatusCode, resp.Cookies())
	}
	resp := post("token="+op, map[string]string{"Origin": "http://repool.example", "Sec-Fetch-Site": "same-origin"})
	ck := resp.Cookies()
	if resp.StatusCode != 303 || len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/status" || ck[0].Expires.IsZero() {
		t.Fatalf("sign-in from the page = %d, cookies %v, want 303 and one HttpOnly SameSite=Strict cookie for /status with an expiry", resp.StatusCode, ck)
	}
	req := httptest.NewRequest("GET", "/status", nil)
	req.AddCookie(ck[0])
	rec := httptest.NewRecorder()
	h.api.StatusPages().ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "Tenants") {
		t.Fatalf("GET /status with the cookie = %d, want the overview:\n%s", rec.Code, rec.Body.String())
	}
}
