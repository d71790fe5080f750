package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/sqlite"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/token"
)

// TestMain lets the PostgreSQL run of the matrix start its cluster.
func TestMain(m *testing.M) { testenv.Main(m) }

// signingKey is the test servers' token key.
var signingKey = bytes.Repeat([]byte{42}, 32)

// newClock returns a fake clock that starts at the wall clock's time, in
// whole seconds as JWT expiries are. MintToken computes expiries from the
// signer's clock (this one); starting at the wall time keeps them
// meaningful to tests that compare them with time.Until.
func newClock() *clock.Fake { return clock.NewFake(time.Now().UTC().Truncate(time.Second)) }

// openFunc opens a fresh, empty store whose timestamps come from clk.
type openFunc func(t *testing.T, clk clock.Clock) store.Store

// openSQLite opens a SQLite store in a temporary file.
func openSQLite(t *testing.T, clk clock.Clock) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "repool.db"), store.Options{Clock: clk})
	if err != nil {
		t.Fatalf("sqlite.Open() = got error %v, want nil", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// faultStore wraps a real store: every call the control plane makes is
// counted, and fail, when set, decides per method whether the call fails
// with its error instead of reaching the store. Set fail before requests
// are in flight.
type faultStore struct {
	store.Store
	fail  func(method string) error
	calls atomic.Int64
}

func (s *faultStore) check(method string) error {
	s.calls.Add(1)
	if s.fail != nil {
		return s.fail(method)
	}
	return nil
}

func (s *faultStore) CreateTenant(ctx context.Context, t store.Tenant) (store.Tenant, error) {
	if err := s.check("CreateTenant"); err != nil {
		return store.Tenant{}, err
	}
	return s.Store.CreateTenant(ctx, t)
}

func (s *faultStore) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	if err := s.check("GetTenant"); err != nil {
		return store.Tenant{}, err
	}
	return s.Store.GetTenant(ctx, id)
}

func (s *faultStore) ListTenants(ctx context.Context, f store.TenantFilter) ([]store.Tenant, error) {
	if err := s.check("ListTenants"); err != nil {
		return nil, err
	}
	return s.Store.ListTenants(ctx, f)
}

func (s *faultStore) SetTenantStatus(ctx context.Context, id string, from, to store.Status) (store.Tenant, error) {
	if err := s.check("SetTenantStatus"); err != nil {
		return store.Tenant{}, err
	}
	return s.Store.SetTenantStatus(ctx, id, from, to)
}

func (s *faultStore) DeleteTenant(ctx context.Context, id string) error {
	if err := s.check("DeleteTenant"); err != nil {
		return err
	}
	return s.Store.DeleteTenant(ctx, id)
}

func (s *faultStore) PutLimits(ctx context.Context, id string, l store.Limits) error {
	if err := s.check("PutLimits"); err != nil {
		return err
	}
	return s.Store.PutLimits(ctx, id, l)
}

func (s *faultStore) GetLimits(ctx context.Context, id string) (store.Limits, error) {
	if err := s.check("GetLimits"); err != nil {
		return store.Limits{}, err
	}
	return s.Store.GetLimits(ctx, id)
}

func (s *faultStore) CreateKey(ctx context.Context, k store.Key) (store.Key, error) {
	if err := s.check("CreateKey"); err != nil {
		return store.Key{}, err
	}
	return s.Store.CreateKey(ctx, k)
}

func (s *faultStore) GetKey(ctx context.Context, tenant, id string) (store.Key, error) {
	if err := s.check("GetKey"); err != nil {
		return store.Key{}, err
	}
	return s.Store.GetKey(ctx, tenant, id)
}

func (s *faultStore) ListKeys(ctx context.Context, tenant string) ([]store.Key, error) {
	if err := s.check("ListKeys"); err != nil {
		return nil, err
	}
	return s.Store.ListKeys(ctx, tenant)
}

func (s *faultStore) RevokeKey(ctx context.Context, tenant, id string) error {
	if err := s.check("RevokeKey"); err != nil {
		return err
	}
	return s.Store.RevokeKey(ctx, tenant, id)
}

func (s *faultStore) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	if err := s.check("AppendAudit"); err != nil {
		return store.AuditEntry{}, err
	}
	return s.Store.AppendAudit(ctx, e)
}

