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
	return nil
}

func TestResourceHotFieldsFitOneCacheLine(t *testing.T) {
	var r resource
	if end := unsafe.Offsetof(r.inline) + unsafe.Sizeof(r.inline); end > 64 {
		t.Fatalf("availability and the inline cell table end at byte %d, want within the first 64", end)
	}
}
