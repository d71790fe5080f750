// Package storetest is the contract suite every store.Store implementation
// runs against a real database: tenants and their lifecycle, limits, API key
// digests, audit, server secrets, epochs and checkpoints, including the
// cross-tenant isolation rules. It also holds data generators for
// checkpoint benchmarks.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/store"
)

// Raw gives the suite access below the Store interface. An
// implementation's test wraps its store in a type that also implements Raw
// using its own database handle; the subtests that need it fail if the
// store returned by open does not implement it.
type Raw interface {
	// RowCounts returns, for every table holding tenant-scoped rows (named
	// by table), how many rows belong to tenantID.
	RowCounts(ctx context.Context, tenantID string) (map[string]int, error)
	// Dump returns every row of every table as text, binary values as
	// lowercase hex.
	Dump(ctx context.Context) (string, error)
	// Corrupt writes, with raw SQL, a row for tenantID that LoadCheckpoint
	// must reject, as kind describes.
	Corrupt(ctx context.Context, tenantID string, kind Corruption) error
	// ColumnTypes returns the columns of table in the migrated schema,
	// each with its declared type as the database names it (SQLite's
	// "INTEGER", PostgreSQL's "bigint").
	ColumnTypes(ctx context.Context, table string) (map[string]string, error)
}

// Corruption names a kind of bad checkpoint row for Raw.Corrupt.
type Corruption string

// The corruptions Raw.Corrupt must be able to write. Resource rows use id
// CorruptID unless stated otherwise.
const (
	// CorruptCapacity is a resource with capacity 0.
	CorruptCapacity Corruption = "capacity"
	// CorruptAlpha is a resource whose alpha is not finite (NaN, or +Inf
	// where the backend cannot store NaN).
	CorruptAlpha Corruption = "alpha"
	// CorruptBeta is a cell of an existing resource of the tenant with
	// context CorruptID and beta -1.
	CorruptBeta Corruption = "beta"
	// CorruptOrphan is a cell of resource CorruptID (which does not exist)
	// with context "ctx".
	CorruptOrphan Corruption = "orphan"
	// CorruptLabels is a resource whose labels are the text "{not json".
	CorruptLabels Corruption = "labels"
	// CorruptEmptyID is a resource with an empty id.
	CorruptEmptyID Corruption = "empty-id"
	// CorruptLongID is a resource whose id is LongID().
	CorruptLongID Corruption = "long-id"
)

// CorruptID is the id Raw.Corrupt uses for bad rows.
const CorruptID = "corrupt-row"

// LongID returns an id one byte longer than store.MaxRowIDLen.
func LongID() string { return strings.Repeat("x", store.MaxRowIDLen+1) }

// start is the fake clock's start; its nanoseconds check that stores
// truncate to microseconds.
func start() time.Time { return time.Date(2031, 3, 4, 5, 6, 7, 123456789, time.UTC) }

// Run runs the contract suite. open must return a new, empty store that
// uses opts, and close it in t.Cleanup; it is called once per subtest, from
// parallel subtests.
func Run(t *testing.T, open func(t *testing.T, opts store.Options) store.Store) {
	tests := []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{"CreateTenant", testCreateTenant},
		{"CreateTenantInvalid", testCreateTenantInvalid},
		{"GetTenantNotFound", testGetTenantNotFound},
		{"ListTenants", testListTenants},
		{"SetTenantStatus", testSetTenantStatus},
		{"DeleteTenant", testDeleteTenant},
		{"DeleteTenantIsolation", testDeleteTenantIsolation},
		{"Limits", testLimits},
		{"EveryLimit", testEveryLimit},
		{"Keys", testKeys},
		{"KeyErrors", testKeyErrors},
		{"KeyDigestOnly", testKeyDigestOnly},
		{"Audit", testAudit},
		{"SigningKey", testSigningKey},
		{"BumpEpoch", testBumpEpoch},
		{"ProbeWrite", testProbeWrite},
		{"CheckpointRoundTrip", testCheckpointRoundTrip},
		{"CheckpointTenantIsolation", testCheckpointTenantIsolation},
		{"CheckpointIncremental", testCheckpointIncremental},
		{"CheckpointInvalid", testCheckpointInvalid},
		{"CheckpointCorrupt", testCheckpointCorrupt},
		{"CheckpointDeletedTenant", testCheckpointDeletedTenant},
		{"CheckpointConcurrent", testCheckpointConcurrent},
		{"CheckpointBindings", testCheckpointBindings},
		{"LeaseJournal", testLeaseJournal},
		{"AuditRetention", testAuditRetention},
		{"RevokedKeyRetention", testRevokedKeyRetention},
		{"Usage", testUsage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(start())
			s := open(t, store.Options{Clock: clk})
			tc.run(t, &harness{s: s, clk: clk})
		})
	}
}

type harness struct {
	s   store.Store
	clk *clock.Fake
}

func (h *harness) raw(t *testing.T) Raw {
	t.Helper()
	r, ok := h.s.(Raw)
	if !ok {
		t.Fatalf("store %T does not implement storetest.Raw", h.s)
	}
	return r
}

func (h *harness) tenant(t *testing.T, id string) store.Tenant {
	t.Helper()
	tn, err := h.s.CreateTenant(t.Context(), store.Tenant{ID: id, Name: "Tenant " + id})
	if err != nil {
		t.Fatalf("CreateTenant(ctx, %q) = got error %v, want nil", id, err)
	}
	return tn
}

func (h *harness) key(t *testing.T, tenantID, keyID string) (store.Key, string) {
	t.Helper()
	plain := newPlainKey(t)
	d := sha256.Sum256([]byte(plain))
	k, err := h.s.CreateKey(t.Context(), store.Key{ID: keyID, TenantID: tenantID, Name: "key " + keyID, Prefix: plain[:8], Digest: d[:]})
	if err != nil {
		t.Fatalf("CreateKey(ctx, %q/%q) = got error %v, want nil", tenantID, keyID, err)
	}
	return k, plain
}

func (h *harness) save(t *testing.T, tenantID string, cp store.Checkpoint) {
	t.Helper()
	if err := h.s.SaveCheckpoint(t.Context(), tenantID, cp); err != nil {
		t.Fatalf("SaveCheckpoint(ctx, %q, full=%v) = got error %v, want nil", tenantID, cp.Full, err)
	}
}

func (h *harness) load(t *testing.T, tenantID string) store.PoolState {
	t.Helper()
	st, err := h.s.LoadCheckpoint(t.Context(), tenantID)
	if err != nil {
		t.Fatalf("LoadCheckpoint(ctx, %q) = got error %v, want nil", tenantID, err)
	}
	return st
}

func (h *harness) counts(t *testing.T, tenantID string) map[string]int {
	t.Helper()
	c, err := h.raw(t).RowCounts(t.Context(), tenantID)
	if err != nil {
		t.Fatalf("RowCounts(ctx, %q) = got error %v, want nil", tenantID, err)
	}
	return c
}

// newPlainKey returns a random plain API key in the format the control
// plane shows users.
func newPlainKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("rand.Read = got error %v, want nil", err)
	}
	return "rpk_" + base64.RawURLEncoding.EncodeToString(b)
}

func wantErr(t *testing.T, call string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = got error %v, want %v", call, err, want)
	}
	if want != store.ErrUnavailable && errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%s = got error %v, which also matches ErrUnavailable", call, err)
	}
}

