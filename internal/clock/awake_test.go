package clock

import (
	"context"
	"sync"
	"testing"
	"time"
)

// startAwake starts an Awake clock on a fake clock with a 10ms period and
// a 5ms tolerance, and returns it once its heartbeat waits on the ticker.
func startAwake(t *testing.T) (*Awake, *Fake, time.Time) {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	ctx, cancel := context.WithCancel(context.Background())
	a := NewAwake(ctx, f, 10*time.Millisecond, 5*time.Millisecond)
	t.Cleanup(func() { cancel(); <-a.Done() })
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := f.Wait(wctx, 1); err != nil {
		t.Fatalf("the heartbeat's ticker: %v", err)
	}
	return a, f, start
}

// advance moves f by d and waits until a's heartbeat has seen the new time.
func advance(t *testing.T, a *Awake, f *Fake, d time.Duration) {
	t.Helper()
	f.Advance(d)
	deadline := time.Now().Add(10 * time.Second)
	for !a.beat.Load().at.Equal(f.Now()) {
		if time.Now().After(deadline) {
			t.Fatalf("the heartbeat did not see %v", f.Now())
		}
		time.Sleep(time.Millisecond) // a poll interval: the heartbeat runs in its own goroutine
	}
}

// TestAwakeFollowsTheBaseClockWithoutStalls: beats on time, Now is the
// base clock's.
func TestAwakeFollowsTheBaseClockWithoutStalls(t *testing.T) {
	a, f, start := startAwake(t)
	for i := 1; i <= 50; i++ {
		advance(t, a, f, 10*time.Millisecond)
		if got, want := a.Now(), start.Add(time.Duration(i)*10*time.Millisecond); !got.Equal(want) {
			t.Fatalf("after %d on-time beats Now = got %v, want %v (the base clock's)", i, got.Sub(start), want.Sub(start))
		}
	}
	if s := a.Stalled(); s != 0 {
		t.Errorf("Stalled after beats on time = got %v, want 0", s)
	}
}

// TestAwakeDiscountsAStall: a 1s jump of the base clock with no beat
// between is a stall: Now stands still from period+tolerance after the
// last beat, before and after the heartbeat sees it, and then moves on.
func TestAwakeDiscountsAStall(t *testing.T) {
	a, f, start := startAwake(t)
	advance(t, a, f, 10*time.Millisecond)
	f.Set(start.Add(1010 * time.Millisecond)) // the process stopped for a second
	if got, want := a.Now().Sub(start), 25*time.Millisecond; got != want {
		t.Errorf("Now during the stall, before the heartbeat ran = got %v, want %v (the last beat + period + tolerance)", got, want)
	}
	if got, want := a.Stalled(), 985*time.Millisecond; got != want {
		t.Errorf("Stalled during the stall = got %v, want %v", got, want)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !a.beat.Load().at.Equal(f.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat did not run after the stall")
		}
		time.Sleep(time.Millisecond) // a poll interval: the heartbeat runs in its own goroutine
	}
	if got, want := a.Now().Sub(start), 25*time.Millisecond; got != want {
		t.Errorf("Now once the heartbeat saw the stall = got %v, want %v", got, want)
	}
	advance(t, a, f, 10*time.Millisecond)
	if got, want := a.Now().Sub(start), 35*time.Millisecond; got != want {
		t.Errorf("Now a beat after the stall = got %v, want %v (it moves on)", got, want)
	}
	if got, want := a.Stalled(), 985*time.Millisecond; got != want {
		t.Errorf("Stalled after the stall = got %v, want %v", got, want)
	}
}

// TestAwakeNeverGoesBackwards reads Now from several goroutines while the
// heartbeat runs on the wall clock with a period short enough to be late
// often (the race detector and a busy machine make it so).
func TestAwakeNeverGoesBackwards(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	a := NewAwake(ctx, Real{}, 50*time.Microsecond, 0)
	defer func() { cancel(); <-a.Done() }()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := a.Now()
			for range 200_000 {
				now := a.Now()
				if now.Before(last) {
					t.Errorf("Now went back by %v", last.Sub(now))
					return
				}
				last = now
			}
		})
	}
	wg.Wait()
}
