package server

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/repool/repool/internal/gctune"
)

// TuneRuntime applies the configuration's garbage-collector settings
// (GCPercent, MemoryLimit) to the process as gctune.Apply does, and returns
// a function that restores the previous ones. It is for main and for
// benchmarks that run the server in-process as main would.
func TuneRuntime(c Config, getenv func(string) string) (restore func()) {
	c = c.WithDefaults()
	return gctune.Apply(c.GCPercent, c.MemoryLimit, getenv)
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
