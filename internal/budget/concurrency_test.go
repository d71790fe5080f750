package budget

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// TestRaceForBudget has 200 goroutines race for a budget of 20 units: exactly
// as many succeed as the limits allow, every time.
func TestRaceForBudget(t *testing.T) {
	const (
		goroutines = 200
		budget     = 20
		rounds     = 50
	)
	tests := []struct {
		name    string
		limits  map[string]Limits
		tenants []string // goroutine i uses tenants[i%len(tenants)]
		want    int64
	}{
		{name: "one tenant", tenants: []string{"a"}, want: budget},
		{name: "many tenants", tenants: []string{"a", "b", "c", "d", "e", "f", "g"}, want: budget},
		{name: "reservation and shared pool",
			limits:  map[string]Limits{"a": {ReservedResources: 5}, "b": {ReservedResources: 10}},
			tenants: []string{"a", "b", "c"}, want: budget},
		{name: "ceilings",
			limits:  map[string]Limits{"a": {MaxResources: 8}, "b": {MaxResources: 7}},
			tenants: []string{"a", "b"}, want: 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for round := range rounds {
				b := newTestBudget(t, budget, budget)
				for id, l := range tt.limits {
					mustSetLimits(t, b, id, l)
				}
				var (
					ok    atomic.Int64
					wg    sync.WaitGroup
					start = make(chan struct{})
				)
				for i := range goroutines {
					wg.Go(func() {
						<-start
						err := b.Reserve(tt.tenants[i%len(tt.tenants)], Resources, 1)
						switch {
						case err == nil:
							ok.Add(1)
						case !errors.Is(err, ErrExhausted):
							t.Errorf("Reserve() = got %v, want nil or ErrExhausted", err)
						}
					})
				}
				close(start)
				wg.Wait()
				if got := ok.Load(); got != tt.want {
					t.Fatalf("round %d: successful Reserve calls = got %d, want %d", round, got, tt.want)
				}
				if got := b.Totals().Resources.Used; got != tt.want {
					t.Fatalf("round %d: Totals().Resources.Used = got %d, want %d", round, got, tt.want)
				}
				checkAccounting(t, b)
			}
		})
	}
}

// TestReservationHonouredUnderFlood has tenant "vip" use its reservation
// while other tenants flood the shared pool, change their own limits and
// come and go: vip is never refused.
func TestReservationHonouredUnderFlood(t *testing.T) {
	const (
		budget   = 1000
		reserved = 50
		floods   = 16
		iters    = 2000
	)
	b := newTestBudget(t, budget, budget)
	mustSetLimits(t, b, "vip", Limits{ReservedResources: reserved, MaxResources: reserved})

	var (
		stop    atomic.Bool
		refused atomic.Int64
		wg      sync.WaitGroup
	)
	for i := range floods {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			id := fmt.Sprintf("flood-%d", i%4)
			var held int64
			for !stop.Load() {
				n := rng.Int64N(40) + 1
				switch err := b.Reserve(id, Resources, n); {
				case err == nil:
					held += n
				case errors.Is(err, ErrExhausted):
					refused.Add(1)
					if held > 0 {
						m := rng.Int64N(held) + 1
						if err := b.Release(id, Resources, m); err != nil {
							t.Errorf("Release(%s, resources, %d) = %v", id, m, err)
						}
						held -= m
					}
				default:
					t.Errorf("Reserve(%s, resources, %d) = %v", id, n, err)
				}
			}
			if err := b.Release(id, Resources, held); err != nil {
				t.Errorf("Release(%s, resources, %d) = %v", id, held, err)
			}
		})
	}
	// Limits of the flooding tenants change under their feet.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(99, 1))
		for !stop.Load() {
			id := fmt.Sprintf("flood-%d", rng.IntN(4))
			l := Limits{ReservedResources: rng.Int64N(100), MaxResources: 100 + rng.Int64N(900)}
			if err := b.SetLimits(id, l); err != nil && !errors.Is(err, ErrExhausted) {
				t.Errorf("SetLimits(%s, %+v) = %v", id, l, err)
			}
		}
	})

	// vip keeps going until the flood has been refused many times.
	rng := rand.New(rand.NewPCG(7, 7))
	var held int64
	for i := 0; i < iters || refused.Load() < 1000; i++ {
		if i > 1_000_000 {
			t.Fatalf("the flood was refused only %d times in %d iterations: the test does not exhaust the shared pool", refused.Load(), i)
		}
		if n := rng.Int64N(reserved - held + 1); n > 0 {
			if err := b.Reserve("vip", Resources, n); err != nil {
				t.Fatalf("iteration %d: Reserve(vip, resources, %d) with %d of %d held = got %v, want nil",
					i, n, held, reserved, err)
			}
			held += n
		}
		if m := rng.Int64N(held + 1); m > 0 {
			if err := b.Release("vip", Resources, m); err != nil {
				t.Fatalf("Release(vip, resources, %d) = %v", m, err)
			}
			held -= m
		}
	}
	stop.Store(true)
	wg.Wait()
	if got := b.Usage("vip").Resources; got != held {
		t.Errorf("Usage(vip).Resources = got %d, want %d", got, held)
	}
	checkAccounting(t, b)
}

// TestConcurrentOps runs every operation concurrently, Forget included, and
// checks that the books balance once the dust settles and that the budget
// was never overdrawn.
func TestConcurrentOps(t *testing.T) {
	const (
		budget  = 200
		workers = 12
		iters   = 3000
	)
	b := newTestBudget(t, budget, budget)
	tenants := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for range iters {
				id := tenants[rng.IntN(len(tenants))]
				k := Kind(rng.IntN(numKinds))
				n := rng.Int64N(20)
				switch op := rng.IntN(20); {
				case op < 10:
					if err := b.Reserve(id, k, n); err != nil && !errors.Is(err, ErrExhausted) {
						t.Errorf("Reserve(%s, %v, %d) = %v", id, k, n, err)
					}
				case op < 18:
					// Over-release is expected here: the units may be
					// another worker's, or forgotten.
					if err := b.Release(id, k, n); err != nil && !errors.Is(err, ErrOverRelease) {
						t.Errorf("Release(%s, %v, %d) = %v", id, k, n, err)
					}
				case op == 18:
					l := Limits{ReservedResources: rng.Int64N(50), ReservedCells: rng.Int64N(50)}
					if err := b.SetLimits(id, l); err != nil && !errors.Is(err, ErrExhausted) &&
						!errors.Is(err, ErrInvalidArgument) {
						t.Errorf("SetLimits(%s, %+v) = %v", id, l, err)
					}
				default:
					b.Forget(id)
				}
				// Without Account, committed units never exceed the budget.
				for k := range Kind(numKinds) {
					if c := b.kinds[k].committed.Load(); c > budget {
						t.Errorf("%v committed = got %d, want at most %d", k, c, budget)
					}
				}
			}
		})
	}
	wg.Wait()
	checkAccounting(t, b)
	tot := b.Totals()
	for k := range Kind(numKinds) {
		if got := tot.Of(k); got.Used > budget || got.Free < 0 {
			t.Errorf("Totals().Of(%v) = got %+v, want used ≤ %d and free ≥ 0", k, got, budget)
		}
	}
	for _, id := range tenants {
		b.Forget(id)
	}
	if got, want := b.Totals().Cells, (Total{Budget: budget, Free: budget, OverReleased: tot.Cells.OverReleased}); got != want {
		t.Errorf("Totals().Cells after forgetting everyone = got %+v, want %+v", got, want)
	}
}
