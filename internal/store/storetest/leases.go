package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/repool/repool/internal/store"
)

func lease(id uint64, resource string, exp int64) store.LeaseRow {
	return store.LeaseRow{ID: id, ResourceID: resource, Context: "ctx", Token: id + 1000, ExpiresAt: exp}
}

func loadLeases(t *testing.T, s store.Store, tenant string) []store.LeaseRow {
	t.Helper()
	got, err := s.LoadLeases(t.Context(), tenant)
	if err != nil {
		t.Fatalf("LoadLeases(ctx, %q) = got error %v, want nil", tenant, err)
	}
	return got
}

// testLeaseJournal: leases written are loaded back in id order, a later
// put of the same lease replaces it (renewal), a delete removes it, each
// tenant sees only its own, pruning removes only the expired, and deleting
// a tenant removes its journal.
func testLeaseJournal(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "a")
	h.tenant(t, "b")
	if got := loadLeases(t, h.s, "a"); len(got) != 0 {
		t.Fatalf("LoadLeases of a new tenant = got %v, want none", got)
	}
	if err := h.s.WriteLeases(ctx, "a", []store.LeaseRow{lease(3, "r3", 300), lease(1, "r1", 100), lease(2, "r2", 200)}, nil); err != nil {
		t.Fatalf("WriteLeases(a, 3 leases) = got error %v, want nil", err)
	}
	if err := h.s.WriteLeases(ctx, "b", []store.LeaseRow{lease(1, "other", 999)}, nil); err != nil {
		t.Fatalf("WriteLeases(b) = got error %v, want nil", err)
	}
	renewed := lease(2, "r2", 250)
	renewed.Token = 77
	if err := h.s.WriteLeases(ctx, "a", []store.LeaseRow{renewed}, []uint64{3}); err != nil {
		t.Fatalf("WriteLeases(a, renew 2, end 3) = got error %v, want nil", err)
	}
	want := []store.LeaseRow{lease(1, "r1", 100), renewed}
	if got := loadLeases(t, h.s, "a"); !slices.Equal(got, want) {
		t.Fatalf("LoadLeases(a) = got %v, want %v", got, want)
	}
	if got := loadLeases(t, h.s, "b"); !slices.Equal(got, []store.LeaseRow{lease(1, "other", 999)}) {
		t.Fatalf("LoadLeases(b) = got %v, want b's own lease only", got)
	}
	// Many at once: more than one multi-row statement's worth.
	var many []store.LeaseRow
	var ids []uint64
	for i := range uint64(450) {
		many = append(many, lease(1000+i, "m", 5000))
		ids = append(ids, 1000+i)
	}
	if err := h.s.WriteLeases(ctx, "a", many, nil); err != nil {
		t.Fatalf("WriteLeases(a, 450 leases) = got error %v, want nil", err)
	}
	if got := len(loadLeases(t, h.s, "a")); got != 452 {
		t.Fatalf("LoadLeases(a) after 450 more = got %d leases, want 452", got)
	}
	if err := h.s.WriteLeases(ctx, "a", nil, ids); err != nil {
		t.Fatalf("WriteLeases(a, end 450) = got error %v, want nil", err)
	}
	if err := h.s.PruneLeases(ctx, 200); err != nil {
		t.Fatalf("PruneLeases(200) = got error %v, want nil", err)
	}
	if got := loadLeases(t, h.s, "a"); !slices.Equal(got, []store.LeaseRow{renewed}) {
		t.Fatalf("LoadLeases(a) after PruneLeases(200) = got %v, want only the lease expiring at 250", got)
	}
	if err := h.s.DeleteTenant(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got, err := h.s.LoadLeases(ctx, "b"); err != nil || len(got) != 0 {
		t.Fatalf("LoadLeases(deleted b) = got %v, %v, want none", got, err)
	}
	if err := h.s.WriteLeases(ctx, "bad id!", []store.LeaseRow{lease(1, "r", 1)}, nil); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("WriteLeases(bad tenant id) = got %v, want ErrInvalid", err)
	}
}

