package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/tenants"
	"github.com/repool/repool/internal/token"
)

func TestNewValidatesConfig(t *testing.T) {
	h := newHarness(t, openSQLite)
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no store", Config{Signer: h.signer, Hooks: NopHooks{}}, "Store"},
		{"no signer", Config{Store: h.real, Hooks: NopHooks{}}, "Signer"},
		{"no hooks", Config{Store: h.real, Signer: h.signer}, "Hooks"},
		{"no limit rules", Config{Store: h.real, Signer: h.signer, Hooks: NopHooks{}}, "Limits"},
		{"a default unset", Config{Store: h.real, Signer: h.signer, Hooks: NopHooks{}, Limits: func() LimitRules {
			r := testRules
			r.Defaults.Values[limits.MaxStreams] = nil
			return r
		}()}, "max_streams is not set"},
		{"a default out of range", Config{Store: h.real, Signer: h.signer, Hooks: NopHooks{}, Limits: func() LimitRules {
			r := testRules
			r.Defaults.Values.Set(limits.MaxResources, 1001)
			return r
		}()}, "max_resources 1001 is out of range"},
		{"negative key cap", Config{Store: h.real, Signer: h.signer, Hooks: NopHooks{}, Limits: testRules, MaxKeysPerTenant: -1}, "MaxKeysPerTenant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("New(%s) = got error %v, want one naming %s", tt.name, err, tt.field)
			}
		})
	}
	if _, err := New(Config{Store: h.real, Limits: testRules, Signer: h.signer, Hooks: NopHooks{}}); err != nil {
		t.Fatalf("New(required fields only) = got error %v, want nil", err)
	}
}

// auditLine is the part of an audit entry the tests compare.
type auditLine struct{ Actor, Action, Target string }

func lines(es []auditJSON) []auditLine {
	out := make([]auditLine, 0, len(es))
	for _, e := range es {
		out = append(out, auditLine{e.Actor, e.Action, e.Target})
	}
	return out
}

func TestEveryMutationIsAudited(t *testing.T) {
	h := newHarness(t, openSQLite)
	op := h.token(RoleOperator, "")
	admin := h.token(RoleTenantAdmin, "acme")
	viewer := h.token(RoleTenantViewer, "acme")

	var created tenantJSON
	r := h.mustDo("POST", "/api/v1/tenants", op, `{"id":"acme","name":"Acme Inc."}`, 201, &created)
	if created.ID != "acme" || created.Name != "Acme Inc." || created.Status != store.StatusActive || created.CreatedAt.IsZero() {
		t.Fatalf("POST /api/v1/tenants = got %+v, want acme, active", created)
	}
	if loc := r.header.Get("Location"); loc != "/api/v1/tenants/acme" {
		t.Errorf("POST /api/v1/tenants: Location = got %q, want /api/v1/tenants/acme", loc)
	}
	var key createdKeyJSON
	h.mustDo("POST", "/api/v1/tenants/acme/keys", admin, `{"name":"ci"}`, 201, &key)
	h.mustDo("PUT", "/api/v1/tenants/acme/limits", admin, `{"tenant_admin":{"burst":10,"max_streams":3}}`, 200, nil)
	h.mustDo("PUT", "/api/v1/tenants/acme/policy", admin, `{"quarantine_after":3,"quarantine_below":-1}`, 200, nil)
	h.mustDo("DELETE", "/api/v1/tenants/acme/keys/"+key.ID, admin, "", 204, nil)
	h.mustDo("POST", "/api/v1/tenants/acme/suspend", op, "", 200, nil)
	h.mustDo("POST", "/api/v1/tenants/acme/reactivate", op, "", 200, nil)

	var page auditPage
	h.mustDo("GET", "/api/v1/tenants/acme/audit", viewer, "", 200, &page)
	want := []auditLine{
		{"operator", "tenant.reactivate", "acme"},
		{"operator", "tenant.suspend", "acme"},
		{"tenant-admin:acme", "key.revoke", key.ID},
		{"tenant-admin:acme", "policy.put", "acme"},
		{"tenant-admin:acme", "limits.put", "acme"},
		{"tenant-admin:acme", "key.create", key.ID},
		{"operator", "tenant.create", "acme"},
	}
	if got := lines(page.Entries); !reflect.DeepEqual(got, want) {
		t.Fatalf("GET .../audit = got %+v, want %+v", got, want)
	}
	if page.NextBefore != 0 {
		t.Errorf("GET .../audit: next_before = got %d on the last page, want absent", page.NextBefore)
	}
	details := map[string]string{}
	for i, e := range page.Entries {
		details[e.Action] = e.Detail
		if i > 0 && e.ID >= page.Entries[i-1].ID {
			t.Errorf("GET .../audit: entry %d has id %d after id %d, want newest first", i, e.ID, page.Entries[i-1].ID)
		}
		if !e.At.Equal(h.clk.Now()) {
			t.Errorf("GET .../audit: %s at %v, want the API clock's %v", e.Action, e.At, h.clk.Now())
		}
		if strings.Contains(e.Detail, key.Key) || strings.Contains(e.Detail, key.Key[len(key.Prefix):]) {
			t.Errorf("GET .../audit: %s detail %q holds the API key", e.Action, e.Detail)
		}
	}
	for action, want := range map[string]string{
		"tenant.create":  `name="Acme Inc." group="default"`,
		"key.create":     `name="ci" prefix="` + key.Prefix + `"`,
		"limits.put":     "tenant_admin.burst none -> 10, tenant_admin.max_streams none -> 3",
		"policy.put":     "quarantine_after default -> 3, quarantine_below default -> -1",
		"tenant.suspend": "status active -> suspended",
	} {
		if details[action] != want {
			t.Errorf("audit detail of %s = got %q, want %q", action, details[action], want)
		}
	}

	// Paging: limit=4 gives the 4 newest and a cursor to the rest.
	var p1, p2 auditPage
	h.mustDo("GET", "/api/v1/tenants/acme/audit?limit=4", viewer, "", 200, &p1)
	if len(p1.Entries) != 4 || p1.NextBefore != p1.Entries[3].ID {
		t.Fatalf("GET .../audit?limit=4 = got %d entries, next_before %d, want 4 and the last id", len(p1.Entries), p1.NextBefore)
	}
	h.mustDo("GET", fmt.Sprintf("/api/v1/tenants/acme/audit?limit=4&before=%d", p1.NextBefore), viewer, "", 200, &p2)
	if got := lines(append(p1.Entries, p2.Entries...)); !reflect.DeepEqual(got, want) {
		t.Fatalf("two audit pages = got %+v, want %+v", got, want)
	}
}

