package control

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/sqlite"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/token"
)

// fuzzMethods are the methods FuzzRequests sends, by index.
var fuzzMethods = [...]string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodHead}

// The callers of FuzzRequests, by index: a token of each role, a tenant
// admin of another tenant, and no token.
const (
	fuzzOperator = iota
	fuzzAdminA
	fuzzViewerA
	fuzzAdminB
	fuzzAnonymous
	numFuzzCallers
)

// fuzzKeyID is the fixture's API key of tenant a.
const fuzzKeyID = "key_fixture"

// fuzzPlane is FuzzRequests' control plane: a harness on an in-memory
// store holding the fixture (tenant a active with limits, a key and audit
// entries; b suspended; gone deleted), the callers' Authorization headers,
// the secrets no answer or log may hold, and the store's state as the
// fixture left it.
type fuzzPlane struct {
	*harness
	logs    *bytes.Buffer
	authz   [numFuzzCallers]string
	secrets []string
	fresh   snapshot
}

// newFuzzPlane builds the fixture on a fresh store, with the API logging
// to logs; it fails tb if it cannot.
func newFuzzPlane(tb testing.TB, logs *bytes.Buffer) *fuzzPlane {
	tb.Helper()
	ctx := context.Background()
	clk := newClock()
	st, err := sqlite.Open(ctx, sqlite.Memory, store.Options{Clock: clk})
	if err != nil {
		tb.Fatalf("sqlite.Open(memory) = %v", err)
	}
	signer, err := token.NewSigner(signingKey, clk)
	if err != nil {
		tb.Fatal(err)
	}
	p := &fuzzPlane{harness: &harness{t: tb, real: st, st: &faultStore{Store: st}, clk: clk, signer: signer, hooks: &fakeHooks{}}, logs: logs}
	p.api, err = New(Config{Store: p.st, Limits: testRules, Signer: signer, Hooks: p.hooks, Clock: clk,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		tb.Fatal(err)
	}
	plain, prefix, digest, err := auth.NewKey(bytes.NewReader(bytes.Repeat([]byte{5}, 32)))
	if err != nil {
		tb.Fatal(err)
	}
	max := int64(100)
	for _, step := range []func() error{
		func() error { _, err := st.CreateTenant(ctx, store.Tenant{ID: "a", Name: "tenant a"}); return err },
		func() error { _, err := st.CreateTenant(ctx, store.Tenant{ID: "b", Name: "tenant b"}); return err },
		func() error { _, err := st.CreateTenant(ctx, store.Tenant{ID: "gone", Name: "deleted"}); return err },
		func() error {
			_, err := st.SetTenantStatus(ctx, "b", store.StatusActive, store.StatusSuspended)
			return err
		},
		func() error { return st.DeleteTenant(ctx, "gone") },
		func() error {
			var l store.Limits
			l.Values.Set(limits.MaxCells, float64(max))
			return st.PutLimits(ctx, "a", l)
		},
		func() error {
			_, err := st.CreateKey(ctx, store.Key{ID: fuzzKeyID, TenantID: "a", Name: "fixture", Prefix: prefix, Digest: digest})
			return err
		},
		func() error {
			_, err := st.AppendAudit(ctx, store.AuditEntry{TenantID: "a", At: clk.Now(), Actor: "operator", Action: actionKeyCreate, Target: fuzzKeyID})
			return err
		},
	} {
		if err := step(); err != nil {
			tb.Fatalf("fixture: %v", err)
		}
	}
	for i, c := range [numFuzzCallers]struct{ role, tenant string }{
		fuzzOperator: {RoleOperator, ""}, fuzzAdminA: {RoleTenantAdmin, "a"},
		fuzzViewerA: {RoleTenantViewer, "a"}, fuzzAdminB: {RoleTenantAdmin, "b"},
	} {
		if c.role == "" {
			continue
		}
		tok, _, err := MintToken(signer, c.role, c.tenant, time.Hour)
		if err != nil {
			tb.Fatal(err)
		}
		p.authz[i] = "Bearer " + tok
		p.secrets = append(p.secrets, tok)
	}
	p.secrets = append(p.secrets, plain, string(digest))
	p.fresh = p.snapshot()
	return p
}

// close releases the store.
func (p *fuzzPlane) close() { p.real.Close() }

// fuzzRequest builds the request FuzzRequests sends, or nil for a target
// that no HTTP client could send (a real server would never pass it on).
func fuzzRequest(method, target string, body []byte, authz string) *http.Request {
	if strings.ContainsAny(target, " \t\r\n") {
		return nil
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil
	}
	req := httptest.NewRequest(method, "/", bytes.NewReader(body))
	req.URL, req.RequestURI = u, target
	req.Host = "127.0.0.1:8081"
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	return req
}

// okStatuses are the statuses the control plane may answer on a working
// store that is the active one.
var okStatuses = map[int]bool{200: true, 201: true, 204: true, 400: true, 401: true, 403: true, 404: true, 405: true, 409: true}

// FuzzRequests sends arbitrary paths and bodies with every method to the
// control plane's real handler, as an operator, a tenant-admin and a
// tenant-viewer of tenant a, a tenant-admin of tenant b, and without a
// token, over an in-memory store holding a fixture. Every input starts
// from the fixture (a request that changed the store gets a fresh one).
//
// Properties: the status is one a working store may give (never 500 or
// 503); an error is JSON with a code and a message and holds no token or
// key; neither answer nor log holds a secret; a refused request, a read and
// every request without a valid token change nothing in the store and call
// no hook; a viewer and a caller without a token never change anything; a
// tenant-scoped caller succeeds only on its own tenant's paths; an accepted
// change reads back as it was answered (a created tenant, the limits, a
// created key whose plain key is the stored digest's). No request takes
// longer than testenv.FuzzBound.
func FuzzRequests(f *testing.F) {
	seed := func(caller int, method, target, body string) {
		for i, m := range fuzzMethods {
			if m == method {
				f.Add(uint8(caller), uint8(i), strings.TrimPrefix(target, "/api/v1/"), []byte(body))
			}
		}
	}
	// Every route as every caller on tenant a, and as the operator on the
	// suspended, the deleted and a nonexistent tenant: few enough seeds that
	// go test runs them in a few seconds under the race detector.
	for _, rt := range matrixRoutes {
		for _, tenant := range []string{"a", "b", "gone", "ghost"} {
			target := strings.NewReplacer("{id}", tenant, "{key}", fuzzKeyID).Replace(rt.path)
			for caller := range numFuzzCallers {
				if tenant == "a" || caller == fuzzOperator {
					seed(caller, rt.method, target, strings.ReplaceAll(rt.body, "{id}", tenant+"2"))
				}
			}
		}
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "tenants", ""}, {"POST", "tenants", `{"id":`}, {"POST", "tenants", `{"id" "x"}`},
		{"POST", "tenants", `{"id":"x","name":"x","owner":"me"}`}, {"POST", "tenants", `{"id":"x","name":"x"} junk`},
		{"POST", "tenants", `[]`}, {"POST", "tenants", `null`}, {"POST", "tenants", `{"id":7,"name":"x"}`},
		{"POST", "tenants", `{"id":"Bad Id","name":"x"}`}, {"POST", "tenants", `{"id":"x","name":"a\u0000b"}`},
		{"PUT", "tenants/a/limits", `{}`}, {"PUT", "tenants/a/limits", `{"burst":-1}`},
		{"PUT", "tenants/a/limits", `{"rate_per_second":null,"max_leases":3}`}, {"PUT", "tenants/a/limits", `{"max_streams":1.5}`},
		{"PUT", "tenants/a/limits", `{"max_cells":99999999999999999999}`}, {"PUT", "tenants/a/limits", `{"rate_per_second":1e999}`},
		{"PUT", "tenants/a/limits", `{"reserved_cells":101}`}, {"PUT", "tenants/a/limits", `{"reserved_resources":10,"max_resources":5}`},
		{"PUT", "tenants/a/policy", `{}`}, {"PUT", "tenants/a/policy", `{"quarantine_below":-1,"half_life_seconds":null}`},
		{"PUT", "tenants/a/policy", `{"quarantine_after":0.5}`}, {"PUT", "tenants/a/policy", `{"cooldown_base_seconds":60,"cooldown_max_seconds":30}`},
		{"PUT", "tenants/a/policy", `{"quarantine_min_evidence":1e999}`},
		{"POST", "tenants/a/keys", `{"name":"x","key":"rpk_mine"}`}, {"POST", "tenants/a..b/keys", `{"name":"x"}`},
		{"GET", "tenants/UPPER", ""}, {"GET", "tenants/a%2Fb", ""}, {"POST", "tenants/a%20b/suspend", ""},
		{"DELETE", "tenants/a/keys/k%21", ""}, {"GET", "tenants/a/audit?limit=0", ""}, {"GET", "tenants/a/audit?limit=2&before=9", ""},
		{"GET", "tenants/a/audit?before=-1", ""}, {"GET", "tenants?include_deleted=maybe", ""}, {"GET", "tenants?include_deleted=true", ""},
		{"PATCH", "tenants/a", ""}, {"GET", "tenants/a/keys/k/x", ""}, {"GET", "", ""}, {"GET", "../v2/tenants", ""},
	} {
		seed(fuzzOperator, r.method, r.path, r.body)
	}

	p := newFuzzPlane(f, &bytes.Buffer{})
	f.Cleanup(func() { p.close() })
	f.Fuzz(func(t *testing.T, caller, method uint8, target string, body []byte) {
		who := int(caller) % numFuzzCallers
		m := fuzzMethods[int(method)%len(fuzzMethods)]
		req := fuzzRequest(m, "/api/v1/"+target, body, p.authz[who])
		if req == nil {
			return
		}
		p.logs.Reset()
		p.hooks.Calls()
		rec := httptest.NewRecorder()
		testenv.Timed(t, m+" "+req.RequestURI, func() { p.api.Handler().ServeHTTP(rec, req) })
		r := response{rec.Code, rec.Result().Header, rec.Body.String()}
		call := m + " " + req.RequestURI
		if r.status == http.StatusTemporaryRedirect || r.status == http.StatusPermanentRedirect || r.status == http.StatusMovedPermanently {
			// http.ServeMux sends a path with "..", "." or "//" to its
			// clean form; nothing else is redirected.
			if cleanPath(req.URL.Path) == req.URL.Path {
				t.Fatalf("%s = %d to %q, want no redirect but of an unclean path", call, r.status, r.header.Get("Location"))
			}
			r.status = 0 // a refusal: nothing may change
		} else if !okStatuses[r.status] {
			t.Fatalf("%s as caller %d = %d %s, want a client status or success", call, who, r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); r.status != 0 && r.status != http.StatusNoContent && ct != "application/json" {
			t.Fatalf("%s: Content-Type = %q, want application/json", call, ct)
		}
		testenv.NoSecret(t, "log of "+call, p.logs.String(), p.secrets...)
		changed := r.status >= 200 && r.status < 300 && mutating(m)
		if !changed {
			if r.status >= 400 {
				if e := r.errorJSON(); e.Code == "" || e.Message == "" {
					t.Fatalf("%s = %d %s, want an error body with a code and a message", call, r.status, r.body)
				}
				if r.status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
					t.Fatalf("%s = 401 without WWW-Authenticate", call)
				}
				testenv.NoSecret(t, "answer to "+call, r.body, p.secrets...)
			}
			p.t = t
			if after := p.snapshot(); !reflect.DeepEqual(after, p.fresh) {
				t.Fatalf("%s = %d %s, which changed the store:\nbefore %+v\nafter  %+v", call, r.status, r.body, p.fresh, after)
			}
			if calls := p.hooks.Calls(); len(calls) != 0 {
				t.Fatalf("%s = %d, which called hooks %q", call, r.status, calls)
			}
			return
		}
		switch {
		case who == fuzzAnonymous || who == fuzzViewerA:
			t.Fatalf("%s as caller %d = %d %s, want a refusal: it may change nothing", call, who, r.status, r.body)
		case who != fuzzOperator:
			tenant := map[int]string{fuzzAdminA: "a", fuzzAdminB: "b"}[who]
			if prefix := "/api/v1/tenants/" + tenant; req.URL.Path != prefix && !strings.HasPrefix(req.URL.Path, prefix+"/") {
				t.Fatalf("%s as the tenant-admin of %s = %d %s, want a refusal outside its tenant", call, tenant, r.status, r.body)
			}
		}
		p.t = t
		p.checkReadBack(call, req, r)
		// The next input starts from the fixture again.
		p.close()
		*p = *newFuzzPlane(t, p.logs)
	})
}

