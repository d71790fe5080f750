package pool

// expiryHeap orders lease expiries. Entries are not removed when a lease is
// released or renewed; a popped entry that no longer matches its lease is
// skipped.
type expiryHeap []expiry

type expiry struct {
	at int64
	id uint64
}

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// cooldownHeap orders quarantine ends; ctx is -1 for a whole resource. gen
// and until identify the quarantine so that stale entries are skipped.
type cooldownHeap []cooldown

type cooldown struct {
	until int64
	res   int32
	ctx   int32
	gen   uint32
}

func (h cooldownHeap) Len() int           { return len(h) }
func (h cooldownHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h cooldownHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cooldownHeap) Push(x any)        { *h = append(*h, x.(cooldown)) }
func (h *cooldownHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// push and pop avoid the interface boxing of container/heap on
// the hot path: heap.Push boxes its argument, which allocates.
func (h *expiryHeap) push(e expiry) {
	*h = append(*h, e)
	up(*h, len(*h)-1)
}

func up(h expiryHeap, j int) {
	for {
		i := (j - 1) / 2
		if i == j || h[j].at >= h[i].at {
			return
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h *expiryHeap) pop() expiry {
	old := *h
	n := len(old) - 1
	old[0], old[n] = old[n], old[0]
	down(old[:n], 0)
	e := old[n]
	*h = old[:n]
	return e
}

func down(h expiryHeap, i int) {
	n := len(h)
	for {
		j := 2*i + 1
		if j >= n || j < 0 {
			return
		}
		if r := j + 1; r < n && h[r].at < h[j].at {
			j = r
		}
		if h[i].at <= h[j].at {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// heapUpCooldown restores the heap order after an append.
func heapUpCooldown(h cooldownHeap) {
	j := len(h) - 1
	for j > 0 {
		i := (j - 1) / 2
		if h[j].until >= h[i].until {
			return
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

// compactExpiries drops the entries of leases that were released or renewed
// once they outnumber the live leases, so that the heap stays proportional to
// the leases held however many come and go before their expiry. The cost is
// linear but amortized over at least as many pushes.
func (p *Pool) compactExpiries() {
	if len(p.expiries) <= 2*len(p.leases)+1024 {
		return
	}
	live := p.expiries[:0]
	for _, e := range p.expiries {
		if l, ok := p.leases[e.id]; ok && l.expires == e.at {
			live = append(live, e)
		}
	}
	clear(p.expiries[len(live):])
	p.expiries = live
	for i := len(live)/2 - 1; i >= 0; i-- {
		down(live, i)
	}
}