func wantState(t *testing.T, call string, got, want store.PoolState) {
	t.Helper()
	if got.HasCheckpoint != want.HasCheckpoint || got.FencingHWM != want.FencingHWM {
		t.Fatalf("%s = got HasCheckpoint %v, FencingHWM %d, want %v, %d", call, got.HasCheckpoint, got.FencingHWM, want.HasCheckpoint, want.FencingHWM)
	}
	if len(got.Resources) != len(want.Resources) || len(got.Cells) != len(want.Cells) {
		t.Fatalf("%s = got %d resources, %d cells, want %d, %d", call, len(got.Resources), len(got.Cells), len(want.Resources), len(want.Cells))
	}
	for i := range want.Resources {
		if !reflect.DeepEqual(got.Resources[i], want.Resources[i]) {
			t.Fatalf("%s = got resource[%d] %+v, want %+v", call, i, got.Resources[i], want.Resources[i])
		}
	}
	for i := range want.Cells {
		if got.Cells[i] != want.Cells[i] {
			t.Fatalf("%s = got cell[%d] %+v, want %+v", call, i, got.Cells[i], want.Cells[i])
		}
	}
}

func sortState(st *store.PoolState) {
	slices.SortFunc(st.Resources, func(a, b store.ResourceRow) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(st.Cells, func(a, b store.CellRow) int {
		if c := strings.Compare(a.ResourceID, b.ResourceID); c != 0 {
			return c
		}
		return strings.Compare(a.Context, b.Context)
	})
}

func testCreateTenant(t *testing.T, h *harness) {
	ctx := t.Context()
	got, err := h.s.CreateTenant(ctx, store.Tenant{ID: "acme", Name: "Acme Inc.", Status: store.StatusDeleted})
	if err != nil {
		t.Fatalf("CreateTenant(ctx, acme) = got error %v, want nil", err)
	}
	want := store.Tenant{ID: "acme", Name: "Acme Inc.", Status: store.StatusActive, CreatedAt: store.Timestamp(start()), Group: store.DefaultGroup}
	if got != want {
		t.Fatalf("CreateTenant(ctx, acme) = got %+v, want %+v", got, want)
	}
	if got.CreatedAt.Nanosecond()%1000 != 0 {
		t.Fatalf("CreateTenant(ctx, acme).CreatedAt = got %v, want microsecond precision", got.CreatedAt)
	}
	read, err := h.s.GetTenant(ctx, "acme")
	if err != nil || read != want {
		t.Fatalf("GetTenant(ctx, acme) = got %+v, %v, want %+v, nil", read, err, want)
	}
	_, err = h.s.CreateTenant(ctx, store.Tenant{ID: "acme", Name: "again"})
	wantErr(t, "CreateTenant(ctx, acme) twice", err, store.ErrExists)
}

func testCreateTenantInvalid(t *testing.T, h *harness) {
	tests := []struct {
		name    string
		tenant  store.Tenant
		wantErr error
	}{
		{name: "one char", tenant: store.Tenant{ID: "a"}},
		{name: "max length", tenant: store.Tenant{ID: strings.Repeat("a", 64)}},
		{name: "dash and underscore", tenant: store.Tenant{ID: "a-b_c9"}},
		{name: "digit first", tenant: store.Tenant{ID: "9lives"}},
		{name: "empty", tenant: store.Tenant{ID: ""}, wantErr: store.ErrInvalid},
		{name: "too long", tenant: store.Tenant{ID: strings.Repeat("a", 65)}, wantErr: store.ErrInvalid},
		{name: "upper case", tenant: store.Tenant{ID: "Acme"}, wantErr: store.ErrInvalid},
		{name: "dash first", tenant: store.Tenant{ID: "-acme"}, wantErr: store.ErrInvalid},
		{name: "underscore first", tenant: store.Tenant{ID: "_acme"}, wantErr: store.ErrInvalid},
		{name: "space", tenant: store.Tenant{ID: "ac me"}, wantErr: store.ErrInvalid},
		{name: "dot", tenant: store.Tenant{ID: "ac.me"}, wantErr: store.ErrInvalid},
		{name: "non-ASCII", tenant: store.Tenant{ID: "acmé"}, wantErr: store.ErrInvalid},
		{name: "name too long", tenant: store.Tenant{ID: "long-name", Name: strings.Repeat("n", store.MaxNameLen+1)}, wantErr: store.ErrInvalid},
		{name: "name with NUL", tenant: store.Tenant{ID: "nul-name", Name: "a\x00b"}, wantErr: store.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.s.CreateTenant(t.Context(), tc.tenant)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("CreateTenant(ctx, %q) = got error %v, want nil", tc.tenant.ID, err)
				}
				return
			}
			wantErr(t, fmt.Sprintf("CreateTenant(ctx, %q)", tc.tenant.ID), err, tc.wantErr)
			if _, err := h.s.GetTenant(t.Context(), tc.tenant.ID); err == nil {
				t.Fatalf("GetTenant(ctx, %q) after failed create = got nil error, want an error", tc.tenant.ID)
			}
		})
	}
}

func testGetTenantNotFound(t *testing.T, h *harness) {
	_, err := h.s.GetTenant(t.Context(), "nobody")
	wantErr(t, "GetTenant(ctx, nobody)", err, store.ErrNotFound)
	_, err = h.s.GetTenant(t.Context(), "Not Valid")
	wantErr(t, "GetTenant(ctx, \"Not Valid\")", err, store.ErrInvalid)
}

func testListTenants(t *testing.T, h *harness) {
	ctx := t.Context()
	got, err := h.s.ListTenants(ctx, store.TenantFilter{})
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("ListTenants(ctx) on an empty store = got %#v, %v, want an empty non-nil slice, nil", got, err)
	}
	for _, id := range []string{"c", "a", "b", "d"} {
		h.tenant(t, id)
	}
	if _, err := h.s.SetTenantStatus(ctx, "c", store.StatusActive, store.StatusSuspended); err != nil {
		t.Fatalf("SetTenantStatus(ctx, c, active, suspended) = got error %v, want nil", err)
	}
	if err := h.s.DeleteTenant(ctx, "b"); err != nil {
		t.Fatalf("DeleteTenant(ctx, b) = got error %v, want nil", err)
	}
	tests := []struct {
		name   string
		filter store.TenantFilter
		want   []string
	}{
		{name: "live only", filter: store.TenantFilter{}, want: []string{"a:active", "c:suspended", "d:active"}},
		{name: "with deleted", filter: store.TenantFilter{IncludeDeleted: true}, want: []string{"a:active", "b:deleted", "c:suspended", "d:active"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := h.s.ListTenants(ctx, tc.filter)
			if err != nil {
				t.Fatalf("ListTenants(ctx, %+v) = got error %v, want nil", tc.filter, err)
			}
			var got []string
			for _, tn := range ts {
				got = append(got, fmt.Sprintf("%s:%s", tn.ID, tn.Status))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ListTenants(ctx, %+v) = got %v, want %v", tc.filter, got, tc.want)
			}
		})
	}
}