func (s *faultStore) ListAudit(ctx context.Context, tenant string, limit int, before int64) ([]store.AuditEntry, error) {
	if err := s.check("ListAudit"); err != nil {
		return nil, err
	}
	return s.Store.ListAudit(ctx, tenant, limit, before)
}

// fakeHooks records every call as a string; the function fields, when set,
// run inside the calls.
type fakeHooks struct {
	applyLimits   func(tenant string, l store.Limits) error
	tenantDeleted func(tenant string)
	// pools, when set, are the tenants' pools the resource routes reach;
	// quarantine, when set, runs inside Quarantine instead of the pool.
	pools      map[string]*pool.Pool
	quarantine func() error

	mu    sync.Mutex
	calls []string
}

var _ Hooks = (*fakeHooks)(nil)

func (f *fakeHooks) record(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeHooks) ApplyLimits(tenant string, l store.Limits) error {
	f.record("ApplyLimits(%s, %s)", tenant, showLimits(l))
	if f.applyLimits != nil {
		return f.applyLimits(tenant, l)
	}
	return nil
}

func (f *fakeHooks) TenantStatusChanged(tenant string, s store.Status) {
	f.record("TenantStatusChanged(%s, %s)", tenant, s)
}

func (f *fakeHooks) TenantDeleted(tenant string) {
	f.record("TenantDeleted(%s)", tenant)
	if f.tenantDeleted != nil {
		f.tenantDeleted(tenant)
	}
}

func (f *fakeHooks) KeyRevoked(tenant, keyID string) { f.record("KeyRevoked(%s, %s)", tenant, keyID) }

func (f *fakeHooks) Resource(tenant, id string) (pool.ResourceInfo, error) {
	if p := f.pools[tenant]; p != nil {
		return p.Get(id)
	}
	return NopHooks{}.Resource(tenant, id)
}

func (f *fakeHooks) Resources(tenant, after string, limit int) ([]pool.ResourceInfo, bool, error) {
	if p := f.pools[tenant]; p != nil {
		infos, more := p.List(after, limit)
		return infos, more, nil
	}
	return NopHooks{}.Resources(tenant, after, limit)
}

// Quarantine records a call that changed the pool, or that the quarantine
// function failed as a store would (the change made, not durable).
func (f *fakeHooks) Quarantine(ctx context.Context, tenant, id string, impose bool, d time.Duration, why string) (pool.ResourceInfo, error) {
	if f.quarantine != nil {
		f.record("Quarantine(%s, %s, %v, %v, %s)", tenant, id, impose, d, why)
		return pool.ResourceInfo{}, f.quarantine()
	}
	p := f.pools[tenant]
	if p == nil {
		return NopHooks{}.Quarantine(ctx, tenant, id, impose, d, why)
	}
	var (
		info pool.ResourceInfo
		err  error
	)
	if impose {
		if d == 0 {
			d = time.Hour // the default pool's cooldown maximum, as Lifecycle gives it
		}
		info, err = p.Quarantine(id, d, why)
	} else {
		info, err = p.Lift(id, why)
	}
	if err == nil {
		f.record("Quarantine(%s, %s, %v, %v, %s)", tenant, id, impose, d, why)
	}
	return info, err
}

// Calls returns the calls so far and forgets them.
func (f *fakeHooks) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// showLimits prints the limits that are set, the tenant-admin's as
// "tenant_admin.<field>", "{}" for all defaults.
func showLimits(l store.Limits) string {
	m := map[string]any{}
	for lim := range limits.Count {
		if v, ok := l.Values.Get(lim); ok {
			m[lim.String()] = v
		}
		if v, ok := l.Admin.Get(lim); ok {
			m["tenant_admin."+lim.String()] = v
		}
	}
	for _, f := range policyFields {
		if v, ok := f.ptr(&l.Policy).get(); ok {
			m["policy."+f.name] = v
		}
	}
	if l.Policy.Objective != nil {
		m["policy.objective"] = *l.Policy.Objective
	}
	b, _ := json.Marshal(m) // map keys are sorted
	return string(b)
}

