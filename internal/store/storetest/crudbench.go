package storetest

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/store"
)

// BenchmarkCRUD measures the tenant, key, limit and audit methods one call
// per op, on an empty store s: reads of a tenant with 10 keys and limits,
// and writes that add a key or an audit entry, or change limits or status.
func BenchmarkCRUD(b *testing.B, s store.Store) {
	ctx := b.Context()
	if _, err := s.CreateTenant(ctx, store.Tenant{ID: "bench", Name: "bench"}); err != nil {
		b.Fatalf("CreateTenant(ctx, bench) = got error %v, want nil", err)
	}
	digest := func(i int) []byte { d := sha256.Sum256(fmt.Appendf(nil, "key-%d", i)); return d[:] }
	for i := range 10 {
		k := store.Key{ID: fmt.Sprintf("k%d", i), TenantID: "bench", Name: "k", Prefix: "rp_", Digest: digest(i)}
		if _, err := s.CreateKey(ctx, k); err != nil {
			b.Fatalf("CreateKey(ctx, %s) = got error %v, want nil", k.ID, err)
		}
	}
	var lim store.Limits
	lim.Values.Set(limits.Burst, 10)
	if err := s.PutLimits(ctx, "bench", lim); err != nil {
		b.Fatalf("PutLimits(ctx, bench) = got error %v, want nil", err)
	}
	n := 10
	for _, bm := range []struct {
		name string
		op   func() error
	}{
		{"GetTenant", func() error { _, err := s.GetTenant(ctx, "bench"); return err }},
		{"ListTenants", func() error { _, err := s.ListTenants(ctx, store.TenantFilter{}); return err }},
		{"LookupKey", func() error { _, _, err := s.LookupKey(ctx, digest(3)); return err }},
		{"ListKeys", func() error { _, err := s.ListKeys(ctx, "bench"); return err }},
		{"GetLimits", func() error { _, err := s.GetLimits(ctx, "bench"); return err }},
		{"PutLimits", func() error { return s.PutLimits(ctx, "bench", lim) }},
		{"SetTenantStatus", func() error {
			if _, err := s.SetTenantStatus(ctx, "bench", store.StatusActive, store.StatusSuspended); err != nil {
				return err
			}
			_, err := s.SetTenantStatus(ctx, "bench", store.StatusSuspended, store.StatusActive)
			return err
		}},
		{"CreateKey", func() error {
			n++
			_, err := s.CreateKey(ctx, store.Key{ID: fmt.Sprintf("k%d", n), TenantID: "bench", Name: "k", Prefix: "rp_", Digest: digest(n)})
			return err
		}},
		{"AppendAudit", func() error {
			_, err := s.AppendAudit(ctx, store.AuditEntry{TenantID: "bench", Actor: "bench", Action: "bench.op", Target: "bench"})
			return err
		}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bm.op(); err != nil {
					b.Fatalf("%s = got error %v, want nil", bm.name, err)
				}
			}
		})
	}
}