func testSetTenantStatus(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "t1")
	h.tenant(t, "gone")
	if err := h.s.DeleteTenant(ctx, "gone"); err != nil {
		t.Fatalf("DeleteTenant(ctx, gone) = got error %v, want nil", err)
	}
	// Steps run in order: each depends on the state the previous one left.
	steps := []struct {
		name     string
		id       string
		from, to store.Status
		wantErr  error
	}{
		{name: "suspend active", id: "t1", from: store.StatusActive, to: store.StatusSuspended},
		{name: "suspend twice", id: "t1", from: store.StatusActive, to: store.StatusSuspended, wantErr: store.ErrConflict},
		{name: "reactivate", id: "t1", from: store.StatusSuspended, to: store.StatusActive},
		{name: "reactivate active", id: "t1", from: store.StatusSuspended, to: store.StatusActive, wantErr: store.ErrConflict},
		{name: "active to active", id: "t1", from: store.StatusActive, to: store.StatusActive, wantErr: store.ErrInvalid},
		{name: "delete through status", id: "t1", from: store.StatusActive, to: store.StatusDeleted, wantErr: store.ErrInvalid},
		{name: "undelete", id: "gone", from: store.StatusDeleted, to: store.StatusActive, wantErr: store.ErrInvalid},
		{name: "reactivate deleted", id: "gone", from: store.StatusSuspended, to: store.StatusActive, wantErr: store.ErrNotFound},
		{name: "suspend deleted", id: "gone", from: store.StatusActive, to: store.StatusSuspended, wantErr: store.ErrNotFound},
		{name: "unknown tenant", id: "nobody", from: store.StatusActive, to: store.StatusSuspended, wantErr: store.ErrNotFound},
		{name: "bogus status", id: "t1", from: store.StatusActive, to: "frozen", wantErr: store.ErrInvalid},
	}
	for _, st := range steps {
		got, err := h.s.SetTenantStatus(ctx, st.id, st.from, st.to)
		call := fmt.Sprintf("%s: SetTenantStatus(ctx, %s, %s, %s)", st.name, st.id, st.from, st.to)
		if st.wantErr != nil {
			wantErr(t, call, err, st.wantErr)
			continue
		}
		if err != nil || got.Status != st.to || got.ID != st.id {
			t.Fatalf("%s = got %+v, %v, want status %s, nil", call, got, err, st.to)
		}
		read, err := h.s.GetTenant(ctx, st.id)
		if err != nil || read.Status != st.to {
			t.Fatalf("%s: GetTenant(ctx, %s) = got %+v, %v, want status %s", st.name, st.id, read, err, st.to)
		}
	}
	read, err := h.s.GetTenant(ctx, "gone")
	if err != nil || read.Status != store.StatusDeleted {
		t.Fatalf("GetTenant(ctx, gone) = got %+v, %v, want status deleted", read, err)
	}
}

func testDeleteTenant(t *testing.T, h *harness) {
	ctx := t.Context()
	tests := []struct {
		name    string
		suspend bool
	}{
		{name: "from active"},
		{name: "from suspended", suspend: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("del-%d", i)
			created := h.tenant(t, id)
			if tc.suspend {
				if _, err := h.s.SetTenantStatus(ctx, id, store.StatusActive, store.StatusSuspended); err != nil {
					t.Fatalf("SetTenantStatus(ctx, %s, active, suspended) = got error %v, want nil", id, err)
				}
			}
			h.clk.Advance(time.Hour)
			if err := h.s.DeleteTenant(ctx, id); err != nil {
				t.Fatalf("DeleteTenant(ctx, %s) = got error %v, want nil", id, err)
			}
			got, err := h.s.GetTenant(ctx, id)
			want := store.Tenant{ID: id, Name: created.Name, Status: store.StatusDeleted, CreatedAt: created.CreatedAt, DeletedAt: store.Timestamp(h.clk.Now()), Group: store.DefaultGroup}
			if err != nil || got != want {
				t.Fatalf("GetTenant(ctx, %s) after delete = got %+v, %v, want %+v, nil", id, got, err, want)
			}
			wantErr(t, "DeleteTenant twice", h.s.DeleteTenant(ctx, id), store.ErrNotFound)
			_, err = h.s.CreateTenant(ctx, store.Tenant{ID: id, Name: "reborn"})
			wantErr(t, "CreateTenant(ctx) of a deleted id", err, store.ErrExists)

			// Everything tenant-scoped treats the tombstone as gone.
			_, err = h.s.GetLimits(ctx, id)
			wantErr(t, "GetLimits(ctx) of a deleted tenant", err, store.ErrNotFound)
			wantErr(t, "PutLimits(ctx) of a deleted tenant", h.s.PutLimits(ctx, id, store.Limits{}), store.ErrNotFound)
			_, err = h.s.ListKeys(ctx, id)
			wantErr(t, "ListKeys(ctx) of a deleted tenant", err, store.ErrNotFound)
			d := sha256.Sum256([]byte(id))
			_, err = h.s.CreateKey(ctx, store.Key{ID: "k-" + id, TenantID: id, Digest: d[:]})
			wantErr(t, "CreateKey(ctx) of a deleted tenant", err, store.ErrNotFound)
			_, err = h.s.AppendAudit(ctx, store.AuditEntry{TenantID: id, Action: "x"})
			wantErr(t, "AppendAudit(ctx) of a deleted tenant", err, store.ErrNotFound)
			_, err = h.s.ListAudit(ctx, id, 0, 0)
			wantErr(t, "ListAudit(ctx) of a deleted tenant", err, store.ErrNotFound)
			_, err = h.s.SetTenantStatus(ctx, id, store.StatusActive, store.StatusSuspended)
			wantErr(t, "SetTenantStatus(ctx) of a deleted tenant", err, store.ErrNotFound)
		})
	}
	wantErr(t, "DeleteTenant(ctx, nobody)", h.s.DeleteTenant(ctx, "nobody"), store.ErrNotFound)
}

// fillTenant gives tenant id rows in every tenant-scoped table.
func fillTenant(t *testing.T, h *harness, id string, seed int64) store.Checkpoint {
	t.Helper()
	ctx := t.Context()
	h.tenant(t, id)
	var lim store.Limits
	lim.Values.Set(limits.Burst, float64(seed))
	if err := h.s.PutLimits(ctx, id, lim); err != nil {
		t.Fatalf("PutLimits(ctx, %s) = got error %v, want nil", id, err)
	}
	h.key(t, id, id+"-k1")
	h.key(t, id, id+"-k2")
	for i := range 3 {
		if _, err := h.s.AppendAudit(ctx, store.AuditEntry{TenantID: id, Actor: "operator", Action: "test", Target: fmt.Sprint(i)}); err != nil {
			t.Fatalf("AppendAudit(ctx, %s) = got error %v, want nil", id, err)
		}
	}
	cp := Synthetic(20, 3, seed)
	cp.Bindings = []store.BindingRow{{Context: "login", Key: id + "-session", ResourceID: cp.Resources[0].ID, ExpiresAt: 1}}
	h.save(t, id, cp)
	return cp
}

func testDeleteTenantIsolation(t *testing.T, h *harness) {
	ctx := t.Context()
	fillTenant(t, h, "a", 1)
	cpB := fillTenant(t, h, "b", 2)
	beforeA, beforeB := h.counts(t, "a"), h.counts(t, "b")
	for table, n := range beforeA {
		if n == 0 {
			t.Fatalf("RowCounts(ctx, a)[%s] before delete = got 0, want > 0 (fillTenant must fill every table)", table)
		}
	}
	if err := h.s.DeleteTenant(ctx, "a"); err != nil {
		t.Fatalf("DeleteTenant(ctx, a) = got error %v, want nil", err)
	}
	for table, n := range h.counts(t, "a") {
		if n != 0 {
			t.Errorf("RowCounts(ctx, a)[%s] after delete = got %d, want 0", table, n)
		}
	}
	if got := h.counts(t, "b"); !reflect.DeepEqual(got, beforeB) {
		t.Errorf("RowCounts(ctx, b) after deleting a = got %v, want %v", got, beforeB)
	}
	wantState(t, "LoadCheckpoint(ctx, b)", h.load(t, "b"), Apply(store.PoolState{}, cpB))
	keys, err := h.s.ListKeys(ctx, "b")
	if err != nil || len(keys) != 2 {
		t.Fatalf("ListKeys(ctx, b) = got %d keys, %v, want 2, nil", len(keys), err)
	}
	audit, err := h.s.ListAudit(ctx, "b", 0, 0)
	if err != nil || len(audit) != 3 {
		t.Fatalf("ListAudit(ctx, b) = got %d entries, %v, want 3, nil", len(audit), err)
	}
	_, err = h.s.LoadCheckpoint(ctx, "a")
	wantErr(t, "LoadCheckpoint(ctx, a) after delete", err, store.ErrNotFound)
}

func ptr[T any](v T) *T { return &v }