func TestAuditIsScopedToTheTenant(t *testing.T) {
	h := newHarness(t, openSQLite)
	op := h.token(RoleOperator, "")
	h.mustDo("POST", "/api/v1/tenants", op, `{"id":"a","name":"A"}`, 201, nil)
	h.mustDo("POST", "/api/v1/tenants", op, `{"id":"b","name":"B"}`, 201, nil)
	var keyB createdKeyJSON
	h.mustDo("POST", "/api/v1/tenants/b/keys", op, `{"name":"b-key"}`, 201, &keyB)
	h.mustDo("PUT", "/api/v1/tenants/b/limits", op, `{"max_leases":7}`, 200, nil)
	h.mustDo("DELETE", "/api/v1/tenants/b/keys/"+keyB.ID, op, "", 204, nil)
	h.mustDo("POST", "/api/v1/tenants/b/suspend", op, "", 200, nil)

	for _, tok := range []string{op, h.token(RoleTenantAdmin, "a"), h.token(RoleTenantViewer, "a")} {
		var page auditPage
		r := h.mustDo("GET", "/api/v1/tenants/a/audit", tok, "", 200, &page)
		if want := []auditLine{{"operator", "tenant.create", "a"}}; !reflect.DeepEqual(lines(page.Entries), want) {
			t.Errorf("GET /api/v1/tenants/a/audit = got %+v, want only %+v", lines(page.Entries), want)
		}
		if strings.Contains(r.body, keyB.ID) || strings.Contains(r.body, `"b"`) {
			t.Errorf("GET /api/v1/tenants/a/audit = got %s, which mentions tenant b", r.body)
		}
	}
	if got := len(h.auditOf("b")); got != 5 {
		t.Errorf("audit entries of b = got %d, want 5", got)
	}
}

func TestCreatedKeyIsShownOnce(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("acme")
	admin := h.token(RoleTenantAdmin, "acme")

	var k createdKeyJSON
	r := h.mustDo("POST", "/api/v1/tenants/acme/keys", admin, `{"name":"deploy"}`, 201, &k)
	if !strings.HasPrefix(k.Key, auth.KeyPrefix) || !strings.HasPrefix(k.Key, k.Prefix) || len(k.Key) < 40 {
		t.Fatalf("POST .../keys = got key %q, prefix %q, want a full rpk_ key starting with its prefix", k.Key, k.Prefix)
	}
	if k.Name != "deploy" || store.ValidateKeyID(k.ID) != nil || k.CreatedAt.IsZero() {
		t.Errorf("POST .../keys = got %+v, want name deploy, a valid id and created_at", k)
	}
	if got := r.header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("POST .../keys: Cache-Control = got %q, want no-store", got)
	}
	stored, tenant, err := h.real.LookupKey(context.Background(), auth.Digest(k.Key))
	if err != nil || stored.ID != k.ID || tenant.ID != "acme" {
		t.Fatalf("LookupKey(digest of the shown key) = got %+v, %q, %v, want key %s of acme", stored, tenant.ID, err, k.ID)
	}

	r = h.mustDo("GET", "/api/v1/tenants/acme/keys", admin, "", 200, nil)
	if strings.Contains(r.body, k.Key) || strings.Contains(r.body, `"key"`) || strings.Contains(r.body, "digest") {
		t.Fatalf("GET .../keys = got %s, which holds the key or its digest", r.body)
	}
	var list struct {
		Keys []map[string]any `json:"keys"`
	}
	h.mustDo("GET", "/api/v1/tenants/acme/keys", admin, "", 200, &list)
	want := map[string]any{"id": k.ID, "name": "deploy", "prefix": k.Prefix, "created_at": k.CreatedAt.Format(time.RFC3339Nano), "revoked_at": nil}
	if len(list.Keys) != 1 || !reflect.DeepEqual(list.Keys[0], want) {
		t.Fatalf("GET .../keys = got %v, want [%v]", list.Keys, want)
	}
	if strings.Contains(h.logs.String(), k.Key) {
		t.Error("the logs hold the plain key")
	}
}

func TestKeysPerTenantCap(t *testing.T) {
	h := newHarness(t, openSQLite)
	var err error
	h.api, err = New(Config{Store: h.st, Limits: testRules, Signer: h.signer, Hooks: h.hooks, Clock: h.clk, MaxKeysPerTenant: 2})
	if err != nil {
		t.Fatalf("New() = got error %v, want nil", err)
	}
	h.createTenant("a")
	h.createTenant("b")
	admin := h.token(RoleTenantAdmin, "a")
	var first createdKeyJSON
	h.mustDo("POST", "/api/v1/tenants/a/keys", admin, `{"name":"one"}`, 201, &first)
	var second createdKeyJSON
	h.mustDo("POST", "/api/v1/tenants/a/keys", admin, `{"name":"two"}`, 201, &second)
	before := h.snapshot()
	r := h.do("POST", "/api/v1/tenants/a/keys", admin, `{"name":"three"}`)
	if r.status != 409 || r.errorCode() != codeResourceExhausted || !strings.Contains(r.errorMessage(), `tenant "a" has 2 API keys that are not revoked, the most allowed`) {
		t.Fatalf("POST .../keys past the cap = got %d %s, want 409 resource_exhausted naming the cap", r.status, r.body)
	}
	h.unchanged("a key past the cap", before)
	h.mustDo("POST", "/api/v1/tenants/b/keys", h.token(RoleOperator, ""), `{"name":"b"}`, 201, nil)
	h.mustDo("DELETE", "/api/v1/tenants/a/keys/"+first.ID, admin, "", 204, nil)
	h.mustDo("POST", "/api/v1/tenants/a/keys", admin, `{"name":"three"}`, 201, nil)
	// One slot free, eight concurrent requests: one gets it.
	h.mustDo("DELETE", "/api/v1/tenants/a/keys/"+second.ID, admin, "", 204, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { h.do("POST", "/api/v1/tenants/a/keys", admin, `{"name":"race"}`) })
	}
	wg.Wait()
	ks, _ := h.real.ListKeys(context.Background(), "a")
	active := 0
	for _, k := range ks {
		if !k.Revoked() {
			active++
		}
	}
	if active != 2 {
		t.Errorf("active keys after 8 concurrent creates at a cap of 2 = got %d, want 2", active)
	}
}

