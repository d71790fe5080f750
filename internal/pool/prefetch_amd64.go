package pool

import "unsafe"

// prefetch asks the CPU to bring the cache line at addr closer without
// waiting for it: a hint that never faults and changes nothing.
//
//go:noescape
func prefetch(addr unsafe.Pointer)
