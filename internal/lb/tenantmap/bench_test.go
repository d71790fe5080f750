package tenantmap_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/repool/repool/internal/lb/tenantmap"
)

// BenchmarkSync measures one pass of the Syncer against the real HAProxy
// holding n tenants on non-default groups: "unchanged" is a tick with the
// same placements (no HAProxy command), "move" is a tick after one tenant
// moved (file rewrite, set map, get map), "verify" is the periodic full
// check (show map). The fake source's copy of the placements is part of
// each pass, as the store's listing would be.
func BenchmarkSync(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		c := startGroupsTB(b)
		pl := make(map[string]string, n)
		for i := range n {
			pl[fmt.Sprintf("tenant-%06d", i)] = []string{"a", "b"}[i%2]
		}
		src := &fakeSource{pl: pl}
		s, err := tenantmap.New(tenantmap.Config{Source: src, Socket: c.Socket, File: c.inv.HAProxy.TenantMap, Verify: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if err := s.Sync(ctx); err != nil {
			b.Fatalf("first Sync of %d tenants: %v", n, err)
		}
		b.Run(fmt.Sprintf("tenants=%d/unchanged", n), func(b *testing.B) {
			for b.Loop() {
				if err := s.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("tenants=%d/move", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				id := "tenant-000000"
				pl[id] = []string{"a", "b"}[i%2]
				src.set(pl, nil)
				if err := s.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		s.Close()
		fs := &printSource{fakeSource: src, print: "v1"}
		f, err := tenantmap.New(tenantmap.Config{Source: fs, Socket: c.Socket, File: c.inv.HAProxy.TenantMap, Verify: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("tenants=%d/unchanged-fingerprint", n), func(b *testing.B) {
			for b.Loop() {
				if err := f.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		f.Close()
		b.Run(fmt.Sprintf("tenants=%d/verify", n), func(b *testing.B) {
			for b.Loop() {
				v, err := tenantmap.New(tenantmap.Config{Source: src, Socket: c.Socket, File: c.inv.HAProxy.TenantMap})
				if err != nil {
					b.Fatal(err)
				}
				if err := v.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				v.Close()
			}
		})
	}
}