func testLimits(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "lim")
	got, err := h.s.GetLimits(ctx, "lim")
	if err != nil || !reflect.DeepEqual(got, store.Limits{}) {
		t.Fatalf("GetLimits(ctx, lim) before any put = got %+v, %v, want zero Limits, nil", got, err)
	}
	set := func(pairs ...any) limits.Values {
		var v limits.Values
		for i := 0; i < len(pairs); i += 2 {
			v.Set(pairs[i].(limits.Limit), pairs[i+1].(float64))
		}
		return v
	}
	tests := []struct {
		name    string
		limits  store.Limits
		wantErr error
	}{
		{name: "all set", limits: store.Limits{
			Values: everyLimit(100, false), Admin: everyLimit(10, true),
			Policy: store.Policy{
				HalfLifeSeconds: ptr(int64(600)), QuarantineAfter: ptr(int64(3)), QuarantineWholeAfter: ptr(int64(9)),
				QuarantineBelow: ptr(-1.0), QuarantineMinEvidence: ptr(12.5),
				CooldownBaseSeconds: ptr(int64(10)), CooldownMaxSeconds: ptr(int64(3600)), Objective: ptr("success_per_time"),
				MaxUses: ptr(int64(100)), MaxAgeSeconds: ptr(int64(0)), MaxQuarantinedShare: ptr(0.25),
			},
		}},
		{name: "only a policy", limits: store.Limits{Policy: store.Policy{QuarantineAfter: ptr(int64(2)), QuarantineBelow: ptr(0.25)}}},
		{name: "policy back to default, limits kept", limits: store.Limits{Values: set(limits.Burst, 5.0)}},
		{name: "only a tenant-admin's values", limits: store.Limits{Admin: set(limits.MaxStreams, 0.0, limits.RatePerSecond, 1.0)}},
		{name: "some set, others back to default", limits: store.Limits{Values: set(limits.RatePerSecond, 0.5, limits.MaxStreams, 0.0)}},
		{name: "all defaults", limits: store.Limits{}},
		{name: "negative burst", limits: store.Limits{Values: set(limits.Burst, -1.0)}, wantErr: store.ErrInvalid},
		{name: "fractional burst", limits: store.Limits{Values: set(limits.Burst, 1.5)}, wantErr: store.ErrInvalid},
		{name: "NaN rate", limits: store.Limits{Values: set(limits.RatePerSecond, math.NaN())}, wantErr: store.ErrInvalid},
		{name: "infinite rate", limits: store.Limits{Values: set(limits.RatePerSecond, math.Inf(1))}, wantErr: store.ErrInvalid},
		{name: "negative max cells", limits: store.Limits{Values: set(limits.MaxCells, -5.0)}, wantErr: store.ErrInvalid},
		{name: "negative tenant-admin max leases", limits: store.Limits{Admin: set(limits.MaxLeases, -1.0)}, wantErr: store.ErrInvalid},
		{name: "NaN tenant-admin rate", limits: store.Limits{Admin: set(limits.RatePerSecond, math.NaN())}, wantErr: store.ErrInvalid},
		{name: "a tenant-admin's reservation", limits: store.Limits{Admin: set(limits.ReservedCells, 1.0)}, wantErr: store.ErrInvalid},
		{name: "zero policy half-life", limits: store.Limits{Policy: store.Policy{HalfLifeSeconds: ptr(int64(0))}}, wantErr: store.ErrInvalid},
		{name: "negative policy cooldown", limits: store.Limits{Policy: store.Policy{CooldownMaxSeconds: ptr(int64(-3))}}, wantErr: store.ErrInvalid},
		{name: "NaN policy threshold", limits: store.Limits{Policy: store.Policy{QuarantineBelow: ptr(math.NaN())}}, wantErr: store.ErrInvalid},
		{name: "infinite policy evidence", limits: store.Limits{Policy: store.Policy{QuarantineMinEvidence: ptr(math.Inf(1))}}, wantErr: store.ErrInvalid},
		{name: "only an objective", limits: store.Limits{Policy: store.Policy{Objective: ptr("success")}}},
		{name: "unknown objective", limits: store.Limits{Policy: store.Policy{Objective: ptr("fastest")}}, wantErr: store.ErrInvalid},
	}
	want := store.Limits{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := h.s.PutLimits(ctx, "lim", tc.limits)
			if tc.wantErr != nil {
				wantErr(t, "PutLimits(ctx, lim)", err, tc.wantErr)
			} else if err != nil {
				t.Fatalf("PutLimits(ctx, lim, %s) = got error %v, want nil", fmtLimits(tc.limits), err)
			} else {
				want = tc.limits
			}
			got, err := h.s.GetLimits(ctx, "lim")
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("GetLimits(ctx, lim) = got %s, %v, want %s, nil", fmtLimits(got), err, fmtLimits(want))
			}
		})
	}
	wantErr(t, "PutLimits(ctx, nobody)", h.s.PutLimits(ctx, "nobody", store.Limits{}), store.ErrNotFound)
	_, err = h.s.GetLimits(ctx, "nobody")
	wantErr(t, "GetLimits(ctx, nobody)", err, store.ErrNotFound)
}

// everyLimit sets every limit of the table (with admin, every one a
// tenant-admin has) to a value of its own from base up: whole numbers, and
// a fraction for a rate.
func everyLimit(base float64, admin bool) limits.Values {
	var v limits.Values
	for lim := range limits.Count {
		if admin && lim.Spec().Reservation {
			continue
		}
		x := base + float64(lim)
		if !lim.Spec().Integer {
			x += 0.5
		}
		v.Set(lim, x)
	}
	return v
}

// testEveryLimit is what catches a limit of the table (internal/limits)
// that the store does not hold: each limit, and each tenant-admin's value,
// has its column in the migrated tenant_limits, of the limit's type, and
// round-trips alone through PutLimits and GetLimits (a missing or
// misnamed column fails the statements). A new limit needs a migration in
// each store's migrations directory.
func testEveryLimit(t *testing.T, h *harness) {
	ctx := t.Context()
	cols, err := h.raw(t).ColumnTypes(ctx, "tenant_limits")
	if err != nil {
		t.Fatalf("ColumnTypes(ctx, tenant_limits) = got error %v, want nil", err)
	}
	h.tenant(t, "every")
	for lim := range limits.Count {
		t.Run(lim.String(), func(t *testing.T) {
			for _, side := range []struct {
				column string
				admin  bool
			}{{lim.Column(), false}, {lim.AdminColumn(), true}} {
				if side.column == "" {
					continue // a reservation has no tenant-admin value
				}
				typ, ok := cols[side.column]
				if !ok {
					t.Fatalf("limit %s: tenant_limits has no column %s: add it in a migration of this store", lim, side.column)
				}
				if integer := isIntegerColumn(typ); integer != lim.Spec().Integer {
					t.Errorf("limit %s: column %s is %s, want an integer column (INTEGER, bigint) for a whole-number limit and a float one (REAL, double precision) for a rate",
						lim, side.column, typ)
				}
				var l store.Limits
				v := 7.0
				if !lim.Spec().Integer {
					v = 7.25
				}
				if side.admin {
					l.Admin.Set(lim, v)
				} else {
					l.Values.Set(lim, v)
				}
				if err := h.s.PutLimits(ctx, "every", l); err != nil {
					t.Fatalf("PutLimits(ctx, every, %s) = got error %v, want nil", fmtLimits(l), err)
				}
				got, err := h.s.GetLimits(ctx, "every")
				if err != nil || !reflect.DeepEqual(got, l) {
					t.Fatalf("GetLimits(ctx, every) = got %s, %v, want %s, nil", fmtLimits(got), err, fmtLimits(l))
				}
			}
		})
	}
}

// isIntegerColumn reports whether a column's declared type holds whole
// numbers: SQLite's INTEGER, PostgreSQL's bigint or integer.
func isIntegerColumn(typ string) bool {
	return strings.Contains(strings.ToLower(typ), "int")
}