func TestRevokeKey(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	h.createTenant("b")
	keyA, keyB := h.createKey("a"), h.createKey("b")
	admin := h.token(RoleTenantAdmin, "a")

	h.mustDo("DELETE", "/api/v1/tenants/a/keys/"+keyA, admin, "", 204, nil)
	if got, want := h.hooks.Calls(), []string{"KeyRevoked(a, " + keyA + ")"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("hooks after revoke = got %q, want %q", got, want)
	}
	k, err := h.real.GetKey(context.Background(), "a", keyA)
	if err != nil || !k.Revoked() {
		t.Fatalf("GetKey(revoked key) = got %+v, %v, want RevokedAt set", k, err)
	}
	var list struct{ Keys []keyJSON }
	h.mustDo("GET", "/api/v1/tenants/a/keys", admin, "", 200, &list)
	if len(list.Keys) != 1 || list.Keys[0].RevokedAt == nil || !list.Keys[0].RevokedAt.Equal(k.RevokedAt) {
		t.Fatalf("GET .../keys after revoke = got %+v, want revoked_at %v", list.Keys, k.RevokedAt)
	}

	// Revoking again succeeds, keeps the first time and is audited once.
	h.clk.Advance(time.Minute)
	h.mustDo("DELETE", "/api/v1/tenants/a/keys/"+keyA, admin, "", 204, nil)
	if again, _ := h.real.GetKey(context.Background(), "a", keyA); !again.RevokedAt.Equal(k.RevokedAt) {
		t.Errorf("second revoke moved RevokedAt from %v to %v", k.RevokedAt, again.RevokedAt)
	}
	revokes := 0
	for _, e := range h.auditOf("a") {
		if e.Action == actionKeyRevoke {
			revokes++
		}
	}
	if revokes != 1 {
		t.Errorf("key.revoke audit entries = got %d, want 1", revokes)
	}

	// B's key through A's path, as the operator: not found, and untouched.
	h.hooks.Calls()
	r := h.mustDo("DELETE", "/api/v1/tenants/a/keys/"+keyB, h.token(RoleOperator, ""), "", 404, nil)
	if r.errorCode() != codeNotFound {
		t.Errorf("DELETE a/keys/<key of b>: code = got %q, want not_found", r.errorCode())
	}
	if kb, _ := h.real.GetKey(context.Background(), "b", keyB); kb.Revoked() {
		t.Error("revoking B's key through A's path revoked it")
	}
	if got := h.hooks.Calls(); len(got) != 0 {
		t.Errorf("hooks after a refused revoke = got %q, want none", got)
	}
}

func TestDeleteTenant(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	h.createTenant("b")
	h.createKey("a")
	op := h.token(RoleOperator, "")

	var atCall []string
	h.hooks.tenantDeleted = func(tenant string) {
		// Runs inside the request: the delete must have committed already.
		ctx := context.Background()
		tn, err := h.real.GetTenant(ctx, tenant)
		atCall = append(atCall, fmt.Sprintf("status=%s err=%v", tn.Status, err))
		_, err = h.real.ListKeys(ctx, tenant)
		atCall = append(atCall, fmt.Sprintf("keys: %v", errors.Is(err, store.ErrNotFound)))
	}
	h.mustDo("DELETE", "/api/v1/tenants/a", op, "", 204, nil)
	if want := []string{"status=deleted err=<nil>", "keys: true"}; !reflect.DeepEqual(atCall, want) {
		t.Fatalf("store seen by TenantDeleted = got %q, want %q", atCall, want)
	}
	if got, want := h.hooks.Calls(), []string{"TenantDeleted(a)"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("hooks = got %q, want %q", got, want)
	}

	h.mustDo("GET", "/api/v1/tenants/a", op, "", 404, nil)
	h.mustDo("GET", "/api/v1/tenants/a/audit", op, "", 404, nil)
	h.mustDo("GET", "/api/v1/tenants/a/keys", op, "", 404, nil)
	h.mustDo("DELETE", "/api/v1/tenants/a", op, "", 404, nil)
	h.mustDo("POST", "/api/v1/tenants/a/suspend", op, "", 404, nil)
	if r := h.do("POST", "/api/v1/tenants", op, `{"id":"a","name":"again"}`); r.status != 409 || r.errorCode() != codeAlreadyExists {
		t.Fatalf("POST /api/v1/tenants with a deleted id = got %d %s, want 409 already_exists", r.status, r.body)
	}
	if got := h.hooks.Calls(); len(got) != 0 {
		t.Errorf("hooks after refused calls on a deleted tenant = got %q, want none", got)
	}

	var list struct{ Tenants []tenantJSON }
	h.mustDo("GET", "/api/v1/tenants", op, "", 200, &list)
	if len(list.Tenants) != 1 || list.Tenants[0].ID != "b" {
		t.Fatalf("GET /api/v1/tenants = got %+v, want only b", list.Tenants)
	}
	h.mustDo("GET", "/api/v1/tenants?include_deleted=true", op, "", 200, &list)
	if len(list.Tenants) != 2 || list.Tenants[0].Status != store.StatusDeleted || list.Tenants[0].DeletedAt.IsZero() {
		t.Fatalf("GET /api/v1/tenants?include_deleted=true = got %+v, want a (deleted, with deleted_at) and b", list.Tenants)
	}
}

func TestSuspendReactivate(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op := h.token(RoleOperator, "")
	tests := []struct {
		name, path string
		status     int
		code       string
		hooks      []string
		tenant     store.Status
	}{
		{"suspend", "suspend", 200, "", []string{"TenantStatusChanged(a, suspended)"}, store.StatusSuspended},
		{"suspend again", "suspend", 409, codeConflict, nil, store.StatusSuspended},
		{"reactivate", "reactivate", 200, "", []string{"TenantStatusChanged(a, active)"}, store.StatusActive},
		{"reactivate again", "reactivate", 409, codeConflict, nil, store.StatusActive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			before := len(h.auditOf("a"))
			r := h.do("POST", "/api/v1/tenants/a/"+tt.path, op, "")
			if r.status != tt.status || r.errorCode() != tt.code {
				t.Fatalf("POST .../%s = got %d %s, want %d %q", tt.path, r.status, r.body, tt.status, tt.code)
			}
			if got := h.hooks.Calls(); !reflect.DeepEqual(got, tt.hooks) {
				t.Errorf("hooks = got %q, want %q", got, tt.hooks)
			}
			if tn, _ := h.real.GetTenant(context.Background(), "a"); tn.Status != tt.tenant {
				t.Errorf("stored status = got %s, want %s", tn.Status, tt.tenant)
			}
			wantAudit := before
			if tt.status == 200 {
				wantAudit++
			}
			if got := len(h.auditOf("a")); got != wantAudit {
				t.Errorf("audit entries = got %d, want %d", got, wantAudit)
			}
		})
	}
}