func ptr[T any](v T) *T { return &v }

// encoded is v as writeJSON answers it.
func encoded(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err.Error()
	}
	return b.String()
}

// testRules are the harness's server limits: a global budget of 1,000
// resources and 6,000 cells, and a default share of a quarter of it
// (testDefaults).
var testRules = LimitRules{
	Defaults: store.Limits{
		Values: testDefaults(),
		Policy: store.Policy{
			HalfLifeSeconds: ptr(int64(3600)), QuarantineAfter: ptr(int64(5)), QuarantineWholeAfter: ptr(int64(20)),
			QuarantineBelow: ptr(0.1), QuarantineMinEvidence: ptr(10.0), CooldownBaseSeconds: ptr(int64(30)), CooldownMaxSeconds: ptr(int64(3600)),
			Objective: ptr("success"),
			MaxUses:   ptr(int64(0)), MaxAgeSeconds: ptr(int64(0)), MaxQuarantinedShare: ptr(0.5),
		},
	},
	GlobalResources: 1000, GlobalCells: 6000,
}

// testDefaults are the server defaults of testRules, as the server gives
// them (server.Config.LimitRules): each limit's built-in default, no
// reservation, and a quarter of the global budgets (1,000 resources, 6,000
// cells) for their ceilings.
func testDefaults() limits.Values {
	var v limits.Values
	for l := range limits.Count {
		switch s := l.Spec(); {
		case s.Share && s.Budget == limits.ResourceBudget:
			v.Set(l, 250)
		case s.Share && s.Budget == limits.CellBudget:
			v.Set(l, 1500)
		default:
			v.Set(l, s.Default)
		}
	}
	return v
}

// harness is an API on a real store behind a faultStore, with fake hooks,
// a fake clock and captured logs.
type harness struct {
	t      testing.TB
	real   store.Store
	st     *faultStore
	clk    *clock.Fake
	signer *token.Signer
	hooks  *fakeHooks
	logs   *testenv.Output
	api    *API
}

