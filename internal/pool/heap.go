package pool

import (
	"cmp"
	"slices"
)

// minHeap is a binary min-heap of values ordered by an int64 key. Unlike
// container/heap it does not box its elements in interfaces, so push and
// pop do not allocate once the slice has grown. It orders ties as
// container/heap does: an entry moves only past a strictly larger key.
type minHeap[T any] []heapEntry[T]

type heapEntry[T any] struct {
	key int64
	val T
}

func (h *minHeap[T]) push(key int64, val T) {
	*h = append(*h, heapEntry[T]{key, val})
	h.up(len(*h) - 1)
}

// due reports whether the smallest key is at most now.
func (h minHeap[T]) due(now int64) bool { return len(h) > 0 && h[0].key <= now }

// pop removes and returns the entry with the smallest key; the heap must
// not be empty.
func (h *minHeap[T]) pop() (key int64, val T) {
	old := *h
	n := len(old) - 1
	old[0], old[n] = old[n], old[0]
	old[:n].down(0)
	*h = old[:n]
	return old[n].key, old[n].val
}

// init establishes the heap order over entries in any order.
func (h minHeap[T]) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h minHeap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if h[j].key >= h[i].key {
			return
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h minHeap[T]) down(i int) {
	n := len(h)
	for {
		j := 2*i + 1
		if j >= n || j < 0 {
			return
		}
		if r := j + 1; r < n && h[r].key < h[j].key {
			j = r
		}
		if h[i].key <= h[j].key {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// Pool.expiries holds lease expiries: the key is the expiry time, the value
// the lease id. Entries are not removed when a lease is released or renewed;
// a popped entry that no longer matches its lease is skipped.
//
// Pool.cooldowns holds quarantine ends: the key is the end of the cooldown,
// the value names the quarantine. The key and gen identify it, so that
// stale entries are skipped.
type cooldown struct {
	res int32
	ctx int32 // -1 for a whole resource
	gen uint32
}

// compactExpiries drops the entries of leases that were released or renewed
// once they outnumber the live leases, so that the heap stays proportional to
// the leases held however many come and go before their expiry. A lease
// renewed back to an expiry it had before has two entries that match it;
// only one is kept, so that afterwards the heap holds exactly one entry per
// live lease. The cost, O(n) (O(n log n) when such repeats exist), is
// amortized over at least n pushes.
func (p *Pool) compactExpiries() {
	if len(p.expiries) <= 2*p.leases.len()+1024 {
		return
	}
	live := p.expiries[:0]
	for _, e := range p.expiries {
		if l, ok := p.leases.get(e.val); ok && l.expires == e.key {
			live = append(live, e)
		}
	}
	if len(live) > p.leases.len() { // some lease has two matching entries
		slices.SortFunc(live, func(a, b heapEntry[uint64]) int { return cmp.Compare(a.val, b.val) })
		live = slices.CompactFunc(live, func(a, b heapEntry[uint64]) bool { return a.val == b.val })
	}
	clear(p.expiries[len(live):])
	p.expiries = live
	live.init()
}
