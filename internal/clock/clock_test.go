package clock

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestAnchoredTracksTheClock checks every reading against time.Now taken
// just before and after it: the monotonic readings must bracket it, and the
// wall reading must be within the anchor's age of the system's.
func TestAnchoredTracksTheClock(t *testing.T) {
	for _, interval := range []time.Duration{time.Nanosecond, time.Hour} {
		a := NewAnchored(interval)
		prev := a.Now()
		for range 10_000 {
			before := time.Now()
			got := a.Now()
			after := time.Now()
			if got.Before(before) || got.After(after) {
				t.Fatalf("interval %v: Now() = %v, outside [%v, %v]", interval, got, before, after)
			}
			if got.Before(prev) {
				t.Fatalf("interval %v: Now() went back from %v to %v", interval, prev, got)
			}
			// The wall reading drifts from the system's only by a wall-clock
			// step since the anchor; none is expected during a test.
			if d := got.Round(0).Sub(before.Round(0)); d < -time.Millisecond || d > time.Second {
				t.Fatalf("interval %v: wall reading %v is %v from the system's", interval, got.Round(0), d)
			}
			prev = got
		}
	}
}

func TestAnchoredReanchors(t *testing.T) {
	a := NewAnchored(time.Nanosecond)
	first := a.anchor.Load()
	for i := 0; a.anchor.Load() == first; i++ {
		if i == 1_000_000 {
			t.Fatal("a nanosecond-interval clock never re-anchored")
		}
		a.Now()
	}
	b := NewAnchored(time.Hour)
	first = b.anchor.Load()
	for range 1000 {
		b.Now()
	}
	if b.anchor.Load() != first {
		t.Fatal("an hour-interval clock re-anchored within a test")
	}
	if NewAnchored(0).interval != time.Second {
		t.Fatal("interval 0 is not the one-second default")
	}
}

func TestAnchoredConcurrent(t *testing.T) {
	a := NewAnchored(time.Microsecond)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			prev := a.Now()
			for range 2000 {
				now := a.Now()
				if now.Before(prev) {
					t.Errorf("Now() went back from %v to %v", prev, now)
					return
				}
				prev = now
			}
		})
	}
	wg.Wait()
}

func BenchmarkAnchoredNow(b *testing.B) {
	a := NewAnchored(0)
	for b.Loop() {
		a.Now()
	}
}

func BenchmarkRealNow(b *testing.B) {
	for b.Loop() {
		Real{}.Now()
	}
}

// TestCoarseAdvancesAndStops checks that a Coarse clock stays within its
// lag of the wall clock, advances, and after its context ends stops its
// goroutine and reads the wall clock.
func TestCoarseAdvancesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := NewCoarse(ctx, time.Millisecond)
	first := c.Now()
	// The lag bound is loose: a loaded test machine can delay the ticker.
	if d := time.Since(first); d < 0 || d > time.Second {
		t.Fatalf("Now() is %v behind the wall clock", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !c.Now().After(first) {
		if time.Now().After(deadline) {
			t.Fatal("Coarse clock did not advance in 5s")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Coarse clock's goroutine did not stop")
	}
	before := time.Now()
	if got := c.Now(); got.Before(before.Round(0)) {
		t.Fatalf("stopped clock reads %v, before the wall clock's %v", got, before)
	}
}

func BenchmarkCoarseNow(b *testing.B) {
	c := NewCoarse(b.Context(), 0)
	for b.Loop() {
		c.Now()
	}
}
