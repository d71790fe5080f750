package pool

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestIDIndexAgainstMap inserts and removes ids at random and checks every
// lookup against a map, across growth and with long probe runs (the
// backward-shift removal is the part that can go wrong).
func TestIDIndexAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := newIDIndex()
	var res []resource
	var free []int32
	want := map[string]int32{}
	check := func(id string) {
		t.Helper()
		slot, ok := want[id]
		if !ok {
			slot = -1
		}
		if got := x.find(id, x.tag(id), res, nil); got != slot {
			t.Fatalf("find(%q) = %d, want %d", id, got, slot)
		}
	}
	for step := range 200_000 {
		id := fmt.Sprintf("r%d", rng.IntN(3000))
		if slot, ok := want[id]; ok && rng.IntN(2) == 0 {
			x.remove(id, slot)
			delete(want, id)
			res[slot] = resource{}
			free = append(free, slot)
		} else if !ok {
			var slot int32
			if n := len(free); n > 0 {
				slot, free = free[n-1], free[:n-1]
			} else {
				slot = int32(len(res))
				res = append(res, resource{})
			}
			res[slot] = resource{id: id, live: true}
			copy(res[slot].idHead[:], id)
			x.insert(id, slot)
			want[id] = slot
		}
		check(id)
		check(fmt.Sprintf("r%d", rng.IntN(3000)))
		if x.n != len(want) {
			t.Fatalf("step %d: n = %d, want %d", step, x.n, len(want))
		}
		if 2*x.n > len(x.entries) {
			t.Fatalf("step %d: %d entries in a table of %d", step, x.n, len(x.entries))
		}
	}
	for id := range want {
		check(id)
	}
}

// TestLeaseTableAgainstMap puts, replaces and deletes leases at random and
// checks every lookup against a map, across growth; ids come both in
// sequence, as a pool issues them, and scattered.
func TestLeaseTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var tab leaseTable
	want := map[uint64]leaseRec{}
	next := uint64(1)
	for step := range 200_000 {
		var id uint64
		switch rng.IntN(3) {
		case 0:
			id = next
			next++
		case 1:
			id = 1 + rng.Uint64N(next)
		default:
			id = 1 + rng.Uint64()>>1
		}
		if _, ok := want[id]; ok && rng.IntN(2) == 0 {
			tab.del(id)
			delete(want, id)
		} else if len(want) < 5000 {
			rec := leaseRec{token: rng.Uint64(), res: int32(step)}
			tab.put(id, rec)
			want[id] = rec
		}
		if got, ok := tab.get(id); ok != (want[id] != leaseRec{}) || got != want[id] {
			t.Fatalf("step %d: get(%d) = %v, %v; want %v", step, id, got, ok, want[id])
		}
		if tab.len() != len(want) || 2*tab.len() > len(tab.entries) {
			t.Fatalf("step %d: %d leases in a table of %d, want %d", step, tab.len(), len(tab.entries), len(want))
		}
		// 0 marks an empty entry; it must never be found, nor deleted.
		if _, ok := tab.get(0); ok {
			t.Fatalf("step %d: get(0) found an entry", step)
		}
		if n := tab.len(); step%1000 == 0 {
			tab.del(0)
			if tab.len() != n {
				t.Fatalf("step %d: del(0) changed the lease count from %d to %d", step, n, tab.len())
			}
		}
	}
	// After a burst, deleting most leases shrinks the table.
	peak := len(tab.entries)
	for id := range want {
		if len(want) <= 50 {
			break
		}
		tab.del(id)
		delete(want, id)
	}
	if len(tab.entries) >= peak/8 || 2*tab.len() > len(tab.entries) {
		t.Fatalf("%d leases left in a table of %d entries (peak %d)", tab.len(), len(tab.entries), peak)
	}
	for id, rec := range want {
		if got, ok := tab.get(id); !ok || got != rec {
			t.Fatalf("after shrinking: get(%d) = %v, %v; want %v", id, got, ok, rec)
		}
	}
	seen := 0
	tab.each(func(id uint64, rec leaseRec) {
		seen++
		if want[id] != rec {
			t.Fatalf("each: lease %d = %v, want %v", id, rec, want[id])
		}
	})
	if seen != len(want) {
		t.Fatalf("each saw %d leases, want %d", seen, len(want))
	}
}

// TestLeaseHints checks that a hint names the slot recorded for exactly
// that sequence number, that an overwritten or unknown one is a miss, and
// that growing the table keeps the hints.
func TestLeaseHints(t *testing.T) {
	var h leaseHints
	if got := h.slot(1); got != -1 {
		t.Fatalf("empty table: slot(1) = %d, want -1", got)
	}
	h.put(1, 7, 1)
	h.put(2, 9, 2)
	if got := h.slot(1); got != 7 {
		t.Fatalf("slot(1) = %d, want 7", got)
	}
	n := len(*h.table.Load())
	h.put(1+uint64(n), 3, 2) // same entry as seq 1
	if got := h.slot(1); got != -1 {
		t.Fatalf("overwritten: slot(1) = %d, want -1", got)
	}
	if got := h.slot(1 + uint64(n)); got != 3 {
		t.Fatalf("slot(%d) = %d, want 3", 1+n, got)
	}
	h.put(3, 11, 1000) // grows the table
	if len(*h.table.Load()) < 2000 {
		t.Fatalf("table of %d entries for 1,000 live leases", len(*h.table.Load()))
	}
	for seq, want := range map[uint64]int32{2: 9, 3: 11, 1 + uint64(n): 3} {
		if got := h.slot(seq); got != want {
			t.Fatalf("after growing: slot(%d) = %d, want %d", seq, got, want)
		}
	}
	h.put(4, 13, 1) // the burst is over: shrinks back
	if got := len(*h.table.Load()); got != 64 {
		t.Fatalf("table of %d entries for 1 live lease, want 64", got)
	}
	for seq, want := range map[uint64]int32{3: 11, 4: 13} {
		if got := h.slot(seq); got != want {
			t.Fatalf("after shrinking: slot(%d) = %d, want %d", seq, got, want)
		}
	}
}