func TestStatusChangeOfDeletedTenant(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	if err := h.real.DeleteTenant(context.Background(), "a"); err != nil {
		t.Fatalf("DeleteTenant(a) = got error %v, want nil", err)
	}
	op := h.token(RoleOperator, "")
	for _, path := range []string{"suspend", "reactivate"} {
		calls := h.st.calls.Load()
		r := h.do("POST", "/api/v1/tenants/a/"+path, op, "")
		if r.status != 404 || r.errorCode() != codeNotFound {
			t.Errorf("POST .../%s of a deleted tenant = got %d %s, want 404 %s", path, r.status, r.body, codeNotFound)
		}
		if n := h.st.calls.Load() - calls; n != 1 {
			t.Errorf("POST .../%s of a deleted tenant: %d store calls, want 1 (SetTenantStatus)", path, n)
		}
	}
	if got := h.hooks.Calls(); len(got) != 0 {
		t.Errorf("hooks = got %q, want none", got)
	}
}

func TestPutLimits(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op, admin := h.token(RoleOperator, ""), h.token(RoleTenantAdmin, "a")
	tests := []struct {
		name, tok, body string
		want            string // the limits that are set after the call
		effective       string // the limits in force that are not the defaults, as JSON
	}{
		{"operator sets two", op, `{"burst":100,"rate_per_second":2.5}`, `{"burst":100,"rate_per_second":2.5}`,
			`{"rate_per_second":2.5,"burst":100}`},
		{"operator sets another, keeps the rest", op, `{"max_streams":0}`, `{"burst":100,"max_streams":0,"rate_per_second":2.5}`,
			`{"rate_per_second":2.5,"burst":100,"max_streams":0}`},
		{"null resets to the default", op, `{"burst":null,"max_streams":null}`, `{"rate_per_second":2.5}`,
			`{"rate_per_second":2.5}`},
		{"tenant-admin lowers its own", admin, `{"tenant_admin":{"rate_per_second":1,"max_streams":2,"max_resources":100}}`,
			`{"rate_per_second":2.5,"tenant_admin.max_resources":100,"tenant_admin.max_streams":2,"tenant_admin.rate_per_second":1}`,
			`{"rate_per_second":1,"max_resources":100,"max_streams":2}`},
		{"tenant-admin raises back up to the ceiling", admin, `{"tenant_admin":{"rate_per_second":2.5,"max_streams":8}}`,
			`{"rate_per_second":2.5,"tenant_admin.max_resources":100,"tenant_admin.max_streams":8,"tenant_admin.rate_per_second":2.5}`,
			`{"rate_per_second":2.5,"max_resources":100}`},
		{"tenant-admin caps its leases under no cap", admin, `{"tenant_admin":{"max_leases":40,"max_resources":null}}`,
			`{"rate_per_second":2.5,"tenant_admin.max_leases":40,"tenant_admin.max_streams":8,"tenant_admin.rate_per_second":2.5}`,
			`{"rate_per_second":2.5,"max_leases":40}`},
		{"operator lowers a ceiling below the tenant-admin's value", op, `{"max_streams":3,"reserved_resources":20,"max_resources":500}`,
			`{"max_resources":500,"max_streams":3,"rate_per_second":2.5,"reserved_resources":20,"tenant_admin.max_leases":40,"tenant_admin.max_streams":8,"tenant_admin.rate_per_second":2.5}`,
			`{"rate_per_second":2.5,"reserved_resources":20,"max_resources":500,"max_streams":3,"max_leases":40}`},
		{"operator sets every field", op, `{"rate_per_second":1,"burst":2,"reserved_resources":3,"max_resources":4,"reserved_cells":5,"max_cells":6,"max_streams":7,"max_leases":8,"max_lease_streams":10,` +
			`"tenant_admin":{"rate_per_second":0.5,"burst":1,"max_resources":3,"max_cells":5,"max_streams":6,"max_leases":7,"max_lease_streams":9}}`,
			`{"burst":2,"max_cells":6,"max_lease_streams":10,"max_leases":8,"max_resources":4,"max_streams":7,"rate_per_second":1,"reserved_cells":5,"reserved_resources":3,` +
				`"tenant_admin.burst":1,"tenant_admin.max_cells":5,"tenant_admin.max_lease_streams":9,"tenant_admin.max_leases":7,"tenant_admin.max_resources":3,"tenant_admin.max_streams":6,"tenant_admin.rate_per_second":0.5}`,
			`{"rate_per_second":0.5,"burst":1,"reserved_resources":3,"max_resources":3,"reserved_cells":5,"max_cells":5,"max_streams":6,"max_leases":7,"max_lease_streams":9}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			var got struct {
				Effective json.RawMessage `json:"effective"`
			}
			put := h.mustDo("PUT", "/api/v1/tenants/a/limits", tt.tok, tt.body, 200, &got)
			stored, err := h.real.GetLimits(context.Background(), "a")
			if err != nil {
				t.Fatalf("GetLimits() = got error %v, want nil", err)
			}
			if s := showLimits(stored); s != tt.want {
				t.Errorf("stored limits = got %s, want %s", s, tt.want)
			}
			if want := encoded(testRules.toJSON(stored)); put.body != want {
				t.Errorf("PUT response = got %s, want the stored limits %s", put.body, want)
			}
			if want := effectiveJSON(t, tt.effective); string(got.Effective) != want {
				t.Errorf("PUT response: effective = got %s, want %s", got.Effective, want)
			}
			if calls, want := h.hooks.Calls(), []string{"ApplyLimits(a, " + tt.want + ")"}; !reflect.DeepEqual(calls, want) {
				t.Errorf("hooks = got %q, want %q", calls, want)
			}
			read := h.mustDo("GET", "/api/v1/tenants/a/limits", h.token(RoleTenantViewer, "a"), "", 200, nil)
			if read.body != put.body {
				t.Errorf("GET .../limits = got %s, want %s", read.body, put.body)
			}
		})
	}
	r := h.mustDo("GET", "/api/v1/tenants/a/limits", admin, "", 200, nil)
	for _, field := range []string{"rate_per_second", "burst", "reserved_resources", "max_resources", "reserved_cells", "max_cells", "max_streams", "max_leases", "tenant_admin", "effective"} {
		if !strings.Contains(r.body, `"`+field+`":`) {
			t.Errorf("GET .../limits = got %s, without field %s", r.body, field)
		}
	}
}

// effectiveJSON is the JSON of the limits in force that are testRules'
// defaults but for the values of changed (a JSON object of some limits),
// every limit in the table's order.
func effectiveJSON(t *testing.T, changed string) string {
	t.Helper()
	var m map[string]float64
	if err := json.Unmarshal([]byte(changed), &m); err != nil {
		t.Fatalf("effective %s: %v", changed, err)
	}
	v := testRules.Defaults.Values
	for l := range limits.Count {
		if x, ok := m[l.String()]; ok {
			v.Set(l, x)
			delete(m, l.String())
		}
	}
	if len(m) != 0 {
		t.Fatalf("effective %s: %v are no limits", changed, m)
	}
	return "{" + string(appendLimits(nil, v, false)) + "}"
}

// TestEveryLimitThroughTheAPI is what catches a limit of the table
// (internal/limits) that the control plane does not carry: for each, an
// operator's value and (but for a reservation) a tenant-admin's lower one
// are taken, stored, answered in their places in the table's order, and in
// force; one beyond the range is a 400 naming the limit, and null puts the
// default back.
func TestEveryLimitThroughTheAPI(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op, admin := h.token(RoleOperator, ""), h.token(RoleTenantAdmin, "a")
	var names, adminNames []string
	for l := range limits.Count {
		names = append(names, l.String())
		if !l.Spec().Reservation {
			adminNames = append(adminNames, l.String())
		}
	}
	for l := range limits.Count {
		t.Run(l.String(), func(t *testing.T) {
			h.t = t
			s := l.Spec()
			lo, hi := testRules.bounds(l)
			ceil, own := lo+2, lo+1 // whole numbers, and for a rate fractions
			if !s.Integer {
				ceil, own = lo+2.5, lo+1.5
			}
			put := h.mustDo("PUT", "/api/v1/tenants/a/limits", op, fmt.Sprintf(`{%q:%v}`, l.String(), ceil), 200, nil)
			keys := objectKeys(t, put.body)
			if want := append(slices.Clone(names), "tenant_admin", "effective"); !slices.Equal(keys[""], want) {
				t.Errorf("PUT response fields = %v, want %v", keys[""], want)
			}
			if !slices.Equal(keys["tenant_admin"], adminNames) || !slices.Equal(keys["effective"], names) {
				t.Errorf("PUT response tenant_admin fields = %v, effective = %v; want %v and %v", keys["tenant_admin"], keys["effective"], adminNames, names)
			}
			want := ceil
			if !s.Reservation {
				h.mustDo("PUT", "/api/v1/tenants/a/limits", admin, fmt.Sprintf(`{"tenant_admin":{%q:%v}}`, l.String(), own), 200, nil)
				want = own
			}
			stored, err := h.real.GetLimits(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := stored.Values.Get(l); !ok || v != ceil {
				t.Errorf("stored %s = %v (set %v), want %v", l, v, ok, ceil)
			}
			if v, ok := stored.Admin.Get(l); !s.Reservation && (!ok || v != own) {
				t.Errorf("stored tenant_admin.%s = %v (set %v), want %v", l, v, ok, own)
			}
			get := h.mustDo("GET", "/api/v1/tenants/a/limits", op, "", 200, nil)
			if want := encoded(testRules.toJSON(stored)); get.body != want {
				t.Errorf("GET .../limits = %s, want %s", get.body, want)
			}
			if got := testRules.Effective(stored).Values.Value(l); got != want {
				t.Errorf("%s in force = %v, want %v", l, got, want)
			}
			r := h.do("PUT", "/api/v1/tenants/a/limits", op, fmt.Sprintf(`{%q:%v}`, l.String(), hi+1))
			if r.status != 400 || !strings.Contains(r.errorMessage(), l.String()+" ") {
				t.Errorf("PUT %s beyond its range = %d %s, want 400 naming it", l, r.status, r.body)
			}
			h.mustDo("PUT", "/api/v1/tenants/a/limits", op, fmt.Sprintf(`{%q:null}`, l.String()), 200, nil)
			if !s.Reservation {
				h.mustDo("PUT", "/api/v1/tenants/a/limits", op, fmt.Sprintf(`{"tenant_admin":{%q:null}}`, l.String()), 200, nil)
			}
			if stored, err := h.real.GetLimits(context.Background(), "a"); err != nil || stored.Values[l] != nil || stored.Admin[l] != nil {
				t.Errorf("after null, stored %s = %v, %v (%v), want none", l, stored.Values[l], stored.Admin[l], err)
			}
			h.hooks.Calls()
		})
	}
}

// objectKeys returns the keys of the JSON object body and of the objects
// in it, each in order, by the key that holds them ("" for body's own).
func objectKeys(t *testing.T, body string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(body))
	var walk func(path string)
	walk = func(path string) {
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			key := tok.(string)
			out[path] = append(out[path], key)
			if tok, err = dec.Token(); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			if tok == json.Delim('{') {
				walk(key)
			}
		}
		dec.Token() // the closing brace
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%s: want a JSON object (%v)", body, err)
	}
	walk("")
	return out
}

// TestTenantAdminMayOnlyLowerItsLimits is the governance model: a
// tenant-admin may set only its own values, each at most the operator's
// ceiling (or the default); anything else is 403 and changes nothing.
func TestTenantAdminMayOnlyLowerItsLimits(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op := h.token(RoleOperator, "")
	h.mustDo("PUT", "/api/v1/tenants/a/limits", op, `{"rate_per_second":50,"max_streams":4,"max_leases":100,"reserved_cells":10}`, 200, nil)
	h.hooks.Calls()
	admin := h.token(RoleTenantAdmin, "a")
	tests := []struct {
		name, body string
		status     int
		message    string
	}{
		{"raise its rate", `{"rate_per_second":51}`, 403, "rate_per_second is a ceiling that only the operator sets"},
		{"set its rate to the same value", `{"rate_per_second":50}`, 403, "only the operator sets"},
		{"reserve", `{"reserved_resources":1}`, 403, "reserved_resources is a reservation of the shared budget, which only the operator sets"},
		{"lower its reservation", `{"reserved_cells":0}`, 403, "only the operator sets"},
		{"reset a ceiling", `{"max_streams":null}`, 403, "only the operator sets"},
		{"own value above the operator's ceiling", `{"tenant_admin":{"rate_per_second":50.5}}`, 403,
			"tenant_admin.rate_per_second 50.5 is above its ceiling of 50 (set by the operator)"},
		{"own value above the default", `{"tenant_admin":{"burst":51}}`, 403,
			"tenant_admin.burst 51 is above its ceiling of 50 (the server default; the operator set none)"},
		{"own resources above the default share", `{"tenant_admin":{"max_resources":251}}`, 403, "ceiling of 250"},
		{"no lease cap under a cap", `{"tenant_admin":{"max_leases":0}}`, 403, "tenant_admin.max_leases 0 (no cap) is above its ceiling of 100"},
		{"one good, one too high", `{"tenant_admin":{"max_streams":2,"max_cells":1501}}`, 403, "tenant_admin.max_cells 1501 is above its ceiling of 1500"},
		{"own value far above any range", `{"tenant_admin":{"max_resources":1000000}}`, 403, "tenant_admin.max_resources 1000000 is above its ceiling of 250"},
		{"own value out of range", `{"tenant_admin":{"max_streams":-1}}`, 400, "tenant_admin.max_streams -1 is out of range: want at least 0"},
		{"own value below its reservation", `{"tenant_admin":{"max_cells":9}}`, 400, "reserved_cells 10 exceeds tenant_admin.max_cells 9"},
		{"a reservation of its own", `{"tenant_admin":{"reserved_resources":1}}`, 400, `unknown field "tenant_admin.reserved_resources"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			before := h.snapshot()
			r := h.do("PUT", "/api/v1/tenants/a/limits", admin, tt.body)
			if r.status != tt.status || !strings.Contains(r.errorMessage(), tt.message) {
				t.Fatalf("PUT .../limits %s as tenant-admin = got %d %s, want %d mentioning %q", tt.body, r.status, r.body, tt.status, tt.message)
			}
			h.unchanged(tt.name, before)
			if got := h.hooks.Calls(); len(got) != 0 {
				t.Errorf("hooks = got %q, want none for a refused request", got)
			}
			for _, global := range []string{"1000", "6000"} {
				if strings.Contains(r.body, global) && !strings.Contains(tt.body, global) {
					t.Errorf("PUT .../limits = got %s, which tells the global budget %s", r.body, global)
				}
			}
		})
	}
	// The same too-high value from the operator is a contradiction, a 400.
	r := h.do("PUT", "/api/v1/tenants/a/limits", op, `{"max_streams":2,"tenant_admin":{"max_streams":3}}`)
	if r.status != 400 || !strings.Contains(r.errorMessage(), "tenant_admin.max_streams 3 is above its ceiling of 2") {
		t.Fatalf("PUT .../limits as operator with tenant_admin above the new ceiling = got %d %s, want 400", r.status, r.body)
	}
}

