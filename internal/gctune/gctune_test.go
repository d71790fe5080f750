package gctune

import (
	"runtime/debug"
	"testing"
)

// TestApply: the settings reach the runtime, GOGC and GOMEMLIMIT in the
// environment win, and restore puts the old ones back.
func TestApply(t *testing.T) {
	before := debug.SetGCPercent(100)
	beforeLimit := debug.SetMemoryLimit(-1)
	defer debug.SetGCPercent(before)
	defer debug.SetMemoryLimit(beforeLimit)

	restore := Apply(300, 256<<20, func(string) string { return "" })
	if got := debug.SetGCPercent(300); got != 300 {
		t.Errorf("GC percent = %d, want 300", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 256<<20 {
		t.Errorf("memory limit = %d, want %d", got, 256<<20)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent after restore = %d, want 100", got)
	}

	env := map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}
	restore = Apply(300, 256<<20, func(k string) string { return env[k] })
	defer restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent with GOGC set = %d, want it untouched (100)", got)
	}
	if got := debug.SetMemoryLimit(-1); got == 256<<20 {
		t.Errorf("memory limit with GOMEMLIMIT set = %d, want it untouched", got)
	}
}
