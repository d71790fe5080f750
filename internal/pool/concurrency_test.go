package pool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
)

// holders tracks, from the clients' side, which leases are valid: granted,
// not yet released by their holder, and not past their expiry. It can only
// under-count (a holder forgets a lease before releasing it), so a resource
// with more valid leases here than its capacity is a real violation.
type holders struct {
	mu    sync.Mutex
	clock *clock.Fake
	held  map[string]map[uint64]time.Time // resource → lease id → expiry
}

// add records a granted lease and checks the resource's capacity. A lease
// that expired between its grant and this call (the clock goroutine moves
// time on meanwhile) is not valid any more and is not recorded: the pool
// may already have granted its capacity again.
func (h *holders) add(l Lease, capacity int) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	if !l.ExpiresAt.After(now) {
		return nil
	}
	m := h.held[l.Resource]
	if m == nil {
		m = map[uint64]time.Time{}
		h.held[l.Resource] = m
	}
	for id, exp := range m {
		if !exp.After(now) {
			delete(m, id)
		}
	}
	m[l.ID] = l.ExpiresAt
	if len(m) > capacity {
		return fmt.Errorf("resource %s has %d valid leases, capacity %d", l.Resource, len(m), capacity)
	}
	return nil
}

func (h *holders) forget(l Lease) {
	h.mu.Lock()
	delete(h.held[l.Resource], l.ID)
	h.mu.Unlock()
}

func (h *holders) renewed(l Lease) {
	h.mu.Lock()
	if m := h.held[l.Resource]; m != nil {
		if _, ok := m[l.ID]; ok {
			m[l.ID] = l.ExpiresAt
		}
	}
	h.mu.Unlock()
}

func TestConcurrentLeasesNeverExceedCapacity(t *testing.T) {
	fc := clock.NewFake(t0)
	p, err := New(Config{Clock: fc, Rand: rand.NewPCG(9, 9), FailuresToQuarantine: 4, CooldownBase: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	capacity := map[string]int{}
	var specs []Spec
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("r%02d", i)
		capacity[id] = 1 + i%3
		specs = append(specs, Spec{ID: id, Capacity: capacity[id]})
	}
	register(t, p, specs...)
	h := &holders{clock: fc, held: map[string]map[uint64]time.Time{}}

	const workers = 32
	const steps = 400
	var maxToken atomic.Uint64
	stop := make(chan struct{})
	var clockDone sync.WaitGroup
	clockDone.Add(1)
	go func() { // time moves while the clients work, so leases expire under them
		defer clockDone.Done()
		for {
			select {
			case <-stop:
				return
			default:
				fc.Advance(50 * time.Millisecond)
				p.Tick()
				time.Sleep(50 * time.Microsecond) // lets the other goroutines run between advances; not a wait for time

			}
		}
	}()

	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			ctx := fmt.Sprintf("ctx%d", w%3)
			var mine []Lease
			var lastToken uint64
			fail := func(err error) { errs <- fmt.Errorf("worker %d: %w", w, err) }
			for s := 0; s < steps; s++ {
				switch op := rng.IntN(10); {
				case op < 4 || len(mine) == 0:
					l, err := p.Acquire(ctx, time.Duration(1+rng.IntN(3))*time.Second, nil)
					if errors.Is(err, ErrExhausted) {
						continue
					}
					if err != nil {
						fail(err)
						return
					}
					if l.Token <= lastToken {
						fail(fmt.Errorf("token %d after %d", l.Token, lastToken))
						return
					}
					lastToken = l.Token
					for {
						m := maxToken.Load()
						if l.Token <= m || maxToken.CompareAndSwap(m, l.Token) {
							break
						}
					}
					if err := h.add(l, capacity[l.Resource]); err != nil {
						fail(err)
						return
					}
					mine = append(mine, l)
				case op < 6:
					i := rng.IntN(len(mine))
					l, err := p.Renew(mine[i].ID, mine[i].Token, time.Duration(1+rng.IntN(3))*time.Second)
					if err != nil {
						if !errors.Is(err, ErrNotFound) {
							fail(err)
							return
						}
						h.forget(mine[i])
						mine = append(mine[:i], mine[i+1:]...)
						continue
					}
					h.renewed(l)
					mine[i] = l
				case op < 8:
					i := rng.IntN(len(mine))
					l := mine[i]
					mine = append(mine[:i], mine[i+1:]...)
					h.forget(l)
					o := Outcome(1 + rng.IntN(3))
					if _, err := p.Release(l.ID, l.Token, o); err != nil && !errors.Is(err, ErrNotFound) {
						fail(err)
						return
					}
				default:
					l := mine[rng.IntN(len(mine))]
					_, err := p.Report(Report{Resource: l.Resource, Context: l.Context, Outcome: Outcome(1 + rng.IntN(2)), LeaseID: l.ID, Token: l.Token})
					if err != nil && !errors.Is(err, ErrNotFound) {
						fail(err)
						return
					}
				}
				if err := p.checkInvariants(); err != nil {
					fail(err)
					return
				}
			}
			for _, l := range mine {
				h.forget(l)
				_, _ = p.Release(l.ID, l.Token, 0)
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	clockDone.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if _, last := p.Epoch(); last < maxToken.Load() {
		t.Fatalf("Epoch() last token %d below the largest handed out %d", last, maxToken.Load())
	}
}
