package pool

// Cells live in a slab (Pool.cellSlab) indexed by slot. Every cell is found
// through Pool.cellIdx; the first inlineCells cells of a resource are also
// found through the resource's inline table, which Acquire reads on the
// resource's own cache lines instead of probing a large map.

const inlineCells = 6

type cellKey struct{ res, ctx int32 }

type cell struct {
	c          counts
	consecFail int32
	res, ctx   int32 // res is -1 for a free slot
	q          quarantine
	dirty      bool
}

// findCell returns the slot of the resource's cell for ctx, or -1.
func (p *Pool) findCell(r *resource, idx, ctx int32) int32 {
	for i := range r.inline {
		if r.inline[i].ctx == ctx+1 {
			return r.inline[i].slot
		}
	}
	if r.ncells <= inlineCells {
		return -1
	}
	if slot, ok := p.cellIdx[cellKey{idx, ctx}]; ok {
		return slot
	}
	return -1
}

// newCell stores c as the cell of (idx, ctx) and returns its slot.
func (p *Pool) newCell(idx, ctx int32, c cell) int32 {
	c.res, c.ctx = idx, ctx
	var slot int32
	if n := len(p.freeCells); n > 0 {
		slot = p.freeCells[n-1]
		p.freeCells = p.freeCells[:n-1]
		c.dirty = p.cellSlab[slot].dirty // still listed in dirtyCells if set
		p.cellSlab[slot] = c
	} else {
		slot = int32(len(p.cellSlab))
		p.cellSlab = append(p.cellSlab, c)
	}
	p.cellIdx[cellKey{idx, ctx}] = slot
	r := &p.res[idx]
	for i := range r.inline {
		if r.inline[i].ctx == 0 {
			r.inline[i] = cellRef{ctx: ctx + 1, slot: slot}
			break
		}
	}
	r.ncells++
	return slot
}

// dropCells frees every cell of resource idx.
func (p *Pool) dropCells(idx int32) {
	r := &p.res[idx]
	if r.ncells == 0 {
		return
	}
	for ci := range p.ctxs {
		key := cellKey{idx, int32(ci)}
		if slot, ok := p.cellIdx[key]; ok {
			delete(p.cellIdx, key)
			p.cellSlab[slot] = cell{res: -1, dirty: p.cellSlab[slot].dirty}
			p.freeCells = append(p.freeCells, slot)
		}
	}
	r.ncells = 0
	r.inline = [inlineCells]cellRef{}
}

// markCell adds the cell to the change set. c.dirty is set exactly while
// slot is listed in dirtyCells, whether or not the slot is in use: it is
// cleared only by clearChangesLocked.
func (p *Pool) markCell(slot int32) {
	if c := &p.cellSlab[slot]; !c.dirty {
		c.dirty = true
		p.dirtyCells = append(p.dirtyCells, slot)
	}
}