// checkReadBack checks that an accepted change reads back as answered.
func (p *fuzzPlane) checkReadBack(call string, req *http.Request, r response) {
	p.t.Helper()
	ctx := context.Background()
	at := req.URL.Path
	switch {
	case r.status == http.StatusCreated && at == "/api/v1/tenants":
		var got tenantJSON
		if err := json.Unmarshal([]byte(r.body), &got); err != nil {
			p.t.Fatalf("%s = %s: %v", call, r.body, err)
		}
		st, err := p.real.GetTenant(ctx, got.ID)
		if err != nil || !reflect.DeepEqual(toTenantJSON(st), got) {
			p.t.Fatalf("%s answered %+v; the store has %+v, %v", call, got, toTenantJSON(st), err)
		}
	case r.status == http.StatusCreated && strings.HasSuffix(at, "/keys"):
		var got createdKeyJSON
		if err := json.Unmarshal([]byte(r.body), &got); err != nil {
			p.t.Fatalf("%s = %s: %v", call, r.body, err)
		}
		tenant := strings.TrimSuffix(strings.TrimPrefix(at, "/api/v1/tenants/"), "/keys")
		k, err := p.real.GetKey(ctx, tenant, got.ID)
		if err != nil || k.Name != got.Name || k.Prefix != got.Prefix || !bytes.Equal(k.Digest, auth.Digest(got.Key)) {
			p.t.Fatalf("%s answered key %s (%q); the store has %+v, %v", call, got.ID, got.Name, k, err)
		}
	case r.status == http.StatusOK && strings.HasSuffix(at, "/limits"):
		tenant := strings.TrimSuffix(strings.TrimPrefix(at, "/api/v1/tenants/"), "/limits")
		l, err := p.real.GetLimits(ctx, tenant)
		if err != nil || r.body != encoded(testRules.toJSON(l)) {
			p.t.Fatalf("%s answered %s; the store has %+v, %v", call, r.body, l, err)
		}
	case r.status == http.StatusOK && strings.HasSuffix(at, "/policy"):
		tenant := strings.TrimSuffix(strings.TrimPrefix(at, "/api/v1/tenants/"), "/policy")
		l, err := p.real.GetLimits(ctx, tenant)
		var got policyJSON
		if jerr := json.Unmarshal([]byte(r.body), &got); err != nil || jerr != nil || !reflect.DeepEqual(testRules.policyToJSON(l.Policy), got) {
			p.t.Fatalf("%s answered %s; the store has %+v, %v", call, r.body, l.Policy, err)
		}
	}
}

// cleanPath is the path http.ServeMux redirects p to: path.Clean, keeping
// a trailing slash.
func cleanPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}