func fmtLimits(l store.Limits) string {
	var b strings.Builder
	for lim := range limits.Count {
		for _, side := range []struct {
			prefix string
			v      limits.Values
		}{{"", l.Values}, {"admin.", l.Admin}} {
			if x, ok := side.v.Get(lim); ok {
				fmt.Fprintf(&b, "%s%s=%v ", side.prefix, lim, x)
			}
		}
	}
	p := reflect.ValueOf(l.Policy)
	for i := range p.NumField() {
		if f := p.Field(i); !f.IsNil() {
			fmt.Fprintf(&b, "Policy.%s=%v ", p.Type().Field(i).Name, f.Elem())
		}
	}
	if b.Len() == 0 {
		return "defaults"
	}
	return strings.TrimSpace(b.String())
}

func testKeys(t *testing.T, h *harness) {
	ctx := t.Context()
	acme := h.tenant(t, "acme")
	h.tenant(t, "other")
	k1, plain1 := h.key(t, "acme", "k1")
	if k1.CreatedAt != store.Timestamp(start()) || k1.Revoked() || k1.TenantID != "acme" {
		t.Fatalf("CreateKey(ctx, acme/k1) = got %+v, want CreatedAt %v, not revoked", k1, store.Timestamp(start()))
	}
	h.clk.Advance(time.Minute)
	k2, _ := h.key(t, "acme", "k2")
	h.key(t, "other", "k3")
	explicit := start().Add(-time.Hour)
	d4 := sha256.Sum256([]byte("explicit"))
	k4, err := h.s.CreateKey(ctx, store.Key{ID: "k4", TenantID: "acme", Digest: d4[:], CreatedAt: explicit})
	if err != nil || k4.CreatedAt != store.Timestamp(explicit) {
		t.Fatalf("CreateKey(ctx, acme/k4 with CreatedAt) = got %+v, %v, want CreatedAt %v", k4, err, store.Timestamp(explicit))
	}

	got, err := h.s.GetKey(ctx, "acme", "k1")
	if err != nil || !reflect.DeepEqual(got, k1) {
		t.Fatalf("GetKey(ctx, acme, k1) = got %+v, %v, want %+v, nil", got, err, k1)
	}
	list, err := h.s.ListKeys(ctx, "acme")
	if err != nil {
		t.Fatalf("ListKeys(ctx, acme) = got error %v, want nil", err)
	}
	if want := []store.Key{k4, k1, k2}; !reflect.DeepEqual(list, want) {
		t.Fatalf("ListKeys(ctx, acme) = got %+v, want %+v", list, want)
	}

	d1 := sha256.Sum256([]byte(plain1))
	lk, lt, err := h.s.LookupKey(ctx, d1[:])
	if err != nil || !reflect.DeepEqual(lk, k1) || lt != acme {
		t.Fatalf("LookupKey(ctx, digest(k1)) = got %+v, %+v, %v, want %+v, %+v, nil", lk, lt, err, k1, acme)
	}

	h.clk.Advance(time.Minute)
	revokedAt := store.Timestamp(h.clk.Now())
	if err := h.s.RevokeKey(ctx, "acme", "k1"); err != nil {
		t.Fatalf("RevokeKey(ctx, acme, k1) = got error %v, want nil", err)
	}
	h.clk.Advance(time.Minute)
	if err := h.s.RevokeKey(ctx, "acme", "k1"); err != nil {
		t.Fatalf("RevokeKey(ctx, acme, k1) twice = got error %v, want nil", err)
	}
	got, err = h.s.GetKey(ctx, "acme", "k1")
	if err != nil || got.RevokedAt != revokedAt {
		t.Fatalf("GetKey(ctx, acme, k1) after revoke = got RevokedAt %v, %v, want %v (the first revocation)", got.RevokedAt, err, revokedAt)
	}
	lk, _, err = h.s.LookupKey(ctx, d1[:])
	if err != nil || lk.RevokedAt != revokedAt {
		t.Fatalf("LookupKey(ctx, digest(k1)) after revoke = got RevokedAt %v, %v, want %v", lk.RevokedAt, err, revokedAt)
	}
	if got, err := h.s.GetKey(ctx, "acme", "k2"); err != nil || got.Revoked() {
		t.Fatalf("GetKey(ctx, acme, k2) = got %+v, %v, want not revoked", got, err)
	}

	if _, err := h.s.SetTenantStatus(ctx, "acme", store.StatusActive, store.StatusSuspended); err != nil {
		t.Fatalf("SetTenantStatus(ctx, acme, active, suspended) = got error %v, want nil", err)
	}
	_, lt, err = h.s.LookupKey(ctx, d1[:])
	if err != nil || lt.Status != store.StatusSuspended {
		t.Fatalf("LookupKey(ctx, digest(k1)) of a suspended tenant = got tenant %+v, %v, want status suspended", lt, err)
	}
}

func testKeyErrors(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "acme")
	h.tenant(t, "other")
	k1, plain1 := h.key(t, "acme", "k1")
	h.key(t, "other", "k3")
	d1 := sha256.Sum256([]byte(plain1))
	fresh := sha256.Sum256([]byte("fresh"))
	unknown := sha256.Sum256([]byte("unknown"))

	tests := []struct {
		name    string
		call    func() error
		wantErr error
	}{
		{name: "create duplicate id", wantErr: store.ErrExists, call: func() error {
			_, err := h.s.CreateKey(ctx, store.Key{ID: "k1", TenantID: "acme", Digest: fresh[:]})
			return err
		}},
		{name: "create duplicate id in other tenant", wantErr: store.ErrExists, call: func() error {
			_, err := h.s.CreateKey(ctx, store.Key{ID: "k1", TenantID: "other", Digest: fresh[:]})
			return err
		}},
		{name: "create duplicate digest", wantErr: store.ErrExists, call: func() error {
			_, err := h.s.CreateKey(ctx, store.Key{ID: "k9", TenantID: "acme", Digest: d1[:]})
			return err
		}},
		{name: "create short digest", wantErr: store.ErrInvalid, call: func() error {
			_, err := h.s.CreateKey(ctx, store.Key{ID: "k9", TenantID: "acme", Digest: d1[:16]})
			return err
		}},
		{name: "create bad id", wantErr: store.ErrInvalid, call: func() error {
			_, err := h.s.CreateKey(ctx, store.Key{ID: "k 9", TenantID: "acme", Digest: fresh[:]})
			return err
		}},
		{name: "create for unknown tenant", wantErr: store.ErrNotFound, call: func() error {
			_, err := h.s.CreateKey(ctx, store.Key{ID: "k9", TenantID: "nobody", Digest: fresh[:]})
			return err
		}},
		{name: "get other tenant's key", wantErr: store.ErrNotFound, call: func() error {
			_, err := h.s.GetKey(ctx, "other", k1.ID)
			return err
		}},
		{name: "get unknown key", wantErr: store.ErrNotFound, call: func() error {
			_, err := h.s.GetKey(ctx, "acme", "nope")
			return err
		}},
		{name: "revoke other tenant's key", wantErr: store.ErrNotFound, call: func() error {
			return h.s.RevokeKey(ctx, "other", k1.ID)
		}},
		{name: "revoke unknown key", wantErr: store.ErrNotFound, call: func() error {
			return h.s.RevokeKey(ctx, "acme", "nope")
		}},
		{name: "lookup unknown digest", wantErr: store.ErrNotFound, call: func() error {
			_, _, err := h.s.LookupKey(ctx, unknown[:])
			return err
		}},
		{name: "lookup short digest", wantErr: store.ErrInvalid, call: func() error {
			_, _, err := h.s.LookupKey(ctx, unknown[:31])
			return err
		}},
		{name: "list unknown tenant", wantErr: store.ErrNotFound, call: func() error {
			_, err := h.s.ListKeys(ctx, "nobody")
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.name, tc.call(), tc.wantErr)
		})
	}
	if got, err := h.s.GetKey(ctx, "acme", "k1"); err != nil || got.Revoked() {
		t.Fatalf("GetKey(ctx, acme, k1) after another tenant's revoke = got %+v, %v, want not revoked", got, err)
	}
}

