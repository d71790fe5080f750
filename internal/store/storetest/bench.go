package storetest

import (
	"testing"

	"github.com/repool/repool/internal/store"
)

// benchTenant creates the tenant the benchmarks write to and saves one Full
// checkpoint, so that every measured save replaces or updates existing rows
// (the steady state of a running server).
func benchTenant(b *testing.B, s store.Store, full store.Checkpoint) {
	b.Helper()
	if _, err := s.CreateTenant(b.Context(), store.Tenant{ID: "bench", Name: "bench"}); err != nil {
		b.Fatalf("CreateTenant(ctx, bench) = got error %v, want nil", err)
	}
	if err := s.SaveCheckpoint(b.Context(), "bench", full); err != nil {
		b.Fatalf("SaveCheckpoint(ctx, bench, full) = got error %v, want nil", err)
	}
}

// BenchmarkFull measures one Full checkpoint of resources resources with
// contexts cells each per op, on an empty store s.
func BenchmarkFull(b *testing.B, s store.Store, resources, contexts int) {
	full := Synthetic(resources, contexts, 1)
	benchTenant(b, s, full)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.SaveCheckpoint(b.Context(), "bench", full); err != nil {
			b.Fatalf("SaveCheckpoint(ctx, bench, full) = got error %v, want nil", err)
		}
	}
	b.ReportMetric(float64(resources+len(full.Cells))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkIncremental measures one incremental checkpoint per op that
// changes every nth cell (and those cells' resources) of a stored Full
// checkpoint of resources×contexts, on an empty store s.
func BenchmarkIncremental(b *testing.B, s store.Store, resources, contexts, n int) {
	full := Synthetic(resources, contexts, 1)
	benchTenant(b, s, full)
	inc := Touch(full, n)
	b.ReportAllocs()
	for b.Loop() {
		inc.FencingHWM++
		if err := s.SaveCheckpoint(b.Context(), "bench", inc); err != nil {
			b.Fatalf("SaveCheckpoint(ctx, bench, incremental) = got error %v, want nil", err)
		}
	}
	b.ReportMetric(float64(len(inc.Cells)), "cells/op")
}

// BenchmarkLoad measures LoadCheckpoint of a stored Full checkpoint of
// resources×contexts (the restore path), on an empty store s.
func BenchmarkLoad(b *testing.B, s store.Store, resources, contexts int) {
	benchTenant(b, s, Synthetic(resources, contexts, 1))
	b.ReportAllocs()
	for b.Loop() {
		st, err := s.LoadCheckpoint(b.Context(), "bench")
		if err != nil || len(st.Cells) != resources*contexts {
			b.Fatalf("LoadCheckpoint(ctx, bench) = got %d cells, %v, want %d, nil", len(st.Cells), err, resources*contexts)
		}
	}
}
