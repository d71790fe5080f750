package world

import (
	"testing"
	"time"
)

func TestWorldDeterministic(t *testing.T) {
	cfg := Config{Seed: 42, Resources: 30, Tick: time.Second}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	b, _ := New(cfg)
	for range 5000 {
		ra, rb := a.Next(), b.Next()
		if ra != rb {
			t.Fatalf("Next() = %+v and %+v from the same seed", ra, rb)
		}
		for r := range a.Resources() {
			if pa, pb := a.P(r, ra.Context), b.P(r, rb.Context); pa != pb || pa <= 0 || pa >= 1 {
				t.Fatalf("step %d: P(%d) = %v and %v, want equal and within (0, 1)", ra.Step, r, pa, pb)
			}
		}
	}
}