func testKeyDigestOnly(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "acme")
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatalf("rand.Read = got error %v, want nil", err)
	}
	plain := "rpk_" + base64.RawURLEncoding.EncodeToString(secret)
	d := sha256.Sum256([]byte(plain))
	k, err := h.s.CreateKey(ctx, store.Key{ID: "kd", TenantID: "acme", Name: "ci", Prefix: plain[:8], Digest: d[:]})
	if err != nil {
		t.Fatalf("CreateKey(ctx, acme/kd) = got error %v, want nil", err)
	}
	dump, err := h.raw(t).Dump(ctx)
	if err != nil {
		t.Fatalf("Dump(ctx) = got error %v, want nil", err)
	}
	// The dump must show the key row, else the search below proves nothing.
	for _, present := range []string{k.ID, hex.EncodeToString(d[:])} {
		if !strings.Contains(dump, present) {
			t.Fatalf("Dump(ctx) = lacks %q, want the api key row with its hex digest", present)
		}
	}
	needles := map[string]string{
		"plain key":           plain,
		"secret bytes":        string(secret),
		"secret hex":          hex.EncodeToString(secret),
		"secret base64":       base64.StdEncoding.EncodeToString(secret),
		"secret base64url":    base64.RawURLEncoding.EncodeToString(secret),
		"plain key hex":       hex.EncodeToString([]byte(plain)),
		"key body after show": plain[8:],
	}
	for what, needle := range needles {
		if strings.Contains(dump, needle) || bytes.Contains([]byte(strings.ToLower(dump)), []byte(strings.ToLower(needle))) {
			t.Errorf("Dump(ctx) = contains the %s, want only the digest stored", what)
		}
	}
}

func testAudit(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "a")
	h.tenant(t, "b")
	var want []store.AuditEntry
	for i := range 5 {
		h.clk.Advance(time.Second)
		e, err := h.s.AppendAudit(ctx, store.AuditEntry{TenantID: "a", Actor: "operator", Action: "key.create", Target: fmt.Sprintf("k%d", i), Detail: "d"})
		if err != nil {
			t.Fatalf("AppendAudit(ctx, a #%d) = got error %v, want nil", i, err)
		}
		if e.ID <= 0 || (len(want) > 0 && e.ID <= want[0].ID) || e.At != store.Timestamp(h.clk.Now()) {
			t.Fatalf("AppendAudit(ctx, a #%d) = got ID %d At %v, want an increasing ID and At %v", i, e.ID, e.At, store.Timestamp(h.clk.Now()))
		}
		want = append([]store.AuditEntry{e}, want...)
		if _, err := h.s.AppendAudit(ctx, store.AuditEntry{TenantID: "b", Action: "noise"}); err != nil {
			t.Fatalf("AppendAudit(ctx, b) = got error %v, want nil", err)
		}
	}
	at := start().Add(-time.Hour)
	if e, err := h.s.AppendAudit(ctx, store.AuditEntry{TenantID: "b", Action: "dated", At: at}); err != nil || e.At != store.Timestamp(at) {
		t.Fatalf("AppendAudit(ctx, b with At) = got %+v, %v, want At %v", e, err, store.Timestamp(at))
	}

	tests := []struct {
		name     string
		limit    int
		beforeID int64
		want     []store.AuditEntry
	}{
		{name: "all newest first", want: want},
		{name: "limit", limit: 2, want: want[:2]},
		{name: "page after", limit: 2, beforeID: want[1].ID, want: want[2:4]},
		{name: "last page", limit: 10, beforeID: want[3].ID, want: want[4:]},
		{name: "before first", beforeID: want[4].ID, want: []store.AuditEntry{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.s.ListAudit(ctx, "a", tc.limit, tc.beforeID)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ListAudit(ctx, a, %d, %d) = got %+v, %v, want %+v, nil", tc.limit, tc.beforeID, got, err, tc.want)
			}
		})
	}
	got, err := h.s.ListAudit(ctx, "b", 0, 0)
	if err != nil || len(got) != 6 {
		t.Fatalf("ListAudit(ctx, b) = got %d entries, %v, want 6, nil", len(got), err)
	}
	for _, e := range got {
		if e.TenantID != "b" {
			t.Fatalf("ListAudit(ctx, b) = got an entry of tenant %q, want only b's", e.TenantID)
		}
	}
	// Another tenant's id as cursor must not leak anything either.
	got, err = h.s.ListAudit(ctx, "b", 100, want[0].ID+1)
	if err != nil {
		t.Fatalf("ListAudit(ctx, b, cursor) = got error %v, want nil", err)
	}
	for _, e := range got {
		if e.TenantID != "b" {
			t.Fatalf("ListAudit(ctx, b, cursor) = got an entry of tenant %q, want only b's", e.TenantID)
		}
	}
	_, err = h.s.ListAudit(ctx, "nobody", 0, 0)
	wantErr(t, "ListAudit(ctx, nobody)", err, store.ErrNotFound)
	_, err = h.s.AppendAudit(ctx, store.AuditEntry{TenantID: "a"})
	wantErr(t, "AppendAudit(ctx) without action", err, store.ErrInvalid)
}

func testSigningKey(t *testing.T, h *harness) {
	const callers = 50
	keys := make([][]byte, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { keys[i], errs[i] = h.s.SigningKey(t.Context()) })
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("SigningKey(ctx) caller %d = got error %v, want nil", i, errs[i])
		}
		if len(keys[i]) != 32 {
			t.Fatalf("SigningKey(ctx) caller %d = got %d bytes, want 32", i, len(keys[i]))
		}
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("SigningKey(ctx) caller %d = got %x, want %x (one key for everybody)", i, keys[i], keys[0])
		}
	}
	if bytes.Equal(keys[0], make([]byte, 32)) {
		t.Fatalf("SigningKey(ctx) = got all zero bytes, want random")
	}
	again, err := h.s.SigningKey(t.Context())
	if err != nil || !bytes.Equal(again, keys[0]) {
		t.Fatalf("SigningKey(ctx) later = got %x, %v, want %x, nil", again, err, keys[0])
	}
}

// testProbeWrite: a store that implements store.WriteProber takes its
// probe writes, again and again, and they change nothing a reader of the
// store's state sees: the epoch sequence goes on as if there were none.
func testProbeWrite(t *testing.T, h *harness) {
	p, ok := h.s.(store.WriteProber)
	if !ok {
		t.Skip("the store does not implement store.WriteProber")
	}
	before, err := h.s.BumpEpoch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := p.ProbeWrite(t.Context()); err != nil {
			t.Fatalf("ProbeWrite(ctx) #%d = got error %v, want nil", i+1, err)
		}
	}
	if got, err := h.s.BumpEpoch(t.Context()); err != nil || got != before+1 {
		t.Fatalf("BumpEpoch(ctx) after probe writes = got %d, %v, want %d (the one before them, %d, plus 1), nil", got, err, before+1, before)
	}
}

