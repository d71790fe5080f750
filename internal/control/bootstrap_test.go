package control

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/auth"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/sqlite"
	"github.com/repool/repool/internal/token"
)

func TestBootstrapCreatesOnce(t *testing.T) {
	h := newHarness(t, openSQLite)
	ctx := context.Background()
	b, created, err := Bootstrap(ctx, h.real, h.signer, 2*time.Hour)
	if err != nil || !created {
		t.Fatalf("Bootstrap(empty store) = got created %v, error %v, want true, nil", created, err)
	}
	if b.Tenant.ID != DemoTenantID || b.Tenant.Name != DemoTenantName || b.Tenant.Status != store.StatusActive {
		t.Errorf("Bootstrap tenant = got %+v, want active %q", b.Tenant, DemoTenantID)
	}

	k, tn, err := h.real.LookupKey(ctx, auth.Digest(b.Key))
	if err != nil || k.ID != b.KeyID || k.Prefix != b.KeyPrefix || tn.ID != DemoTenantID || k.Revoked() {
		t.Fatalf("LookupKey(bootstrap key) = got %+v of %q, %v, want valid key %s of demo", k, tn.ID, err, b.KeyID)
	}
	c, err := h.signer.Verify(b.OperatorToken, token.AudienceControl)
	if err != nil || c.Role != RoleOperator || c.Tenant != "" || !c.ExpiresAt.Equal(b.OperatorTokenExpiresAt) {
		t.Fatalf("Verify(bootstrap operator token) = got %+v, %v, want operator expiring %v", c, err, b.OperatorTokenExpiresAt)
	}
	if d := time.Until(b.OperatorTokenExpiresAt); d > 2*time.Hour || d < 2*time.Hour-5*time.Second {
		t.Errorf("operator token lifetime = got %v, want about 2h", d)
	}
	// The token works against the API.
	h.mustDo("GET", "/api/v1/tenants", b.OperatorToken, "", 200, nil)

	var got []auditLine
	for _, e := range h.auditOf(DemoTenantID) {
		got = append(got, auditLine{e.Actor, e.Action, e.Target})
		if e.Detail == "" || strings.Contains(e.Detail, b.Key) || strings.Contains(e.Detail, b.OperatorToken) {
			t.Errorf("bootstrap audit %s detail = %q, want a detail without secrets", e.Action, e.Detail)
		}
	}
	want := []auditLine{{"bootstrap", "key.create", b.KeyID}, {"bootstrap", "tenant.create", DemoTenantID}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("demo audit trail = got %+v, want %+v", got, want)
	}

	before := h.snapshot()
	if b2, created, err := Bootstrap(ctx, h.real, h.signer, time.Hour); err != nil || created || b2 != (Bootstrapped{}) {
		t.Fatalf("Bootstrap(second start) = got %+v, %v, %v, want nothing, false, nil", b2, created, err)
	}
	h.unchanged("a second Bootstrap", before)
}

func TestBootstrapLeavesUsedStoresAlone(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(h *harness)
	}{
		{"another tenant", func(h *harness) { h.createTenant("acme") }},
		{"only a tombstone", func(h *harness) {
			h.createTenant("gone")
			if err := h.real.DeleteTenant(context.Background(), "gone"); err != nil {
				h.t.Fatalf("DeleteTenant(gone) = got error %v, want nil", err)
			}
		}},
		{"a suspended tenant", func(h *harness) {
			h.createTenant("paused")
			if _, err := h.real.SetTenantStatus(context.Background(), "paused", store.StatusActive, store.StatusSuspended); err != nil {
				h.t.Fatalf("SetTenantStatus(paused) = got error %v, want nil", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, openSQLite)
			tt.prepare(h)
			before := h.snapshot()
			b, created, err := Bootstrap(context.Background(), h.real, h.signer, time.Hour)
			if err != nil || created || b != (Bootstrapped{}) {
				t.Fatalf("Bootstrap(%s) = got %+v, %v, %v, want nothing, false, nil", tt.name, b, created, err)
			}
			h.unchanged("Bootstrap on a used store", before)
		})
	}
}

func TestBootstrapRefusesBadArguments(t *testing.T) {
	h := newHarness(t, openSQLite)
	before := h.snapshot()
	for _, tt := range []struct {
		name   string
		st     store.Store
		signer *token.Signer
		ttl    time.Duration
	}{
		{"zero ttl", h.real, h.signer, 0},
		{"nil signer", h.real, nil, time.Hour},
		{"nil store", nil, h.signer, time.Hour},
	} {
		if _, created, err := Bootstrap(context.Background(), tt.st, tt.signer, tt.ttl); err == nil || created {
			t.Errorf("Bootstrap(%s) = got created %v, error %v, want an error", tt.name, created, err)
		}
	}
	h.unchanged("a refused Bootstrap", before)
}

func TestBootstrapStoreDown(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.st.fail = func(string) error { return store.ErrUnavailable }
	if _, created, err := Bootstrap(context.Background(), h.st, h.signer, time.Hour); err == nil || created {
		t.Fatalf("Bootstrap(store down) = got created %v, error %v, want an error", created, err)
	}
}

// Two servers starting at once on one database file: exactly one creates.
func TestBootstrapConcurrentServers(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "shared.db")
	signer, _ := token.NewSigner(signingKey, clk)
	var stores []store.Store
	for range 4 {
		st, err := sqlite.Open(context.Background(), path, store.Options{Clock: clk})
		if err != nil {
			t.Fatalf("sqlite.Open(shared) = got error %v, want nil", err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
	)
	for _, st := range stores {
		wg.Go(func() {
			_, ok, err := Bootstrap(context.Background(), st, signer, time.Hour)
			if err != nil {
				t.Errorf("Bootstrap(concurrent) = got error %v, want nil", err)
			}
			if ok {
				mu.Lock()
				created++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if created != 1 {
		t.Fatalf("servers that bootstrapped = got %d, want exactly 1", created)
	}
	keys, err := stores[0].ListKeys(context.Background(), DemoTenantID)
	if err != nil || len(keys) != 1 {
		t.Fatalf("demo keys = got %d, %v, want exactly 1", len(keys), err)
	}
}
