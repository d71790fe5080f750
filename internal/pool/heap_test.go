package pool

import (
	"container/heap"
	"math/rand/v2"
	"testing"
)

// refHeap is container/heap over the same entries: minHeap must order them,
// ties included, exactly as it does.
type refHeap []heapEntry[int]

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return h[i].key < h[j].key }
func (h refHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *refHeap) Push(x any)        { *h = append(*h, x.(heapEntry[int])) }
func (h *refHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func TestMinHeapMatchesContainerHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h minHeap[int]
	var ref refHeap
	for step := 0; step < 20000; step++ {
		switch {
		case step == 10000: // re-heapify a shuffled heap, as compactExpiries does
			rng.Shuffle(len(h), func(i, j int) { h[i], h[j] = h[j], h[i] })
			ref = append(ref[:0], h...)
			h.init()
			heap.Init(&ref)
		case len(h) == 0 || rng.IntN(3) > 0:
			key := int64(rng.IntN(50)) // few distinct keys: many ties
			h.push(key, step)
			heap.Push(&ref, heapEntry[int]{key, step})
		default:
			if h.due(-1) {
				t.Fatalf("step %d: due(-1) = true with keys >= 0", step)
			}
			key, val := h.pop()
			want := heap.Pop(&ref).(heapEntry[int])
			if key != want.key || val != want.val {
				t.Fatalf("step %d: pop() = (%d, %d), container/heap pops (%d, %d)", step, key, val, want.key, want.val)
			}
		}
		if len(h) != len(ref) {
			t.Fatalf("step %d: len = %d, container/heap %d", step, len(h), len(ref))
		}
	}
}

func TestMinHeapDoesNotAllocate(t *testing.T) {
	var h minHeap[cooldown]
	for i := range 1024 {
		h.push(int64(i), cooldown{})
	}
	allocs := testing.AllocsPerRun(1000, func() {
		key, c := h.pop()
		h.push(key+1024, c)
	})
	if allocs != 0 {
		t.Fatalf("pop+push allocates %v times, want 0", allocs)
	}
}