func testBumpEpoch(t *testing.T, h *harness) {
	first, err := h.s.BumpEpoch(t.Context())
	if err != nil || first < 1 {
		t.Fatalf("BumpEpoch(ctx) on a new store = got %d, %v, want at least 1, nil", first, err)
	}
	const callers = 20
	got := make([]uint32, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { got[i], errs[i] = h.s.BumpEpoch(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("BumpEpoch(ctx) caller %d = got error %v, want nil", i, err)
		}
	}
	slices.Sort(got)
	for i, v := range got {
		if want := first + 1 + uint32(i); v != want {
			t.Fatalf("BumpEpoch(ctx) by %d concurrent callers = got %v, want each of %d..%d once", callers, got, first+1, first+callers)
		}
	}
	last, err := h.s.BumpEpoch(t.Context())
	if err != nil || last <= got[callers-1] {
		t.Fatalf("BumpEpoch(ctx) afterwards = got %d, %v, want > %d", last, err, got[callers-1])
	}
}

func testCheckpointRoundTrip(t *testing.T, h *harness) {
	h.tenant(t, "acme")
	st := h.load(t, "acme")
	wantState(t, "LoadCheckpoint(ctx, acme) before any checkpoint", st, store.PoolState{})
	tests := []struct {
		name string
		cp   store.Checkpoint
	}{
		{name: "empty full", cp: store.Checkpoint{Full: true, FencingHWM: 7}},
		{name: "small", cp: Synthetic(3, 2, 1)},
		{name: "larger replaces", cp: Synthetic(300, 5, 2)},
		{name: "smaller replaces", cp: Synthetic(10, 1, 3)},
		{name: "edge values", cp: store.Checkpoint{Full: true, FencingHWM: store.MaxFencingHWM, Resources: []store.ResourceRow{
			{ID: strings.Repeat("r", store.MaxRowIDLen), Capacity: math.MaxInt32, Alpha: math.MaxFloat64, Beta: math.SmallestNonzeroFloat64,
				UpdatedAt: math.MinInt64, ConsecutiveFailures: math.MaxInt32, BlockedUntil: math.MaxInt64, CooldownLevel: math.MinInt32},
			{ID: "ünïcode/ id with spaces'\"", Capacity: 1, Labels: map[string]string{"k\"ey": "v'al\n", "": "empty key"}},
		}, Cells: []store.CellRow{
			{ResourceID: "ünïcode/ id with spaces'\"", Context: strings.Repeat("c", store.MaxRowIDLen), Alpha: 0, Beta: 0},
		}}},
	}
	prev := uint64(0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.save(t, "acme", tc.cp)
			want := Apply(store.PoolState{}, tc.cp)
			want.FencingHWM = max(prev, tc.cp.FencingHWM)
			prev = want.FencingHWM
			wantState(t, "LoadCheckpoint(ctx, acme)", h.load(t, "acme"), want)
		})
	}
	_, err := h.s.LoadCheckpoint(t.Context(), "nobody")
	wantErr(t, "LoadCheckpoint(ctx, nobody)", err, store.ErrNotFound)
	wantErr(t, "SaveCheckpoint(ctx, nobody)", h.s.SaveCheckpoint(t.Context(), "nobody", Synthetic(1, 1, 1)), store.ErrNotFound)
}

func testCheckpointTenantIsolation(t *testing.T, h *harness) {
	h.tenant(t, "a")
	h.tenant(t, "b")
	// Same resource ids in both tenants: rows must be told apart by pool id.
	cpA, cpB := Synthetic(50, 3, 1), Synthetic(40, 4, 2)
	h.save(t, "a", cpA)
	h.save(t, "b", cpB)
	wantA, wantB := Apply(store.PoolState{}, cpA), Apply(store.PoolState{}, cpB)
	wantState(t, "LoadCheckpoint(ctx, a)", h.load(t, "a"), wantA)
	wantState(t, "LoadCheckpoint(ctx, b)", h.load(t, "b"), wantB)

	// A full checkpoint of a with fewer rows and an incremental one that
	// removes ids b also has leave b alone.
	small := Synthetic(5, 1, 3)
	h.save(t, "a", small)
	wantA = Apply(wantA, small)
	inc := store.Checkpoint{Removed: []string{"res-0000001", "res-0000002"}, Cells: []store.CellRow{{ResourceID: "res-0000000", Context: "new", Alpha: 1}}}
	h.save(t, "a", inc)
	wantA = Apply(wantA, inc)
	wantState(t, "LoadCheckpoint(ctx, a) after its own changes", h.load(t, "a"), wantA)
	wantState(t, "LoadCheckpoint(ctx, b) after a's changes", h.load(t, "b"), wantB)
}

func testCheckpointIncremental(t *testing.T, h *harness) {
	h.tenant(t, "acme")
	full := Synthetic(30, 3, 1)
	h.save(t, "acme", full)
	state := Apply(store.PoolState{}, full)
	steps := []struct {
		name string
		cp   store.Checkpoint
	}{
		{name: "touch every 7th cell", cp: Touch(full, 7)},
		{name: "new resource with cells", cp: store.Checkpoint{FencingHWM: full.FencingHWM + 10,
			Resources: []store.ResourceRow{{ID: "zz-new", Capacity: 2, Alpha: 1, Beta: 1, Labels: map[string]string{"new": "yes"}}},
			Cells:     []store.CellRow{{ResourceID: "zz-new", Context: "ctx-00", Alpha: 3}, {ResourceID: "zz-new", Context: "ctx-09", Beta: 2}}}},
		{name: "new cell of stored resource", cp: store.Checkpoint{Cells: []store.CellRow{{ResourceID: "res-0000003", Context: "ctx-99", Alpha: 9}}}},
		{name: "remove resources and their cells", cp: store.Checkpoint{Removed: []string{"res-0000000", "res-0000004", "zz-new", "never-existed"}}},
		{name: "lower fencing mark is ignored", cp: store.Checkpoint{FencingHWM: 1, Resources: []store.ResourceRow{{ID: "res-0000005", Capacity: 4, Alpha: 0.5}}}},
		{name: "remove and re-add in one checkpoint", cp: store.Checkpoint{Removed: []string{"res-0000006"},
			Resources: []store.ResourceRow{{ID: "res-0000006", Capacity: 1, Alpha: 2}},
			Cells:     []store.CellRow{{ResourceID: "res-0000006", Context: "fresh", Alpha: 1}}}},
		{name: "empty", cp: store.Checkpoint{}},
	}
	for _, st := range steps {
		h.save(t, "acme", st.cp)
		state = Apply(state, st.cp)
		wantState(t, st.name+": LoadCheckpoint(ctx, acme)", h.load(t, "acme"), state)
	}
	if got := h.load(t, "acme"); slices.ContainsFunc(got.Cells, func(c store.CellRow) bool { return c.ResourceID == "res-0000000" }) {
		t.Fatalf("LoadCheckpoint(ctx, acme) = got cells of removed resource res-0000000, want none")
	}
}

