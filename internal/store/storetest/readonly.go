package storetest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/repool/repool/internal/store"
)

// ReadOnly checks store.Options ReadOnly against one database: open(t,
// false) opens it as a server does (migrated, empty, no signing key yet),
// open(t, true) read-only beside it; both are closed by the caller's
// cleanup. A read-only store reads what the other one wrote, creates no
// signing key, and writes nothing.
func ReadOnly(t *testing.T, open func(t *testing.T, readOnly bool) store.Store) {
	t.Helper()
	ctx := t.Context()
	rw := open(t, false)
	ro := open(t, true)

	if _, err := ro.SigningKey(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("read-only SigningKey(ctx) on a store without a key = got error %v, want store.ErrNotFound", err)
	}
	if _, err := ro.CreateTenant(ctx, store.Tenant{ID: "written", Name: "Written"}); err == nil {
		t.Errorf("read-only CreateTenant(ctx, written) = got nil error, want the write refused")
	}
	if _, err := ro.BumpEpoch(ctx); err == nil {
		t.Errorf("read-only BumpEpoch(ctx) = got nil error, want the write refused")
	}
	if _, err := rw.GetTenant(ctx, "written"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTenant(ctx, written) after a read-only CreateTenant = got error %v, want store.ErrNotFound", err)
	}

	key, err := rw.SigningKey(ctx)
	if err != nil {
		t.Fatalf("SigningKey(ctx) = got error %v, want nil", err)
	}
	if _, err := rw.CreateTenant(ctx, store.Tenant{ID: "acme", Name: "Acme"}); err != nil {
		t.Fatalf("CreateTenant(ctx, acme) = got error %v, want nil", err)
	}
	got, err := ro.SigningKey(ctx)
	if err != nil || !bytes.Equal(got, key) {
		t.Errorf("read-only SigningKey(ctx) = got %x, %v, want %x, nil: the key the server made", got, err, key)
	}
	tn, err := ro.GetTenant(ctx, "acme")
	if err != nil || tn.Name != "Acme" {
		t.Errorf("read-only GetTenant(ctx, acme) = got %+v, %v, want tenant Acme", tn, err)
	}
	ts, err := ro.ListTenants(ctx, store.TenantFilter{})
	if err != nil || len(ts) != 1 || ts[0].ID != "acme" {
		t.Errorf("read-only ListTenants(ctx) = got %+v, %v, want [acme]", ts, err)
	}
}