func TestApplyLimitsRefusal(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		status   int
		code     string
		message  string
		leakText string
	}{
		{"invalid limits", fmt.Errorf("%w: max_streams 500 exceeds the server's 100", tenants.ErrInvalidLimits), 400, codeInvalidArgument, "max_streams 500 exceeds the server's 100", ""},
		{"other failure", errors.New("budget ledger at 10.1.2.3 exploded"), 500, codeInternal, "internal error", "10.1.2.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, openSQLite)
			h.createTenant("a")
			h.hooks.applyLimits = func(string, store.Limits) error { return tt.err }
			before := h.snapshot()
			r := h.do("PUT", "/api/v1/tenants/a/limits", h.token(RoleOperator, ""), `{"max_streams":500}`)
			if r.status != tt.status || r.errorCode() != tt.code || !strings.Contains(r.errorMessage(), tt.message) {
				t.Fatalf("PUT .../limits = got %d %s, want %d %s %q", r.status, r.body, tt.status, tt.code, tt.message)
			}
			if tt.leakText != "" && strings.Contains(r.body, tt.leakText) {
				t.Errorf("PUT .../limits = got %s, which echoes the hook's error", r.body)
			}
			h.unchanged("a refused PUT .../limits", before)
			if got, want := h.hooks.Calls(), []string{`ApplyLimits(a, {"max_streams":500})`}; !reflect.DeepEqual(got, want) {
				t.Errorf("hooks = got %q, want %q (no rollback: nothing was applied)", got, want)
			}
		})
	}
}

