package server

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// TuneRuntime applies the configuration's garbage-collector settings to
// the process and returns a function that restores the previous ones. It
// is for main (the settings are process-wide) and for benchmarks that run
// the server in-process as main would.
//
// The server's live heap is small next to its allocation rate (every call
// allocates its request, response and transport state), so with Go's
// default GOGC=100 it collects dozens of times a second under load. A
// higher GCPercent trades memory for CPU; MemoryLimit caps the trade. The
// GOGC and GOMEMLIMIT environment variables, when set, win over the
// configuration, as they do for any Go program.
func TuneRuntime(c Config, getenv func(string) string) (restore func()) {
	c = c.WithDefaults()
	var undo []func()
	if getenv("GOGC") == "" {
		old := debug.SetGCPercent(c.GCPercent)
		undo = append(undo, func() { debug.SetGCPercent(old) })
	}
	if getenv("GOMEMLIMIT") == "" && c.MemoryLimit > 0 {
		old := debug.SetMemoryLimit(c.MemoryLimit)
		undo = append(undo, func() { debug.SetMemoryLimit(old) })
	}
	return func() {
		for _, f := range undo {
			f()
		}
	}
}

// ParseBytes reads a size in bytes with an optional B, KiB, MiB, GiB or
// TiB suffix (GOMEMLIMIT's syntax).
func ParseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	num, mult := s, int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative number of bytes, optionally with B, KiB, MiB, GiB or TiB", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}
