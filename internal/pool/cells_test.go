package pool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"
)

// TestChangesReplayToSnapshot drives a pool with more contexts than it
// keeps dense (so cells live in both places, and the dense layout widens
// while changes are pending) through random registrations, removals,
// reports, leases and time, and replays every TakeChanges onto a model
// store the way a checkpoint does. After every round the model must equal
// the pool's Snapshot, the internal bookkeeping must hold, and a pool
// restored from the snapshot must read the same.
func TestChangesReplayToSnapshot(t *testing.T) {
	const nids, nctx = 40, maxDense + 4
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 3})
	rng := rand.New(rand.NewPCG(7, 8))
	model := newDurable(p.Snapshot()) // what a checkpoint store holds
	id := func() string { return fmt.Sprintf("r%02d", rng.IntN(nids)) }
	ctx := func() string { return fmt.Sprintf("c%02d", rng.IntN(nctx)) }
	for round := range 300 {
		for range 20 {
			switch op := rng.IntN(10); {
			case op == 0:
				register(t, p, Spec{ID: id(), Capacity: 1 + rng.IntN(3)})
			case op == 1:
				if _, _, err := p.Deregister([]string{id()}); err != nil {
					t.Fatal(err)
				}
			case op == 2:
				if l, err := p.Acquire(ctx(), time.Minute, nil); err == nil {
					if _, err := p.Release(l.ID, l.Token, Outcome(1+rng.IntN(3))); err != nil {
						t.Fatal(err)
					}
				}
			case op == 3:
				fc.Advance(time.Duration(rng.IntN(90)) * time.Second)
				p.Tick()
			default:
				_, err := p.Report(Report{Resource: id(), Context: ctx(), Outcome: Outcome(1 + rng.IntN(3))})
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
			}
			if err := p.checkInvariants(); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if round%3 == 2 {
			// A change set may span several widenings; check it applies.
			continue
		}
		if err := model.apply(p.TakeChanges()); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		snap := p.Snapshot()
		if err := model.matches(snap); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		q, _ := newTestPool(t, Config{FailuresToQuarantine: 3})
		fcq := q.clock.(interface{ Set(time.Time) })
		fcq.Set(fc.Now())
		if err := q.Restore(snap); err != nil {
			t.Fatal(err)
		}
		if err := q.checkInvariants(); err != nil {
			t.Fatalf("round %d, restored: %v", round, err)
		}
		a, b := normalize(snap), normalize(q.Snapshot())
		a.Leases, b.Leases = nil, nil
		sort.Slice(a.Cells, func(i, j int) bool {
			return a.Cells[i].Resource+a.Cells[i].Context < a.Cells[j].Resource+a.Cells[j].Context
		})
		sort.Slice(b.Cells, func(i, j int) bool {
			return b.Cells[i].Resource+b.Cells[i].Context < b.Cells[j].Resource+b.Cells[j].Context
		})
		if !reflect.DeepEqual(a.Resources, b.Resources) || !reflect.DeepEqual(a.Cells, b.Cells) {
			t.Fatalf("round %d: restored pool reads differently", round)
		}
	}
	if p.stride != maxDense || len(p.sparse) == 0 {
		t.Fatalf("stride %d, %d sparse cells: the test did not reach both layouts", p.stride, len(p.sparse))
	}
}
