package pool

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// checkInvariants verifies the pool's internal bookkeeping: every live
// resource's active count equals its live leases and never exceeds its
// capacity, and the available set holds exactly the resources that can take
// a normal lease.
func (p *Pool) checkInvariants() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	held := make(map[int32]int32)
	var bad error
	p.leases.each(func(id uint64, l leaseRec) {
		if !p.res[l.res].live || p.res[l.res].gen != l.gen {
			bad = fmt.Errorf("lease %d points at a dead resource slot", id)
		}
		held[l.res]++
		if got, ok := p.leases.get(id); !ok || got != l {
			bad = fmt.Errorf("lease %d is in the table but get finds %v, %v", id, got, ok)
		}
	})
	if bad != nil {
		return bad
	}
	// A probe lease of the current round (its probeOf is the quarantine's
	// cooldown end) is out only while its cell or resource is probing, and
	// there is at most one.
	type round struct {
		res, ctx int32
		until    int64
	}
	probes := map[round]int{}
	p.leases.each(func(id uint64, l leaseRec) {
		var q quarantine
		ctx := int32(-1)
		switch l.probe {
		case probeNone:
			return
		case probeWhole:
			q = p.res[l.res].q
		case probeCell:
			c, ok := p.findContext(l.context)
			slot := int32(-1)
			if ok {
				slot = p.findCell(l.res, c)
			}
			if slot < 0 {
				return
			}
			q, ctx = p.cellAt(slot).q, c
		}
		if q.until != l.probeOf || q.state == qNone || q.state == qBlocked {
			return // an earlier round's probe
		}
		k := round{l.res, ctx, q.until}
		if probes[k]++; q.state != qProbing || probes[k] > 1 {
			bad = fmt.Errorf("resource %q context %d: %d probe leases of the current round out in state %d", p.res[l.res].id, ctx, probes[k], q.state)
		}
	})
	if bad != nil {
		return bad
	}
	inAvail := 0
	for idx := range p.res {
		r := &p.res[idx]
		if !r.live {
			if r.availPos >= 0 {
				return fmt.Errorf("dead slot %d is available", idx)
			}
			continue
		}
		if r.active != held[int32(idx)] {
			return fmt.Errorf("resource %q: active %d, leases %d", r.id, r.active, held[int32(idx)])
		}
		if r.active > r.capacity && !p.overbooked { // only Restore may overbook
			return fmt.Errorf("resource %q: %d leases over capacity %d", r.id, r.active, r.capacity)
		}
		want := !r.retired && r.active < r.capacity && r.q.state == qNone
		if got := r.availPos >= 0; got != want {
			return fmt.Errorf("resource %q: available %v, want %v", r.id, got, want)
		}
		if r.availPos >= 0 {
			inAvail++
			if p.avail[r.availPos] != int32(idx) {
				return fmt.Errorf("resource %q: avail position %d holds %d", r.id, r.availPos, p.avail[r.availPos])
			}
		}
	}
	// The id index finds exactly the live resources, each at its own slot.
	live := 0
	for idx := range p.res {
		if r := &p.res[idx]; r.live {
			live++
			if got := p.ids.find(r.id, p.ids.tag(r.id), p.res, nil); got != int32(idx) {
				return fmt.Errorf("resource %q at slot %d: id index finds %d", r.id, idx, got)
			}
		}
	}
	if p.ids.n != live || live != p.nresource {
		return fmt.Errorf("id index holds %d entries, %d resources are live, nresource %d", p.ids.n, live, p.nresource)
	}
	if inAvail != len(p.avail) {
		return fmt.Errorf("avail holds %d entries, %d resources are available", len(p.avail), inAvail)
	}
	// The change set lists each slot once, exactly the slots marked dirty.
	listed := make(map[int32]bool, len(p.dirtyRes))
	for _, idx := range p.dirtyRes {
		if listed[idx] || !p.res[idx].dirty {
			return fmt.Errorf("resource slot %d listed twice or listed but not dirty", idx)
		}
		listed[idx] = true
	}
	for idx := range p.res {
		if p.res[idx].dirty && !listed[int32(idx)] {
			return fmt.Errorf("resource slot %d dirty but not listed", idx)
		}
	}
	clear(listed)
	for _, slot := range p.dirtyCells {
		if listed[slot] || !p.cellAt(slot).dirty {
			return fmt.Errorf("cell slot %d listed twice or listed but not dirty", slot)
		}
		listed[slot] = true
	}
	ncells := 0
	perCtx := map[int32]int{}
	for _, region := range []struct {
		cells []cell
		base  int32
	}{{p.dense, 0}, {p.sparse, sparseBase}} {
		for i := range region.cells {
			slot := region.base + int32(i)
			c := &region.cells[i]
			if c.dirty && !listed[slot] {
				return fmt.Errorf("cell slot %d dirty but not listed", slot)
			}
			if !c.live {
				continue
			}
			ncells++
			k := p.keyOf(slot)
			perCtx[k.ctx]++
			if !p.res[k.res].live {
				return fmt.Errorf("cell slot %d belongs to dead resource slot %d", slot, k.res)
			}
			if got := p.findCell(k.res, k.ctx); got != slot {
				return fmt.Errorf("cell (%d, %d) is in slot %d, findCell says %d", k.res, k.ctx, slot, got)
			}
		}
	}
	// Each context counts its cells; the interned names are exactly the
	// contexts in use, and a freed one (sparse, no cells) is blank.
	free := map[int32]bool{}
	for _, id := range p.freeCtxs {
		free[id] = true
	}
	for id, cs := range p.ctxs {
		ctx := int32(id)
		if cs.cells != perCtx[ctx] {
			return fmt.Errorf("context %d %q counts %d cells, holds %d", ctx, cs.name, cs.cells, perCtx[ctx])
		}
		switch {
		case free[ctx] && (ctx < maxDense || cs.name != "" || cs.cells != 0):
			return fmt.Errorf("freed context %d is dense, named %q or has %d cells", ctx, cs.name, cs.cells)
		case !free[ctx] && ctx >= maxDense && cs.cells == 0:
			return fmt.Errorf("sparse context %d %q has no cells but is not freed", ctx, cs.name)
		case !free[ctx]:
			if got, ok := p.findContext(cs.name); !ok || got != ctx {
				return fmt.Errorf("context %d %q: findContext says %d, %v", ctx, cs.name, got, ok)
			}
		}
	}
	if len(p.ctxIDs) != len(p.ctxs)-len(p.freeCtxs) {
		return fmt.Errorf("%d interned names for %d contexts in use", len(p.ctxIDs), len(p.ctxs)-len(p.freeCtxs))
	}
	// c.lead is set exactly on the cells whose resource is on the board.
	onBoard := 0
	for ctx, cs := range p.ctxs {
		for i := 0; i < cs.nlead; i++ {
			slot := p.findCell(cs.leaders[i].res, int32(ctx))
			if slot < 0 || !p.cellAt(slot).lead {
				return fmt.Errorf("context %q: leader %d has no cell marked lead", cs.name, cs.leaders[i].res)
			}
		}
		onBoard += cs.nlead
	}
	for _, cells := range [][]cell{p.dense, p.sparse} {
		for i := range cells {
			if cells[i].lead {
				onBoard--
			}
		}
	}
	if onBoard != 0 {
		return fmt.Errorf("%d more leader board entries than cells marked lead", onBoard)
	}
	if len(p.dense) != len(p.res)*int(p.stride) {
		return fmt.Errorf("dense holds %d cells, want %d resource slots × stride %d", len(p.dense), len(p.res), p.stride)
	}
	perRes := 0
	for idx := range p.res {
		perRes += int(p.res[idx].ncells)
	}
	if ncells != p.ncells || perRes != p.ncells || len(p.sparseIdx)+len(p.freeCells) != len(p.sparse) {
		return fmt.Errorf("cells: %d live, ncells %d, per resource %d; sparse %d = index %d + free %d?", ncells, p.ncells, perRes, len(p.sparse), len(p.sparseIdx), len(p.freeCells))
	}
	// The quarantine and retirement counts match the resources and cells.
	blocked, retired := 0, 0
	quar := make([]int, len(p.ctxs))
	for idx := range p.res {
		r := &p.res[idx]
		if !r.live {
			continue
		}
		if r.q.state != qNone {
			blocked++
		}
		if r.retired {
			retired++
			if r.availPos >= 0 || p.retiredWhy[int32(idx)] == "" {
				return fmt.Errorf("retired resource %q is available (%d) or has no reason (%q)", r.id, r.availPos, p.retiredWhy[int32(idx)])
			}
		}
		for ctx := range p.ctxs {
			if slot := p.findCell(int32(idx), int32(ctx)); slot >= 0 && p.cellAt(slot).q.state != qNone {
				quar[ctx]++
			}
		}
	}
	if blocked != p.nblocked || retired != len(p.retiredWhy) {
		return fmt.Errorf("%d resources quarantined as a whole, nblocked %d; %d retired, %d reasons", blocked, p.nblocked, retired, len(p.retiredWhy))
	}
	for ctx, cs := range p.ctxs {
		if quar[ctx] != cs.nquar {
			return fmt.Errorf("context %q: %d cells quarantined, nquar %d", cs.name, quar[ctx], cs.nquar)
		}
	}
	return nil
}

