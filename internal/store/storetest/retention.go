package storetest

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/repool/repool/internal/store"
)

// auditActions returns the targets of the tenant's audit entries, oldest
// first.
func auditTargets(t *testing.T, h *harness, tenant string) []string {
	t.Helper()
	got, err := h.s.ListAudit(t.Context(), tenant, store.MaxAuditLimit, 0)
	if err != nil {
		t.Fatalf("ListAudit(ctx, %q) = got error %v, want nil", tenant, err)
	}
	out := []string{}
	for i := len(got) - 1; i >= 0; i-- {
		out = append(out, got[i].Target)
	}
	return out
}

func targets(from, to int) []string {
	out := []string{}
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("e%d", i))
	}
	return out
}

// testAuditRetention: PruneAudit deletes a tenant's entries older than
// Before and those up to ThroughID (AuditCut's bound on the entries
// kept), at most Limit per call, and nothing of another tenant's.
func testAuditRetention(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "a")
	h.tenant(t, "b")
	var at []time.Time
	for i := range 10 {
		h.clk.Advance(time.Minute)
		e, err := h.s.AppendAudit(ctx, store.AuditEntry{TenantID: "a", Actor: "pool", Action: "resource.blocked", Target: fmt.Sprintf("e%d", i)})
		if err != nil {
			t.Fatalf("AppendAudit(ctx, a #%d) = got error %v, want nil", i, err)
		}
		at = append(at, e.At)
		if _, err := h.s.AppendAudit(ctx, store.AuditEntry{TenantID: "b", Action: "noise", Target: fmt.Sprintf("e%d", i)}); err != nil {
			t.Fatalf("AppendAudit(ctx, b) = got error %v, want nil", err)
		}
	}

	for _, tc := range []struct {
		keep int64
		want string // target of the cut entry; "" for 0
	}{{0, "e9"}, {4, "e5"}, {9, "e0"}, {10, ""}, {100, ""}} {
		id, err := h.s.AuditCut(ctx, "a", tc.keep)
		if err != nil {
			t.Fatalf("AuditCut(ctx, a, %d) = got error %v, want nil", tc.keep, err)
		}
		var got string
		if id != 0 {
			all, _ := h.s.ListAudit(ctx, "a", store.MaxAuditLimit, 0)
			for _, e := range all {
				if e.ID == id {
					got = e.Target
				}
			}
		}
		if got != tc.want || (tc.want == "" && id != 0) {
			t.Fatalf("AuditCut(ctx, a, %d) = got id %d (entry %q), want entry %q", tc.keep, id, got, tc.want)
		}
	}
	if id, err := h.s.AuditCut(ctx, "nobody", 0); err != nil || id != 0 {
		t.Fatalf("AuditCut(ctx, nobody, 0) = got %d, %v, want 0, nil", id, err)
	}

	// By age, in batches: e0..e2 are older than e3.
	byAge := store.AuditPrune{Before: at[3], Limit: 2}
	if n, err := h.s.PruneAudit(ctx, "a", byAge); err != nil || n != 2 {
		t.Fatalf("PruneAudit(ctx, a, before e3, limit 2) = got %d, %v, want 2, nil", n, err)
	}
	if n, err := h.s.PruneAudit(ctx, "a", byAge); err != nil || n != 1 {
		t.Fatalf("PruneAudit(ctx, a, before e3, limit 2) again = got %d, %v, want 1 (the last), nil", n, err)
	}
	if n, err := h.s.PruneAudit(ctx, "a", byAge); err != nil || n != 0 {
		t.Fatalf("PruneAudit(ctx, a, before e3) a third time = got %d, %v, want 0, nil", n, err)
	}
	if got := auditTargets(t, h, "a"); !reflect.DeepEqual(got, targets(3, 10)) {
		t.Fatalf("a's entries after pruning by age = got %v, want %v", got, targets(3, 10))
	}

	// By count: keep the newest 4.
	cut, err := h.s.AuditCut(ctx, "a", 4)
	if err != nil || cut == 0 {
		t.Fatalf("AuditCut(ctx, a, 4) = got %d, %v, want an id, nil", cut, err)
	}
	if n, err := h.s.PruneAudit(ctx, "a", store.AuditPrune{ThroughID: cut, Limit: store.MaxPruneBatch}); err != nil || n != 3 {
		t.Fatalf("PruneAudit(ctx, a, through the cut) = got %d, %v, want 3, nil", n, err)
	}
	if got := auditTargets(t, h, "a"); !reflect.DeepEqual(got, targets(6, 10)) {
		t.Fatalf("a's entries after keeping 4 = got %v, want %v", got, targets(6, 10))
	}

	// Both rules in one call share its limit: age first.
	both := store.AuditPrune{Before: at[7], ThroughID: math.MaxInt64, Limit: 3}
	if n, err := h.s.PruneAudit(ctx, "a", both); err != nil || n != 3 {
		t.Fatalf("PruneAudit(ctx, a, both, limit 3) = got %d, %v, want 3, nil", n, err)
	}
	if got := auditTargets(t, h, "a"); !reflect.DeepEqual(got, targets(9, 10)) {
		t.Fatalf("a's entries after both rules = got %v, want %v", got, targets(9, 10))
	}

	for _, p := range []store.AuditPrune{{Limit: 0}, {Limit: store.MaxPruneBatch + 1}, {ThroughID: -1, Limit: 1}} {
		_, err := h.s.PruneAudit(ctx, "b", store.AuditPrune{Before: at[9].Add(time.Hour), ThroughID: p.ThroughID, Limit: p.Limit})
		wantErr(t, fmt.Sprintf("PruneAudit(ctx, b, %+v)", p), err, store.ErrInvalid)
	}
	_, err = h.s.AuditCut(ctx, "b", -1)
	wantErr(t, "AuditCut(ctx, b, -1)", err, store.ErrInvalid)
	_, err = h.s.PruneAudit(ctx, "Not An Id", store.AuditPrune{Limit: 1})
	wantErr(t, "PruneAudit(ctx, bad id)", err, store.ErrInvalid)
	if n, err := h.s.PruneAudit(ctx, "nobody", store.AuditPrune{ThroughID: math.MaxInt64, Limit: 1}); err != nil || n != 0 {
		t.Fatalf("PruneAudit(ctx, nobody) = got %d, %v, want 0, nil", n, err)
	}
	if got := auditTargets(t, h, "b"); !reflect.DeepEqual(got, targets(0, 10)) {
		t.Fatalf("b's entries after a's pruning and refused calls = got %v, want all 10", got)
	}
}