func testCheckpointInvalid(t *testing.T, h *harness) {
	h.tenant(t, "acme")
	base := Synthetic(5, 2, 1)
	h.save(t, "acme", base)
	want := Apply(store.PoolState{}, base)
	res := func(mod func(r *store.ResourceRow)) []store.ResourceRow {
		r := store.ResourceRow{ID: "r", Capacity: 1, Alpha: 1, Beta: 1}
		mod(&r)
		return []store.ResourceRow{r}
	}
	tests := []struct {
		name string
		cp   store.Checkpoint
	}{
		{name: "capacity 0", cp: store.Checkpoint{Full: true, Resources: res(func(r *store.ResourceRow) { r.Capacity = 0 })}},
		{name: "NaN alpha", cp: store.Checkpoint{Resources: res(func(r *store.ResourceRow) { r.Alpha = math.NaN() })}},
		{name: "infinite beta", cp: store.Checkpoint{Resources: res(func(r *store.ResourceRow) { r.Beta = math.Inf(1) })}},
		{name: "negative alpha", cp: store.Checkpoint{Resources: res(func(r *store.ResourceRow) { r.Alpha = -1 })}},
		{name: "empty id", cp: store.Checkpoint{Resources: res(func(r *store.ResourceRow) { r.ID = "" })}},
		{name: "long id", cp: store.Checkpoint{Resources: res(func(r *store.ResourceRow) { r.ID = LongID() })}},
		{name: "NUL in id", cp: store.Checkpoint{Resources: res(func(r *store.ResourceRow) { r.ID = "a\x00b" })}},
		{name: "invalid UTF-8 label", cp: store.Checkpoint{Resources: res(func(r *store.ResourceRow) { r.Labels = map[string]string{"k": "\xff"} })}},
		{name: "duplicate resource", cp: store.Checkpoint{Resources: append(res(func(*store.ResourceRow) {}), res(func(*store.ResourceRow) {})...)}},
		{name: "duplicate cell", cp: store.Checkpoint{Cells: []store.CellRow{{ResourceID: "res-0000000", Context: "c"}, {ResourceID: "res-0000000", Context: "c"}}}},
		{name: "full with orphan cell", cp: store.Checkpoint{Full: true, Cells: []store.CellRow{{ResourceID: "ghost", Context: "c"}}}},
		{name: "incremental with orphan cell", cp: store.Checkpoint{
			Resources: res(func(*store.ResourceRow) {}),
			Cells:     []store.CellRow{{ResourceID: "res-0000001", Context: "ok"}, {ResourceID: "ghost", Context: "c"}}}},
		{name: "incremental cell of removed resource", cp: store.Checkpoint{Removed: []string{"res-0000002"},
			Cells: []store.CellRow{{ResourceID: "res-0000002", Context: "c"}}}},
		{name: "fencing mark too large", cp: store.Checkpoint{FencingHWM: store.MaxFencingHWM + 1}},
		{name: "empty removed id", cp: store.Checkpoint{Removed: []string{""}}},
		{name: "cell with empty context", cp: store.Checkpoint{Cells: []store.CellRow{{ResourceID: "res-0000000"}}}},
		{name: "cell with NaN beta", cp: store.Checkpoint{Cells: []store.CellRow{{ResourceID: "res-0000000", Context: "c", Beta: math.NaN()}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := h.s.SaveCheckpoint(t.Context(), "acme", tc.cp)
			wantErr(t, "SaveCheckpoint(ctx, acme)", err, store.ErrInvalid)
			wantState(t, "LoadCheckpoint(ctx, acme) after a rejected checkpoint", h.load(t, "acme"), want)
		})
	}
}

func testCheckpointCorrupt(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "good")
	good := Synthetic(10, 2, 7)
	h.save(t, "good", good)
	tests := []struct {
		kind Corruption
		want string // in the error: names the bad row
	}{
		{kind: CorruptCapacity, want: CorruptID},
		{kind: CorruptAlpha, want: CorruptID},
		{kind: CorruptBeta, want: CorruptID},
		{kind: CorruptOrphan, want: CorruptID},
		{kind: CorruptLabels, want: CorruptID},
		{kind: CorruptEmptyID, want: `""`},
		{kind: CorruptLongID, want: LongID()[:64]},
	}
	for i, tc := range tests {
		t.Run(string(tc.kind), func(t *testing.T) {
			id := fmt.Sprintf("bad-%d", i)
			h.tenant(t, id)
			h.save(t, id, Synthetic(10, 2, 7))
			if err := h.raw(t).Corrupt(ctx, id, tc.kind); err != nil {
				t.Fatalf("Corrupt(ctx, %s, %s) = got error %v, want nil", id, tc.kind, err)
			}
			_, err := h.s.LoadCheckpoint(ctx, id)
			wantErr(t, fmt.Sprintf("LoadCheckpoint(ctx, %s) with a %s row", id, tc.kind), err, store.ErrCorrupt)
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), id) {
				t.Fatalf("LoadCheckpoint(ctx, %s) = got error %q, want it to name tenant %s and the row %s", id, err, id, tc.want)
			}
			wantState(t, "LoadCheckpoint(ctx, good) next to a corrupt tenant", h.load(t, "good"), Apply(store.PoolState{}, good))
			// A Full checkpoint repairs the tenant.
			h.save(t, id, Synthetic(3, 1, 8))
			wantState(t, fmt.Sprintf("LoadCheckpoint(ctx, %s) after a repairing checkpoint", id), h.load(t, id), Apply(store.PoolState{}, Synthetic(3, 1, 8)))
		})
	}
}

func testCheckpointDeletedTenant(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "gone")
	h.save(t, "gone", Synthetic(5, 2, 1))
	if err := h.s.DeleteTenant(ctx, "gone"); err != nil {
		t.Fatalf("DeleteTenant(ctx, gone) = got error %v, want nil", err)
	}
	wantErr(t, "SaveCheckpoint(ctx, gone) after delete", h.s.SaveCheckpoint(ctx, "gone", Synthetic(5, 2, 1)), store.ErrNotFound)
	_, err := h.s.LoadCheckpoint(ctx, "gone")
	wantErr(t, "LoadCheckpoint(ctx, gone) after delete", err, store.ErrNotFound)
	for table, n := range h.counts(t, "gone") {
		if n != 0 {
			t.Errorf("RowCounts(ctx, gone)[%s] = got %d, want 0", table, n)
		}
	}
}

// testCheckpointConcurrent races full checkpoints of one tenant, and a
// delete against checkpoints of another: every checkpoint either lands
// whole or fails with ErrNotFound.
func testCheckpointConcurrent(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "busy")
	h.tenant(t, "doomed")
	cps := []store.Checkpoint{Synthetic(60, 3, 1), Synthetic(40, 2, 2), Synthetic(80, 1, 3)}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(cps)+1)
	for _, cp := range cps {
		wg.Go(func() { errs <- h.s.SaveCheckpoint(ctx, "busy", cp) })
		wg.Go(func() {
			if err := h.s.SaveCheckpoint(ctx, "doomed", cp); err != nil && !errors.Is(err, store.ErrNotFound) {
				errs <- err
			}
		})
	}
	wg.Go(func() { errs <- h.s.DeleteTenant(ctx, "doomed") })
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent SaveCheckpoint/DeleteTenant = got error %v, want nil", err)
		}
	}
	got := h.load(t, "busy")
	var hwm uint64
	for _, cp := range cps {
		hwm = max(hwm, cp.FencingHWM)
	}
	ok := false
	for _, cp := range cps {
		want := Apply(store.PoolState{}, cp)
		want.FencingHWM = hwm // whatever the order, the mark is the max
		if len(got.Resources) == len(want.Resources) && len(got.Cells) == len(want.Cells) {
			wantState(t, "LoadCheckpoint(ctx, busy) after racing full checkpoints", got, want)
			ok = true
		}
	}
	if !ok {
		t.Fatalf("LoadCheckpoint(ctx, busy) = got %d resources, %d cells, want exactly one of the racing checkpoints", len(got.Resources), len(got.Cells))
	}
	for table, n := range h.counts(t, "doomed") {
		if n != 0 {
			t.Errorf("RowCounts(ctx, doomed)[%s] after delete raced checkpoints = got %d, want 0", table, n)
		}
	}
}

// CountRows implements Raw.RowCounts for a SQL store: count runs a
// "SELECT count(*)" query whose one parameter, $1, is tenantID.
func CountRows(ctx context.Context, tenantID string, count func(ctx context.Context, query string, tenantID string) (int, error)) (map[string]int, error) {
	out := make(map[string]int)
	for _, st := range []struct{ table, column string }{
		{"tenant_limits", "tenant_id"},
		{"api_keys", "tenant_id"},
		{"audit_log", "tenant_id"},
		{"checkpoint_meta", "pool_id"},
		{"resources", "pool_id"},
		{"cells", "pool_id"},
		{"affinity_bindings", "pool_id"},
	} {
		n, err := count(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s = $1`, st.table, st.column), tenantID)
		if err != nil {
			return nil, err
		}
		out[st.table] = n
	}
	return out, nil
}

// Rows is a query's rows as database/sql and pgx both give them.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ColumnsOf reads rows of (column name, type) into a map, for a Raw's
// ColumnTypes.
func ColumnsOf(rows Rows) (map[string]string, error) {
	cols := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		cols[name] = typ
	}
	return cols, rows.Err()
}
