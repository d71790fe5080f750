// Package gctune sets a process's garbage-collector target and soft memory
// limit, unless the GOGC and GOMEMLIMIT environment variables set them, as
// they do for any Go program.
//
// repool's server and sidecar have small live heaps next to their
// allocation rates (every call allocates its request, answer and transport
// state), so with Go's default GOGC=100 they collect dozens of times a
// second under load. A higher target trades memory for CPU; a memory limit
// caps the trade.
package gctune

import "runtime/debug"

// DefaultPercent is the collector's target repool's server and sidecar
// run with unless configured: with Go's 100 the sidecar spent about 12 %
// more CPU per call collecting, for 12 MB less peak memory under 32
// callers (BenchmarkSidecarPath, docs/sidecar.md).
const DefaultPercent = 400

// Apply sets the collector's target to gcPercent (debug.SetGCPercent; -1
// is off) unless GOGC is set, and the soft memory limit to memoryLimit
// bytes (debug.SetMemoryLimit) when it is above 0 and GOMEMLIMIT is not
// set. It returns a function that restores the previous settings. The
// settings are process-wide: Apply is for main, and for tests and
// benchmarks that run a main in-process.
func Apply(gcPercent int, memoryLimit int64, getenv func(string) string) (restore func()) {
	var undo []func()
	if getenv("GOGC") == "" {
		old := debug.SetGCPercent(gcPercent)
		undo = append(undo, func() { debug.SetGCPercent(old) })
	}
	if getenv("GOMEMLIMIT") == "" && memoryLimit > 0 {
		old := debug.SetMemoryLimit(memoryLimit)
		undo = append(undo, func() { debug.SetMemoryLimit(old) })
	}
	return func() {
		for _, f := range undo {
			f()
		}
	}
}
