package pool

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"
)

// idIndex maps resource ids to their slots in Pool.res. It is an
// open-addressing table with linear probing over 8-byte entries, at most
// half full: at 100,000 resources it is 2 MB, small enough to stay in cache,
// where a map[string]int32 is several times larger and keeps a copy of
// every string header beside it. A lookup reads the entries from the id's
// home position until an empty one, and confirms a tag match against the
// resource's own id, so the index stores no strings.
//
// The seed never changes, so an id's tag can be computed without the
// pool's lock, and published holds the current entries for prefetching the
// entry a lookup will read before the lock is taken.
type idIndex struct {
	seed      maphash.Seed
	entries   []idEntry // length a power of two, or 0
	n         int
	published atomic.Pointer[[]idEntry]
}

// idEntry is one slot of an idIndex: the upper 32 bits of the id's hash
// (whose low bits are also the home position) and the resource's slot + 1;
// slot1 == 0 marks an empty entry.
type idEntry struct {
	tag   uint32
	slot1 int32
}

func newIDIndex() idIndex { return idIndex{seed: maphash.MakeSeed()} }

func (x *idIndex) tag(id string) uint32 { return uint32(maphash.String(x.seed, id) >> 32) }

// find returns the slot of id, whose tag is tag, among res, or -1. It
// calls visit, if not nil, with each candidate slot before confirming it,
// so that a caller can start loading what it will need of the resource.
func (x *idIndex) find(id string, tag uint32, res []resource, visit func(slot int32)) int32 {
	for pr := x.probe(tag); ; {
		slot := pr.next()
		if slot < 0 {
			return -1
		}
		if visit != nil {
			visit(slot)
		}
		if res[slot].hasID(id) {
			return slot
		}
	}
}

// prefetch starts loading the entry where the probe for tag begins. It
// needs no lock: it reads the published entries, and if they are replaced
// meanwhile the hint is merely wasted.
func (x *idIndex) prefetch(tag uint32) {
	if e := x.published.Load(); e != nil && len(*e) > 0 {
		prefetch(unsafe.Pointer(&(*e)[tag&uint32(len(*e)-1)]))
	}
}

// idProbe walks the probe run of a tag, yielding the slots whose entries
// carry the tag: candidates that the caller confirms against the id.
type idProbe struct {
	x         *idIndex
	tag, i, m uint32
}

func (x *idIndex) probe(tag uint32) idProbe {
	m := uint32(len(x.entries) - 1)
	return idProbe{x: x, tag: tag, i: tag & m, m: m}
}

// next returns the next candidate slot, or -1 at the end of the run.
func (pr *idProbe) next() int32 {
	if len(pr.x.entries) == 0 {
		return -1
	}
	for {
		e := pr.x.entries[pr.i]
		pr.i = (pr.i + 1) & pr.m
		if e.slot1 == 0 {
			return -1
		}
		if e.tag == pr.tag {
			return e.slot1 - 1
		}
	}
}

// insert adds id at slot; the caller has checked that id is absent.
func (x *idIndex) insert(id string, slot int32) {
	if 2*(x.n+1) > len(x.entries) {
		x.grow()
	}
	x.place(idEntry{tag: x.tag(id), slot1: slot + 1})
	x.n++
}

func (x *idIndex) place(e idEntry) {
	mask := uint32(len(x.entries) - 1)
	i := e.tag & mask
	for x.entries[i].slot1 != 0 {
		i = (i + 1) & mask
	}
	x.entries[i] = e
}

func (x *idIndex) grow() {
	old := x.entries
	entries := make([]idEntry, max(16, 2*len(old)))
	x.entries = entries
	x.published.Store(&entries)
	for _, e := range old {
		if e.slot1 != 0 {
			x.place(e)
		}
	}
}

// remove deletes id, which is at slot. It shifts later entries of the probe
// run back instead of leaving a tombstone, so lookups never slow down with
// churn.
func (x *idIndex) remove(id string, slot int32) {
	if len(x.entries) == 0 {
		return
	}
	tag := x.tag(id)
	mask := uint32(len(x.entries) - 1)
	i := tag & mask
	for x.entries[i].slot1 != slot+1 {
		if x.entries[i].slot1 == 0 {
			return
		}
		i = (i + 1) & mask
	}
	// i is now a hole. An entry after it in the run moves into the hole
	// unless its home lies cyclically in (hole, its position].
	for j := (i + 1) & mask; x.entries[j].slot1 != 0; j = (j + 1) & mask {
		home := x.entries[j].tag & mask
		if (j-home)&mask >= (j-i)&mask {
			x.entries[i] = x.entries[j]
			i = j
		}
	}
	x.entries[i] = idEntry{}
	x.n--
}

// reset empties the index, keeping its seed.
func (x *idIndex) reset() {
	x.entries, x.n = nil, 0
	x.published.Store(nil)
}