func TestPutLimitsStoreFailureRollsBack(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op := h.token(RoleOperator, "")
	h.mustDo("PUT", "/api/v1/tenants/a/limits", op, `{"burst":10}`, 200, nil)
	h.hooks.Calls()
	h.st.fail = func(method string) error {
		if method == "PutLimits" {
			return fmt.Errorf("%w: connection reset by 10.9.9.9", store.ErrUnavailable)
		}
		return nil
	}
	before := h.snapshot()
	r := h.do("PUT", "/api/v1/tenants/a/limits", op, `{"burst":20}`)
	if r.status != 503 || r.errorCode() != codeUnavailable || strings.Contains(r.body, "10.9.9.9") {
		t.Fatalf("PUT .../limits with PutLimits down = got %d %s, want 503 unavailable without the store's text", r.status, r.body)
	}
	want := []string{`ApplyLimits(a, {"burst":20})`, `ApplyLimits(a, {"burst":10})`}
	if got := h.hooks.Calls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("hooks = got %q, want %q (apply, then roll back)", got, want)
	}
	h.unchanged("PUT .../limits with PutLimits down", before)
}

func TestStoreOutage(t *testing.T) {
	const secret = "dial tcp 10.7.7.7:5432: password authentication failed for user repool"
	routes := []struct{ method, path, body string }{
		{"POST", "/api/v1/tenants", `{"id":"new","name":"x"}`},
		{"GET", "/api/v1/tenants", ""},
		{"GET", "/api/v1/tenants/a", ""},
		{"DELETE", "/api/v1/tenants/a", ""},
		{"POST", "/api/v1/tenants/a/suspend", ""},
		{"POST", "/api/v1/tenants/a/reactivate", ""},
		{"GET", "/api/v1/tenants/a/limits", ""},
		{"PUT", "/api/v1/tenants/a/limits", `{"burst":1}`},
		{"POST", "/api/v1/tenants/a/keys", `{"name":"k"}`},
		{"GET", "/api/v1/tenants/a/keys", ""},
		{"DELETE", "/api/v1/tenants/a/keys/{key}", ""},
		{"GET", "/api/v1/tenants/a/audit", ""},
	}
	failures := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"unavailable", fmt.Errorf("%w: %s", store.ErrUnavailable, secret), 503, codeUnavailable},
		{"deadline", fmt.Errorf("%s: %w", secret, context.DeadlineExceeded), 503, codeUnavailable},
		{"unexpected", errors.New(secret), 500, codeInternal},
	}
	for _, fl := range failures {
		for _, rt := range routes {
			t.Run(fl.name+"/"+rt.method+" "+rt.path, func(t *testing.T) {
				h := newHarness(t, openSQLite)
				h.createTenant("a")
				key := h.createKey("a")
				op := h.token(RoleOperator, "")
				h.st.fail = func(string) error { return fl.err }
				before := h.snapshot()
				path := strings.ReplaceAll(rt.path, "{key}", key)
				r := h.do(rt.method, path, op, rt.body)
				if r.status != fl.status || r.errorCode() != fl.code {
					t.Fatalf("%s %s with the store failing = got %d %s, want %d %s", rt.method, path, r.status, r.body, fl.status, fl.code)
				}
				if strings.Contains(r.body, "10.7.7.7") || strings.Contains(r.body, "password") {
					t.Errorf("%s %s = got %s, which echoes the store's error", rt.method, path, r.body)
				}
				if fl.status == 503 && r.header.Get("Retry-After") == "" {
					t.Errorf("%s %s: 503 without Retry-After", rt.method, path)
				}
				logs := h.logs.String()
				if !strings.Contains(logs, "10.7.7.7") {
					t.Errorf("logs = %q, want the store's error logged", logs)
				}
				if strings.Contains(logs, op) {
					t.Error("the logs hold the bearer token")
				}
				h.unchanged(rt.method+" "+path+" with the store failing", before)
				if got := h.hooks.Calls(); len(got) != 0 {
					t.Errorf("hooks = got %q, want none when the store fails", got)
				}
			})
		}
	}
}