func newHarness(t *testing.T, open openFunc) *harness {
	t.Helper()
	clk := newClock()
	real := open(t, clk)
	signer, err := token.NewSigner(signingKey, clk)
	if err != nil {
		t.Fatalf("token.NewSigner() = got error %v, want nil", err)
	}
	h := &harness{t: t, real: real, st: &faultStore{Store: real}, clk: clk, signer: signer, hooks: &fakeHooks{}, logs: &testenv.Output{}}
	h.api, err = New(Config{
		Store: h.st, Limits: testRules, Signer: signer, Hooks: h.hooks, Clock: clk,
		Log: slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatalf("New() = got error %v, want nil", err)
	}
	return h
}

// token mints a control token for role and tenant, valid for an hour.
func (h *harness) token(role, tenant string) string {
	h.t.Helper()
	tok, _, err := MintToken(h.signer, role, tenant, time.Hour)
	if err != nil {
		h.t.Fatalf("MintToken(%s, %q) = got error %v, want nil", role, tenant, err)
	}
	return tok
}

// sign signs arbitrary claims with the API's key.
func (h *harness) sign(c token.Claims) string {
	h.t.Helper()
	tok, err := h.signer.Sign(c)
	if err != nil {
		h.t.Fatalf("Sign(%+v) = got error %v, want nil", c, err)
	}
	return tok
}

// response is an answer of the API.
type response struct {
	status int
	header http.Header
	body   string
}

// errorCode returns the code of an error body ("" if there is none).
func (r response) errorCode() string { return r.errorJSON().Code }

// errorMessage returns the message of an error body ("" if there is none).
func (r response) errorMessage() string { return r.errorJSON().Message }

func (r response) errorJSON() errorJSON {
	var b errorBody
	json.Unmarshal([]byte(r.body), &b)
	return b.Error
}

// do sends a request with Authorization: Bearer tok (no header when tok is
// empty) and returns the answer.
func (h *harness) do(method, path, tok, body string) response {
	h.t.Helper()
	return h.doAuth(method, path, bearer(tok), body)
}

func bearer(tok string) string {
	if tok == "" {
		return ""
	}
	return "Bearer " + tok
}

// doAuth sends a request with the raw Authorization header authz.
func (h *harness) doAuth(method, path, authz, body string) response {
	h.t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	var req *http.Request
	if rd != nil {
		req = httptest.NewRequest(method, path, rd)
		req.Header.Set("Content-Type", "application/json")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	rec := httptest.NewRecorder()
	h.api.Handler().ServeHTTP(rec, req)
	return response{rec.Code, rec.Result().Header, rec.Body.String()}
}

// mustDo is do that fails the test unless the status is want, and decodes
// a JSON answer into out (when out is not nil).
func (h *harness) mustDo(method, path, tok, body string, want int, out any) response {
	h.t.Helper()
	r := h.do(method, path, tok, body)
	if r.status != want {
		h.t.Fatalf("%s %s = got %d %s, want %d", method, path, r.status, r.body, want)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(r.body), out); err != nil {
			h.t.Fatalf("%s %s: decoding %s = got error %v, want nil", method, path, r.body, err)
		}
	}
	return r
}

// createTenant creates tenant id through the real store.
func (h *harness) createTenant(id string) {
	h.t.Helper()
	if _, err := h.real.CreateTenant(context.Background(), store.Tenant{ID: id, Name: "tenant " + id}); err != nil {
		h.t.Fatalf("CreateTenant(%q) = got error %v, want nil", id, err)
	}
}

// createKey issues a key of tenant through the real store and returns its
// id.
func (h *harness) createKey(tenant string) string {
	h.t.Helper()
	k, _, err := issueKey(context.Background(), h.real, tenant, "fixture")
	if err != nil {
		h.t.Fatalf("issueKey(%q) = got error %v, want nil", tenant, err)
	}
	return k.ID
}

// snapshot is everything the control plane can change, read from the real
// store.
type snapshot struct {
	Tenants []store.Tenant
	Limits  map[string]store.Limits
	Keys    map[string][]store.Key
	Audit   map[string][]store.AuditEntry
}

func (h *harness) snapshot() snapshot {
	h.t.Helper()
	ctx := context.Background()
	ts, err := h.real.ListTenants(ctx, store.TenantFilter{IncludeDeleted: true})
	if err != nil {
		h.t.Fatalf("ListTenants() = got error %v, want nil", err)
	}
	s := snapshot{Tenants: ts, Limits: map[string]store.Limits{}, Keys: map[string][]store.Key{}, Audit: map[string][]store.AuditEntry{}}
	for _, t := range ts {
		if t.Status == store.StatusDeleted {
			continue
		}
		if s.Limits[t.ID], err = h.real.GetLimits(ctx, t.ID); err != nil {
			h.t.Fatalf("GetLimits(%q) = got error %v, want nil", t.ID, err)
		}
		if s.Keys[t.ID], err = h.real.ListKeys(ctx, t.ID); err != nil {
			h.t.Fatalf("ListKeys(%q) = got error %v, want nil", t.ID, err)
		}
		if s.Audit[t.ID], err = h.real.ListAudit(ctx, t.ID, store.MaxAuditLimit, 0); err != nil {
			h.t.Fatalf("ListAudit(%q) = got error %v, want nil", t.ID, err)
		}
	}
	return s
}

// unchanged fails the test if the store differs from before.
func (h *harness) unchanged(call string, before snapshot) {
	h.t.Helper()
	if after := h.snapshot(); !reflect.DeepEqual(after, before) {
		h.t.Errorf("%s changed the store:\nbefore %+v\nafter  %+v", call, before, after)
	}
}

// auditOf returns the tenant's trail from the store, newest first.
func (h *harness) auditOf(tenant string) []store.AuditEntry {
	h.t.Helper()
	es, err := h.real.ListAudit(context.Background(), tenant, store.MaxAuditLimit, 0)
	if err != nil {
		h.t.Fatalf("ListAudit(%q) = got error %v, want nil", tenant, err)
	}
	return es
}
