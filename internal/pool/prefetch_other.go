//go:build !amd64

package pool

import "unsafe"

// prefetch is a no-op where the pool has no prefetch instruction wired.
func prefetch(unsafe.Pointer) {}