// TestResourceHotFields pins what Acquire reads for every candidate to a
// resource's first resourceHot bytes, at most 64, so that they lie on at
// most two cache lines, the two warmCandidates prefetches. It does not
// claim one line: a resource is not a multiple of 64 bytes.
func TestResourceHotFields(t *testing.T) {
	var r resource
	if resourceHot > 64 {
		t.Fatalf("resourceHot = %d, want at most 64", resourceHot)
	}
	hot := []struct {
		name      string
		off, size uintptr
	}{
		{"capacity", unsafe.Offsetof(r.capacity), unsafe.Sizeof(r.capacity)},
		{"active", unsafe.Offsetof(r.active), unsafe.Sizeof(r.active)},
		{"availPos", unsafe.Offsetof(r.availPos), unsafe.Sizeof(r.availPos)},
		{"ncells", unsafe.Offsetof(r.ncells), unsafe.Sizeof(r.ncells)},
		{"agg", unsafe.Offsetof(r.agg), unsafe.Sizeof(r.agg)},
		{"labels", unsafe.Offsetof(r.labels), unsafe.Sizeof(r.labels)},
	}
	for _, f := range hot {
		if end := f.off + f.size; end > resourceHot {
			t.Errorf("resource.%s ends at byte %d, beyond resourceHot = %d", f.name, end, resourceHot)
		}
	}
}

