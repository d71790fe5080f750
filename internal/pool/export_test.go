package pool

import (
	"fmt"
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
	for id, l := range p.leases {
		if !p.res[l.res].live || p.res[l.res].gen != l.gen {
			return fmt.Errorf("lease %d points at a dead resource slot", id)
		}
		held[l.res]++
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
		if r.active > r.capacity {
			return fmt.Errorf("resource %q: %d leases over capacity %d", r.id, r.active, r.capacity)
		}
		want := r.active < r.capacity && r.q.state == qNone
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
		if listed[slot] || !p.cellSlab[slot].dirty {
			return fmt.Errorf("cell slot %d listed twice or listed but not dirty", slot)
		}
		listed[slot] = true
	}
	for slot := range p.cellSlab {
		if p.cellSlab[slot].dirty && !listed[int32(slot)] {
			return fmt.Errorf("cell slot %d dirty but not listed", slot)
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
		{"inline", unsafe.Offsetof(r.inline), unsafe.Sizeof(r.inline)},
	}
	for _, f := range hot {
		if end := f.off + f.size; end > resourceHot {
			t.Errorf("resource.%s ends at byte %d, beyond resourceHot = %d", f.name, end, resourceHot)
		}
	}
}