// Fence checks the fencing contract on two handles of one database: once
// a successor has raised the epoch, every state write of the old writer
// (checkpoint, lease journal, audit, pruning) fails with ErrFenced and
// changes nothing, and the successor's writes succeed.
func Fence(t *testing.T, old, successor store.Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := old.CreateTenant(ctx, store.Tenant{ID: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	e1, err := old.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old.SetFence(e1)
	cp := store.Checkpoint{Full: true, FencingHWM: 7, Resources: []store.ResourceRow{{ID: "r1", Capacity: 1}}}
	if err := old.SaveCheckpoint(ctx, "acme", cp); err != nil {
		t.Fatalf("SaveCheckpoint(current writer) = got error %v, want nil", err)
	}
	if err := old.WriteLeases(ctx, "acme", []store.LeaseRow{{ID: 1, ResourceID: "r1", Context: "x", Token: 7, ExpiresAt: 99}}, nil); err != nil {
		t.Fatalf("WriteLeases(current writer) = got error %v, want nil", err)
	}

	// What retention may delete, written while old is the writer.
	if _, err := old.AppendAudit(ctx, store.AuditEntry{TenantID: "acme", Actor: "x", Action: "kept"}); err != nil {
		t.Fatalf("AppendAudit(current writer) = got error %v, want nil", err)
	}
	d := sha256.Sum256([]byte("fence"))
	if _, err := old.CreateKey(ctx, store.Key{ID: "k1", TenantID: "acme", Name: "k1", Prefix: "rpk_", Digest: d[:]}); err != nil {
		t.Fatal(err)
	}
	if err := old.RevokeKey(ctx, "acme", "k1"); err != nil {
		t.Fatal(err)
	}

	e2, err := successor.BumpEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	successor.SetFence(e2)
	stale := store.Checkpoint{Full: true, FencingHWM: 8, Resources: []store.ResourceRow{{ID: "stale", Capacity: 1}}}
	_, auditErr := old.AppendAudit(ctx, store.AuditEntry{TenantID: "acme", Actor: "x", Action: "stale"})
	_, pruneAuditErr := old.PruneAudit(ctx, "acme", store.AuditPrune{ThroughID: math.MaxInt64, Limit: 10})
	_, pruneKeysErr := old.PruneRevokedKeys(ctx, "acme", time.Now().Add(time.Hour), 10)
	for name, err := range map[string]error{
		"SaveCheckpoint":   old.SaveCheckpoint(ctx, "acme", stale),
		"WriteLeases":      old.WriteLeases(ctx, "acme", nil, []uint64{1}),
		"PruneLeases":      old.PruneLeases(ctx, 1000),
		"AppendAudit":      auditErr,
		"PruneAudit":       pruneAuditErr,
		"PruneRevokedKeys": pruneKeysErr,
	} {
		if !errors.Is(err, store.ErrFenced) {
			t.Errorf("%s by the deposed writer = got %v, want ErrFenced", name, err)
		}
	}
	st, err := successor.LoadCheckpoint(ctx, "acme")
	if err != nil || len(st.Resources) != 1 || st.Resources[0].ID != "r1" || st.FencingHWM != 7 {
		t.Fatalf("LoadCheckpoint after stale writes = got %+v, %v, want the writer's r1 and hwm 7", st, err)
	}
	leases, err := successor.LoadLeases(ctx, "acme")
	if err != nil || len(leases) != 1 || leases[0].Token != 7 {
		t.Fatalf("LoadLeases after stale writes = got %+v, %v, want the journaled lease kept", leases, err)
	}
	if audit, err := successor.ListAudit(ctx, "acme", 0, 0); err != nil || len(audit) != 1 || audit[0].Action != "kept" {
		t.Fatalf("ListAudit after a stale append and prune = got %+v, %v, want the writer's one entry", audit, err)
	}
	if keys, err := successor.ListKeys(ctx, "acme"); err != nil || len(keys) != 1 {
		t.Fatalf("ListKeys after a stale prune = got %+v, %v, want the revoked key kept", keys, err)
	}
	if err := successor.SaveCheckpoint(ctx, "acme", stale); err != nil {
		t.Fatalf("SaveCheckpoint(new writer) = got error %v, want nil", err)
	}
}