// TestResourceIsTwoCacheLines pins the resource's size, which makes every
// resource of a page-aligned slice a whole, aligned pair of cache lines.
func TestResourceIsTwoCacheLines(t *testing.T) {
	if size := unsafe.Sizeof(resource{}); size != 128 {
		t.Fatalf("resource is %d bytes, want 128", size)
	}
	if off := unsafe.Offsetof(resource{}.q); off < 64 {
		t.Fatalf("resource.q at byte %d: the identifying fields should start the second line", off)
	}
}

func TestResourceHasID(t *testing.T) {
	for _, id := range []string{"a", "proxy-000001", strings.Repeat("x", idInline), strings.Repeat("x", idInline+1), strings.Repeat("y", 256)} {
		r := resource{id: id}
		copy(r.idHead[:], id)
		if !r.hasID(strings.Clone(id)) {
			t.Errorf("hasID(%q) = false", id)
		}
		for _, other := range []string{id + "z", id[:len(id)-1], "Q" + id[1:], id[:len(id)-1] + "Q"} {
			if r.hasID(other) {
				t.Errorf("resource %q: hasID(%q) = true", id, other)
			}
		}
	}
}

func TestLeaseEntryIsOneCacheLine(t *testing.T) {
	if size := unsafe.Sizeof(leaseEntry{}); size != 64 {
		t.Fatalf("leaseEntry is %d bytes, want 64", size)
	}
}

// durable models what a checkpoint store keeps of a pool: the resources
// and cells of a Snapshot, then every Changes replayed onto it as the
// checkpointer writes them (removals first).
type durable struct {
	res   map[string]ResourceState
	cells map[durableCell]CellState
}

type durableCell struct{ res, ctx string }

func newDurable(s Snapshot) *durable {
	d := &durable{res: map[string]ResourceState{}, cells: map[durableCell]CellState{}}
	d.load(s)
	return d
}

// load replaces the model with s.
func (d *durable) load(s Snapshot) {
	clear(d.res)
	clear(d.cells)
	for _, r := range s.Resources {
		d.res[r.ID] = r
	}
	for _, c := range s.Cells {
		d.cells[durableCell{c.Resource, c.Context}] = c
	}
}

// apply replays ch; a change set that lists a resource or cell twice is an
// error (the store refuses it).
func (d *durable) apply(ch Changes) error {
	for _, id := range ch.Removed {
		delete(d.res, id)
		for k := range d.cells {
			if k.res == id {
				delete(d.cells, k)
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range ch.Resources {
		if seen[r.ID] {
			return fmt.Errorf("resource %q listed twice", r.ID)
		}
		seen[r.ID] = true
		d.res[r.ID] = r
	}
	seenCells := map[durableCell]bool{}
	for _, c := range ch.Cells {
		k := durableCell{c.Resource, c.Context}
		if seenCells[k] {
			return fmt.Errorf("cell %v listed twice", k)
		}
		seenCells[k] = true
		d.cells[k] = c
	}
	return nil
}

// matches returns an error unless the model holds exactly s's resources
// and cells.
func (d *durable) matches(s Snapshot) error {
	want := newDurable(s)
	if !reflect.DeepEqual(d.res, want.res) {
		return fmt.Errorf("replayed resources differ from the snapshot:\n got  %+v\n want %+v", d.res, want.res)
	}
	if !reflect.DeepEqual(d.cells, want.cells) {
		return fmt.Errorf("replayed cells differ from the snapshot:\n got  %+v\n want %+v", d.cells, want.cells)
	}
	return nil
}

// leaseLive reports whether lease id is live with token: in the table, not
// past its expiry, with that token.
func (p *Pool) leaseLive(id, token uint64) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	l, ok := p.leases.get(id)
	return ok && l.token == token && l.expires > p.clock.Now().UnixNano()
}
