package pool

import (
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSetPolicyChangesQuarantineLive(t *testing.T) {
	p, fc := newTestPool(t, Config{QuarantineBelow: -1})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	sub := p.Subscribe(KindsOf(EventBlocked), 0)
	defer sub.Close()

	// Under the default (5 failures), 2 failures block nothing.
	report(t, p, "a", "x", Failure, 2)
	if ev := drain(sub); len(ev) != 0 {
		t.Fatalf("events after 2 failures under the default policy = %v, want none", ev)
	}
	// A bad policy is refused whole: the old one stays.
	if err := p.SetPolicy(Policy{FailuresToQuarantine: 2, CooldownBase: time.Minute, CooldownMax: time.Second}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SetPolicy(cooldown max below base) = %v, want ErrInvalidArgument", err)
	}
	report(t, p, "b", "x", Failure, 2)
	if ev := drain(sub); len(ev) != 0 {
		t.Fatalf("events after a refused policy = %v, want none", ev)
	}
	// Lowered to 3: the third consecutive failure blocks, for the new
	// cooldown.
	if err := p.SetPolicy(Policy{FailuresToQuarantine: 3, CooldownBase: 7 * time.Second, QuarantineBelow: -1}); err != nil {
		t.Fatal(err)
	}
	report(t, p, "a", "x", Failure, 1)
	if ev := drain(sub); len(ev) != 1 || ev[0].Resource != "a" || ev[0].Context != "x" {
		t.Fatalf("events after the third failure under the new policy = %v, want one blocked a/x", ev)
	}
	info, _ := p.Get("a")
	if want := fc.Now().Add(7 * time.Second); !info.Contexts[0].BlockedUntil.Equal(want) {
		t.Fatalf("BlockedUntil = %v, want %v (the new cooldown base)", info.Contexts[0].BlockedUntil, want)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestSetPolicyConcurrent changes the policy while others use the pool;
// the race detector checks that no field is read unguarded.
func TestSetPolicyConcurrent(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a", Capacity: 100}, Spec{ID: "b", Capacity: 100})
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				l, err := p.Acquire("x", time.Minute, nil)
				if err != nil {
					continue
				}
				o := Success
				if (i+g)%3 == 0 {
					o = Failure
				}
				_, _ = p.Release(l.ID, l.Token, o)
				_, _ = p.Get("a")
			}
		}()
	}
	for i := range 200 {
		if err := p.SetPolicy(Policy{HalfLife: time.Duration(i+1) * time.Minute, FailuresToQuarantine: i%5 + 1}); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}
