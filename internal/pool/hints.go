package pool

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// leaseHints remembers, for recent lease ids, the slot of the leased
// resource: a direct-mapped table indexed by the low bits of the lease's
// sequence number, 8 bytes an entry, so that the entries of the live leases
// are dense enough to stay in cache where the lease table's do not. A
// report that names a lease reads its hint before taking the pool's lock
// and starts loading the resource at once, so the resource's cache miss
// overlaps the lock and the lookups that confirm it. A hint is only ever
// used for prefetching: a stale or overwritten one costs a wasted load,
// never a wrong answer.
//
// Entries are written under the pool's lock and read without it, so both
// go through atomics, and the table is published through an atomic pointer
// when it is replaced.
type leaseHints struct {
	table atomic.Pointer[[]atomic.Uint64]
}

// hint packs the low 32 bits of a lease's sequence number with its slot.
func hint(seq uint64, slot int32) uint64 { return seq<<32 | uint64(uint32(slot)) }

// put records that lease sequence number seq is on slot. live is the number
// of live leases: the table is kept between two and sixteen times that
// size (at least 64), like the lease table growing with a burst and
// shrinking after it.
func (h *leaseHints) put(seq uint64, slot int32, live int) {
	t := h.table.Load()
	if want := max(64, 2*live); t == nil || len(*t) < want || len(*t) > 8*want {
		n := 1 << bits.Len(uint(want-1)) // the power of two >= want
		fresh := make([]atomic.Uint64, n)
		if t != nil {
			for i := range *t {
				if e := (*t)[i].Load(); e != 0 {
					fresh[(e>>32)&uint64(n-1)].Store(e)
				}
			}
		}
		t = &fresh
		h.table.Store(t)
	}
	(*t)[seq&uint64(len(*t)-1)].Store(hint(seq, slot))
}

// slot returns the hinted slot of lease sequence number seq, or -1.
func (h *leaseHints) slot(seq uint64) int32 {
	t := h.table.Load()
	if t == nil {
		return -1
	}
	e := (*t)[seq&uint64(len(*t)-1)].Load()
	if e == 0 || uint32(e>>32) != uint32(seq) {
		return -1
	}
	return int32(uint32(e))
}

func (h *leaseHints) reset() { h.table.Store(nil) }

// prefetchResource starts loading both lines of resource slot, if the
// published resource array has it. It needs no lock.
func (p *Pool) prefetchResource(slot int32) {
	if res := p.resView.Load(); res != nil && slot >= 0 && int(slot) < len(*res) {
		r := unsafe.Pointer(&(*res)[slot])
		prefetch(r)
		prefetch(unsafe.Add(r, 64))
	}
}