func TestNotActiveRefusesChanges(t *testing.T) {
	routes := []struct {
		method, path, body string
		status             int // when the server is active
	}{
		{"POST", "/api/v1/tenants", `{"id":"new","name":"x"}`, 201},
		{"GET", "/api/v1/tenants", "", 200},
		{"GET", "/api/v1/tenants/a", "", 200},
		{"HEAD", "/api/v1/tenants/a", "", 200},
		{"DELETE", "/api/v1/tenants/a", "", 204},
		{"POST", "/api/v1/tenants/a/suspend", "", 200},
		{"GET", "/api/v1/tenants/a/limits", "", 200},
		{"PUT", "/api/v1/tenants/a/limits", `{"burst":1}`, 200},
		{"POST", "/api/v1/tenants/a/keys", `{"name":"k"}`, 201},
		{"GET", "/api/v1/tenants/a/keys", "", 200},
		{"DELETE", "/api/v1/tenants/a/keys/{key}", "", 204},
		{"GET", "/api/v1/tenants/a/audit", "", 200},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			h := newHarness(t, openSQLite)
			h.createTenant("a")
			key := h.createKey("a")
			var active atomic.Bool
			var err error
			h.api, err = New(Config{Store: h.st, Limits: testRules, Signer: h.signer, Hooks: h.hooks, Clock: h.clk,
				Active: func() error {
					if !active.Load() {
						return errors.New("standby")
					}
					return nil
				}})
			if err != nil {
				t.Fatalf("New() = got error %v, want nil", err)
			}
			op := h.token(RoleOperator, "")
			path := strings.ReplaceAll(rt.path, "{key}", key)
			before := h.snapshot()
			calls := h.st.calls.Load()
			r := h.do(rt.method, path, op, rt.body)
			if !mutating(rt.method) {
				if r.status != rt.status {
					t.Fatalf("%s %s on a standby = got %d %s, want %d", rt.method, path, r.status, r.body, rt.status)
				}
				return
			}
			const msg = "not the active server; send control-plane changes to the active server"
			if r.status != 503 || r.errorCode() != codeUnavailable || r.errorMessage() != msg {
				t.Fatalf("%s %s on a standby = got %d %s, want 503 unavailable %q", rt.method, path, r.status, r.body, msg)
			}
			if n := h.st.calls.Load() - calls; n != 0 {
				t.Errorf("%s %s on a standby: %d store calls, want 0", rt.method, path, n)
			}
			h.unchanged(rt.method+" "+path+" on a standby", before)
			if got := h.hooks.Calls(); len(got) != 0 {
				t.Errorf("hooks = got %q, want none on a standby", got)
			}

			active.Store(true)
			if r := h.do(rt.method, path, op, rt.body); r.status != rt.status {
				t.Fatalf("%s %s once active = got %d %s, want %d", rt.method, path, r.status, r.body, rt.status)
			}
		})
	}
}

func TestAuditFailureKeepsTheChange(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	h.st.fail = func(method string) error {
		if method == "AppendAudit" {
			return fmt.Errorf("%w: gone", store.ErrUnavailable)
		}
		return nil
	}
	var k createdKeyJSON
	h.mustDo("POST", "/api/v1/tenants/a/keys", h.token(RoleOperator, ""), `{"name":"k"}`, 201, &k)
	if _, err := h.real.GetKey(context.Background(), "a", k.ID); err != nil {
		t.Fatalf("GetKey(created key) = got error %v, want the key stored", err)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "audit entry lost") || !strings.Contains(logs, k.ID) {
		t.Errorf("logs = %q, want the lost audit entry logged", logs)
	}
	if strings.Contains(logs, k.Key) {
		t.Error("the logs hold the plain key")
	}
}

func TestLifecycleHooksFollowTheStoreOrder(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	op := h.token(RoleOperator, "")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			path := "/api/v1/tenants/a/suspend"
			if i%2 == 1 {
				path = "/api/v1/tenants/a/reactivate"
			}
			h.do("POST", path, op, "")
			h.do("PUT", "/api/v1/tenants/a/limits", op, fmt.Sprintf(`{"max_leases":%d}`, i))
		})
	}
	wg.Wait()
	ctx := context.Background()
	tn, _ := h.real.GetTenant(ctx, "a")
	l, _ := h.real.GetLimits(ctx, "a")
	var lastStatus, lastLimits string
	for _, c := range h.hooks.Calls() {
		if strings.HasPrefix(c, "TenantStatusChanged") {
			lastStatus = c
		} else {
			lastLimits = c
		}
	}
	if want := "ApplyLimits(a, " + showLimits(l) + ")"; lastLimits != want {
		t.Errorf("last ApplyLimits = got %q, want %q (the stored limits)", lastLimits, want)
	}
	if lastStatus != "" && lastStatus != fmt.Sprintf("TenantStatusChanged(a, %s)", tn.Status) {
		t.Errorf("last status hook = got %q, want the stored status %s", lastStatus, tn.Status)
	}
}

