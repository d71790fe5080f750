package pool

import "unsafe"

// Cells live in two places. The cells of the first maxDense contexts a pool
// interns are dense: the cell of resource idx for context ctx is
// dense[idx*stride+ctx], where stride counts the dense contexts that have
// cells. Its address follows from the resource's slot alone, so that
// Report and Acquire load a resource and its cell at the same time instead
// of one after the other. The cells of later contexts are sparse, found
// through sparseIdx.
//
// A slot names a cell in either place: below sparseBase it indexes dense,
// from sparseBase on it indexes sparse.
//
// Memory: a pool whose resources have cells in k dense contexts keeps
// k cells per resource, used or not; a tenant with few contexts (the usual
// case: one per target site) uses nearly all of them.

const (
	maxDense   = 8
	sparseBase = 1 << 30
)

type cellKey struct{ res, ctx int32 }

type cell struct {
	c          counts
	q          quarantine
	consecFail int32
	live       bool // the slot holds a cell
	dirty      bool // the slot is listed in Pool.dirtyCells
	lead       bool // the resource is on the context's leader board
	lat        latency
	recent     recent
}

// prefetchCell starts loading c: its first and last bytes, as a cell may
// straddle two cache lines.
func prefetchCell(c *cell) {
	prefetch(unsafe.Pointer(c))
	prefetch(unsafe.Add(unsafe.Pointer(c), unsafe.Sizeof(cell{})-1))
}

// cellAt returns the cell in slot.
func (p *Pool) cellAt(slot int32) *cell {
	if slot < sparseBase {
		return &p.dense[slot]
	}
	return &p.sparse[slot-sparseBase]
}

// keyOf returns the resource and context of the cell in slot.
func (p *Pool) keyOf(slot int32) cellKey {
	if slot < sparseBase {
		return cellKey{slot / p.stride, slot % p.stride}
	}
	return p.sparseKeys[slot-sparseBase]
}

// denseSlot returns where resource idx keeps its cell for dense context ctx
// (ctx < p.stride).
func (p *Pool) denseSlot(idx, ctx int32) int32 { return idx*p.stride + ctx }

// findCell returns the slot of the resource's cell for ctx, or -1.
func (p *Pool) findCell(idx, ctx int32) int32 {
	switch {
	case ctx < p.stride:
		if slot := p.denseSlot(idx, ctx); p.dense[slot].live {
			return slot
		}
	case ctx >= maxDense:
		if slot, ok := p.sparseIdx[cellKey{idx, ctx}]; ok {
			return slot
		}
	}
	return -1
}

// newCell stores c as the cell of (idx, ctx), which has none, and returns
// its slot.
func (p *Pool) newCell(idx, ctx int32, c cell) int32 {
	c.live = true
	var slot int32
	if ctx < maxDense {
		if ctx >= p.stride {
			p.widen(ctx + 1)
		}
		slot = p.denseSlot(idx, ctx)
	} else {
		if n := len(p.freeCells); n > 0 {
			slot = p.freeCells[n-1]
			p.freeCells = p.freeCells[:n-1]
			p.sparseKeys[slot-sparseBase] = cellKey{idx, ctx}
		} else {
			slot = sparseBase + int32(len(p.sparse))
			p.sparse = append(p.sparse, cell{})
			p.sparseKeys = append(p.sparseKeys, cellKey{idx, ctx})
		}
		p.sparseIdx[cellKey{idx, ctx}] = slot
	}
	dst := p.cellAt(slot)
	c.dirty = dst.dirty // still listed in dirtyCells if set
	*dst = c
	p.res[idx].ncells++
	p.ctxs[ctx].cells++
	if c.q.state != qNone {
		p.ctxs[ctx].nquar++
	}
	p.ncells++
	return slot
}

// widen lays the dense cells out again with stride n > p.stride: a pool
// does this at most maxDense times, when it first stores a cell for a new
// dense context. Listed dirty slots move with their cells.
func (p *Pool) widen(n int32) {
	old := p.stride
	dense := make([]cell, len(p.res)*int(n))
	for idx := range int32(len(p.res)) {
		copy(dense[idx*n:idx*n+old], p.dense[idx*old:idx*old+old])
	}
	for i, slot := range p.dirtyCells {
		if slot < sparseBase {
			p.dirtyCells[i] = slot/old*n + slot%old
		}
	}
	p.dense, p.stride = dense, n
}

// growDense gives a newly appended resource slot its row of dense cells.
func (p *Pool) growDense() {
	var row [maxDense]cell
	p.dense = append(p.dense, row[:p.stride]...)
}

// dropCells frees every cell of resource idx.
func (p *Pool) dropCells(idx int32) {
	r := &p.res[idx]
	if r.ncells == 0 {
		return
	}
	for ctx := range p.stride {
		if c := &p.dense[p.denseSlot(idx, ctx)]; c.live {
			if c.q.state != qNone {
				p.ctxs[ctx].nquar--
			}
			*c = cell{dirty: c.dirty}
			r.ncells--
			p.ctxs[ctx].cells--
			p.ncells--
		}
	}
	for ctx := int32(maxDense); r.ncells > 0 && ctx < int32(len(p.ctxs)); ctx++ {
		key := cellKey{idx, ctx}
		if slot, ok := p.sparseIdx[key]; ok {
			delete(p.sparseIdx, key)
			c := p.cellAt(slot)
			if c.q.state != qNone {
				p.ctxs[ctx].nquar--
			}
			*c = cell{dirty: c.dirty}
			p.freeCells = append(p.freeCells, slot)
			r.ncells--
			p.ncells--
			if p.ctxs[ctx].cells--; p.ctxs[ctx].cells == 0 {
				p.freeContext(ctx)
			}
		}
	}
}

// markCell adds the cell to the change set. c.dirty is set exactly while
// slot is listed in dirtyCells, whether or not the slot holds a cell: it is
// cleared only by clearChangesLocked.
func (p *Pool) markCell(slot int32) {
	if c := p.cellAt(slot); !c.dirty {
		c.dirty = true
		p.dirtyCells = append(p.dirtyCells, slot)
	}
}
