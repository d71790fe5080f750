package pool

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// leaseTable holds the live leases by id: an open-addressing table with
// linear probing, at most half full, whose 64-byte entries carry the lease
// itself. Finding a lease reads one entry, one cache line in a large table,
// where a map reads its control word and then the slot, one after the
// other. Lease ids are never 0 (their counter starts at 1), so id 0 marks an
// empty entry. published holds the current entries and shift for
// prefetching without the pool's lock.
type leaseTable struct {
	entries   []leaseEntry // length a power of two, or 0
	shift     uint8        // 64 - log2(len(entries))
	n         int
	published atomic.Pointer[leaseEntries]
}

type leaseEntries struct {
	entries []leaseEntry
	shift   uint8
}

// leaseEntry fills one 64-byte line exactly: leaseRec is 56 bytes
// (TestLeaseEntryIsOneCacheLine). A trailing padding field cannot express
// that: a zero-length one would itself add padding.
type leaseEntry struct {
	id  uint64
	rec leaseRec
}

// home is where id's probe run starts: Fibonacci hashing, so that the
// sequential ids of one epoch spread over the table.
func (t *leaseTable) home(id uint64) uint64 { return fibHash(id, t.shift) }

func fibHash(id uint64, shift uint8) uint64 { return (id * 0x9E3779B97F4A7C15) >> shift }

func (t *leaseTable) len() int { return t.n }

// find returns the position of id's entry, or -1. Id 0 is never a lease:
// it would match an empty entry.
func (t *leaseTable) find(id uint64) int {
	if t.n == 0 || id == 0 {
		return -1
	}
	if i, found := t.locate(id); found {
		return int(i)
	}
	return -1
}

// locate returns the position of id's entry and true, or the empty
// position that ends id's probe run and false. The table is not empty.
func (t *leaseTable) locate(id uint64) (uint64, bool) {
	mask := uint64(len(t.entries) - 1)
	for i := t.home(id); ; i = (i + 1) & mask {
		switch t.entries[i].id {
		case id:
			return i, true
		case 0:
			return i, false
		}
	}
}

// prefetch starts loading the entry where the probe for id begins. It
// needs no lock, like idIndex.prefetch.
func (t *leaseTable) prefetch(id uint64) {
	if e := t.published.Load(); e != nil {
		prefetch(unsafe.Pointer(&e.entries[fibHash(id, e.shift)]))
	}
}

// get returns the lease id.
func (t *leaseTable) get(id uint64) (leaseRec, bool) {
	if i := t.find(id); i >= 0 {
		return t.entries[i].rec, true
	}
	return leaseRec{}, false
}

// put stores the lease id, adding it or replacing it; id is not 0.
func (t *leaseTable) put(id uint64, rec leaseRec) {
	if len(t.entries) > 0 {
		i, found := t.locate(id)
		switch {
		case found:
			t.entries[i].rec = rec
			return
		case 2*(t.n+1) <= len(t.entries):
			t.entries[i] = leaseEntry{id: id, rec: rec}
			t.n++
			return
		}
	}
	t.resize(max(16, 2*len(t.entries)))
	t.place(leaseEntry{id: id, rec: rec})
	t.n++
}

func (t *leaseTable) place(e leaseEntry) {
	i, _ := t.locate(e.id)
	t.entries[i] = e
}

// resize moves the leases to a table of size entries (a power of two more
// than twice the leases).
func (t *leaseTable) resize(size int) {
	old := t.entries
	t.entries = make([]leaseEntry, size)
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	t.published.Store(&leaseEntries{entries: t.entries, shift: t.shift})
	for i := range old {
		if old[i].id != 0 {
			t.place(old[i])
		}
	}
}

// del removes the lease id if present. Later entries of its probe run
// shift back, so that no tombstones slow down lookups.
func (t *leaseTable) del(id uint64) {
	i := t.find(id)
	if i < 0 {
		return
	}
	mask := uint64(len(t.entries) - 1)
	hole := uint64(i)
	for j := (hole + 1) & mask; t.entries[j].id != 0; j = (j + 1) & mask {
		if (j-t.home(t.entries[j].id))&mask >= (j-hole)&mask {
			t.entries[hole] = t.entries[j]
			hole = j
		}
	}
	t.entries[hole] = leaseEntry{}
	t.n--
	// Give back the memory of a burst once it is over: shrink to a quarter
	// full when an eighth full.
	if len(t.entries) > 16 && 8*t.n < len(t.entries) {
		t.resize(len(t.entries) / 2)
	}
}

// each calls f for every lease. f must not change the table.
func (t *leaseTable) each(f func(id uint64, rec leaseRec)) {
	for i := range t.entries {
		if e := &t.entries[i]; e.id != 0 {
			f(e.id, e.rec)
		}
	}
}

func (t *leaseTable) reset() {
	t.entries, t.shift, t.n = nil, 0, 0
	t.published.Store(nil)
}