// testRevokedKeyRetention: PruneRevokedKeys deletes the tenant's keys
// revoked before the time given, never a key in use or another tenant's.
func testRevokedKeyRetention(t *testing.T, h *harness) {
	ctx := t.Context()
	h.tenant(t, "a")
	h.tenant(t, "b")
	for _, k := range []struct{ tenant, id string }{{"a", "k1"}, {"a", "k2"}, {"a", "k3"}, {"a", "k4"}, {"b", "k5"}} {
		h.key(t, k.tenant, k.id)
	}
	revoke := func(tenant, id string) {
		t.Helper()
		if err := h.s.RevokeKey(ctx, tenant, id); err != nil {
			t.Fatalf("RevokeKey(ctx, %q, %q) = got error %v, want nil", tenant, id, err)
		}
	}
	h.clk.Advance(time.Hour)
	revoke("a", "k1")
	revoke("a", "k2")
	revoke("b", "k5")
	h.clk.Advance(time.Hour)
	cut := h.clk.Now()
	revoke("a", "k3")
	if n, err := h.s.PruneRevokedKeys(ctx, "a", cut, 1); err != nil || n != 1 {
		t.Fatalf("PruneRevokedKeys(ctx, a, cut, 1) = got %d, %v, want 1, nil", n, err)
	}
	if n, err := h.s.PruneRevokedKeys(ctx, "a", cut, 10); err != nil || n != 1 {
		t.Fatalf("PruneRevokedKeys(ctx, a, cut, 10) = got %d, %v, want 1, nil", n, err)
	}
	keys, err := h.s.ListKeys(ctx, "a")
	var ids []string
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	if err != nil || !reflect.DeepEqual(ids, []string{"k3", "k4"}) {
		t.Fatalf("ListKeys(ctx, a) after pruning = got %v, %v, want [k3 k4] (revoked after the cut, in use)", ids, err)
	}
	if keys, err := h.s.ListKeys(ctx, "b"); err != nil || len(keys) != 1 {
		t.Fatalf("ListKeys(ctx, b) = got %v, %v, want b's revoked key kept", keys, err)
	}
	for _, limit := range []int{0, store.MaxPruneBatch + 1} {
		_, err := h.s.PruneRevokedKeys(ctx, "b", cut, limit)
		wantErr(t, fmt.Sprintf("PruneRevokedKeys(ctx, b, cut, %d)", limit), err, store.ErrInvalid)
	}
}

// testUsage: Usage counts the audit rows of every tenant and a size that
// grows as rows are written.
func testUsage(t *testing.T, h *harness) {
	ctx := t.Context()
	u0, err := h.s.Usage(ctx)
	if err != nil || u0.Bytes <= 0 || u0.AuditRows != 0 {
		t.Fatalf("Usage(ctx) of an empty store = got %+v, %v, want bytes > 0 and no audit rows", u0, err)
	}
	h.tenant(t, "a")
	h.tenant(t, "b")
	const n = 2000
	for i := range n {
		tenant := []string{"a", "b"}[i%2]
		if _, err := h.s.AppendAudit(ctx, store.AuditEntry{TenantID: tenant, Action: "resource.blocked", Target: fmt.Sprintf("r%d", i), Detail: "a detail of some length to fill pages"}); err != nil {
			t.Fatalf("AppendAudit = got error %v, want nil", err)
		}
	}
	u1, err := h.s.Usage(ctx)
	if err != nil || u1.AuditRows != n || u1.Bytes <= u0.Bytes {
		t.Fatalf("Usage(ctx) after %d audit entries = got %+v, %v, want %d audit rows and more than %d bytes", n, u1, err, n, u0.Bytes)
	}
	if _, err := h.s.PruneAudit(ctx, "a", store.AuditPrune{ThroughID: math.MaxInt64, Limit: store.MaxPruneBatch}); err != nil {
		t.Fatalf("PruneAudit(ctx, a, all) = got error %v, want nil", err)
	}
	if u2, err := h.s.Usage(ctx); err != nil || u2.AuditRows != n/2 {
		t.Fatalf("Usage(ctx) after pruning a = got %+v, %v, want %d audit rows", u2, err, n/2)
	}
}