func TestMintToken(t *testing.T) {
	clk := newClock()
	signer, err := token.NewSigner(signingKey, clk)
	if err != nil {
		t.Fatalf("token.NewSigner() = got error %v, want nil", err)
	}
	tests := []struct {
		name, role, tenant string
		ttl                time.Duration
		ok                 bool
	}{
		{"operator", RoleOperator, "", time.Hour, true},
		{"tenant admin", RoleTenantAdmin, "acme", time.Minute, true},
		{"tenant viewer", RoleTenantViewer, "acme", 24 * time.Hour, true},
		{"metrics", RoleMetrics, "", 8760 * time.Hour, true},
		{"operator with a tenant", RoleOperator, "acme", time.Hour, false},
		{"metrics with a tenant", RoleMetrics, "acme", time.Hour, false},
		{"tenant admin without a tenant", RoleTenantAdmin, "", time.Hour, false},
		{"tenant viewer without a tenant", RoleTenantViewer, "", time.Hour, false},
		{"tenant role with a bad tenant id", RoleTenantAdmin, "Not Valid", time.Hour, false},
		{"unknown role", "root", "", time.Hour, false},
		{"empty role", "", "", time.Hour, false},
		{"role case matters", "Operator", "", time.Hour, false},
		{"zero ttl", RoleOperator, "", 0, false},
		{"negative ttl", RoleOperator, "", -time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, exp, err := MintToken(signer, tt.role, tt.tenant, tt.ttl)
			if !tt.ok {
				if err == nil || tok != "" {
					t.Fatalf("MintToken(%q, %q, %v) = got %q, %v, want an error", tt.role, tt.tenant, tt.ttl, tok, err)
				}
				if tt.ttl > 0 && !errors.Is(err, ErrInvalidRole) {
					t.Errorf("MintToken(%q, %q) = got error %v, want ErrInvalidRole", tt.role, tt.tenant, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("MintToken(%q, %q, %v) = got error %v, want nil", tt.role, tt.tenant, tt.ttl, err)
			}
			c, err := signer.Verify(tok, token.AudienceControl)
			if err != nil || c.Role != tt.role || c.Tenant != tt.tenant || !c.ExpiresAt.Equal(exp) {
				t.Fatalf("Verify(minted) = got %+v, %v, want role %s tenant %q expiring %v", c, err, tt.role, tt.tenant, exp)
			}
			if d := time.Until(exp); d > tt.ttl || d < tt.ttl-5*time.Second {
				t.Errorf("MintToken expiry = got %v from now, want about %v", d, tt.ttl)
			}
			if _, err := signer.Verify(tok, token.AudienceData); err == nil {
				t.Error("a control token verified as a data-plane token")
			}
		})
	}
	if _, _, err := MintToken(nil, RoleOperator, "", time.Hour); err == nil {
		t.Error("MintToken(nil signer) = got nil error, want one")
	}
}

func TestLogsHoldNoSecrets(t *testing.T) {
	h := newHarness(t, openSQLite)
	op := h.token(RoleOperator, "")
	h.mustDo("POST", "/api/v1/tenants", op, `{"id":"a","name":"A"}`, 201, nil)
	var k createdKeyJSON
	h.mustDo("POST", "/api/v1/tenants/a/keys", op, `{"name":"k"}`, 201, &k)
	h.mustDo("DELETE", "/api/v1/tenants/a", op, "", 204, nil)
	h.do("GET", "/api/v1/tenants", "garbage", "")
	bad := h.sign(token.Claims{Audience: token.AudienceControl, Role: "root", ExpiresAt: h.clk.Now().Add(time.Hour)})
	h.do("GET", "/api/v1/tenants", bad, "")
	logs := h.logs.String()
	for name, secret := range map[string]string{"operator token": op, "API key": k.Key, "forged token": bad} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs hold the %s", name)
		}
	}
	if !strings.Contains(logs, "tenant deleted") {
		t.Errorf("logs = %q, want the delete logged (its trail is gone)", logs)
	}
}

func TestReadsTenantMetrics(t *testing.T) {
	h := newHarness(t, openSQLite)
	expired := h.sign(token.Claims{Audience: token.AudienceControl, Role: RoleMetrics, ExpiresAt: h.clk.Now().Add(-time.Second)})
	tests := []struct {
		name, authz string
		want        bool
	}{
		{"operator", bearer(h.token(RoleOperator, "")), true},
		{"metrics reader", bearer(h.token(RoleMetrics, "")), true},
		{"tenant-admin", bearer(h.token(RoleTenantAdmin, "a")), false},
		{"tenant-viewer", bearer(h.token(RoleTenantViewer, "a")), false},
		{"expired metrics token", bearer(expired), false},
		{"data-plane token", bearer(h.sign(token.Claims{Audience: token.AudienceData, Role: RoleMetrics, ExpiresAt: h.clk.Now().Add(time.Hour)})), false},
		{"no token", "", false},
		{"garbage", "Bearer x.y.z", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/metrics", nil)
			if tt.authz != "" {
				r.Header.Set("Authorization", tt.authz)
			}
			if got := h.api.ReadsTenantMetrics(r); got != tt.want {
				t.Errorf("ReadsTenantMetrics(%s) = got %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}

// TestCheckKeys covers the strict key walk on nested bodies: objects in
// fields, in arrays and in maps.
func TestCheckKeys(t *testing.T) {
	type inner struct {
		A int `json:"a"`
	}
	type body struct {
		In    inner            `json:"in"`
		List  []inner          `json:"list"`
		Map   map[string]inner `json:"map"`
		Other int              `json:"other,omitempty"`
		Skip  int              `json:"-"`
		Plain int
	}
	tests := []struct {
		name, raw, want string // want: part of the message; "" for no error
	}{
		{"all fine", `{"in":{"a":1},"list":[{"a":2}],"map":{"k":{"a":3}},"other":1,"Plain":2}`, ""},
		{"nested case", `{"in":{"A":1}}`, `unknown field "in.A" (field names are case-sensitive: did you mean "in.a"?)`},
		{"nested duplicate", `{"in":{"a":1,"a":2}}`, `duplicate field "in.a"`},
		{"in an array", `{"list":[{"a":1},{"b":2}]}`, `unknown field "list[1].b"`},
		{"in a map value", `{"map":{"k":{"x":1}}}`, `unknown field "map.k.x"`},
		{"duplicate map key", `{"map":{"k":{},"k":{}}}`, `duplicate field "map.k"`},
		{"a dash field", `{"Skip":1}`, `unknown field "Skip"`},
		{"untagged field by its Go name only", `{"plain":1}`, `did you mean "Plain"?`},
		{"truncated", `{"in":{"a":1}`, "truncated"},
		{"two values", `{} {}`, "after the JSON value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkKeys([]byte(tt.raw), reflect.TypeFor[body]())
			if tt.want == "" {
				if err != nil {
					t.Fatalf("checkKeys(%s) = got %v, want nil", tt.raw, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("checkKeys(%s) = got %v, want an error mentioning %q", tt.raw, err, tt.want)
			}
		})
	}
}
