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
		time.Sleep(time.Millisecond) // Coarse is a real-time clock: this test is about real time passing
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

// TestFakeFiresTimersWhenAdvanced: a fake's timers, tickers and AfterFuncs
// fire when, and only when, an Advance passes their time.
func TestFakeFiresTimersWhenAdvanced(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	timer := f.NewTimer(time.Second)
	ticker := f.NewTicker(300 * time.Millisecond)
	defer ticker.Stop()
	fired := make(chan struct{})
	f.AfterFunc(2*time.Second, func() { close(fired) })

	f.Advance(999 * time.Millisecond)
	select {
	case <-timer.Chan():
		t.Fatal("the timer fired before its time")
	default:
	}
	for range 3 { // 300, 600 and 900 ms passed; a ticker holds one tick
		select {
		case <-ticker.Chan():
		default:
		}
	}
	f.Advance(time.Millisecond)
	select {
	case got := <-timer.Chan():
		if !got.Equal(start.Add(time.Second)) {
			t.Fatalf("the timer fired at %v, want %v", got, start.Add(time.Second))
		}
	default:
		t.Fatal("the timer did not fire when its time was passed")
	}
	select {
	case <-fired:
		t.Fatal("AfterFunc ran a second early")
	default:
	}
	f.Set(start.Add(2 * time.Second))
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc did not run once its time was passed")
	}
	if got := f.Now(); !got.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("Now() = %v after Set", got)
	}
	f.Advance(-time.Hour)
	if got := f.Now(); !got.Equal(start.Add(2*time.Second - time.Hour)) {
		t.Fatalf("Now() = %v after moving back an hour", got)
	}
}

// TestEveryOnAFake: Every calls f once per period as the fake advances,
// stops when f says so, and returns when its context ends.
func TestEveryOnAFake(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		defer close(done)
		n := 0
		Every(ctx, f, time.Second, func(context.Context) bool {
			n++
			calls <- f.Now()
			return n < 3
		})
	}()
	for i := 1; i <= 3; i++ {
		if err := f.Wait(ctx, 1); err != nil {
			t.Fatalf("Every never armed its ticker: %v", err)
		}
		f.Advance(time.Second)
		select {
		case got := <-calls:
			if want := time.Unix(int64(i), 0); !got.Equal(want) {
				t.Fatalf("call %d at %v, want %v", i, got, want)
			}
		case <-ctx.Done():
			t.Fatalf("call %d never came", i)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Every went on after f returned false")
	}

	ctx2, cancel2 := context.WithCancel(ctx)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		Every(ctx2, f, time.Second, func(context.Context) bool { t.Error("called after cancel"); return true })
	}()
	if err := f.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel2()
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("Every did not return when its context ended")
	}
}

// TestSleep: Sleep returns nil once the fake passes d, ctx.Err() when the
// context ends first, and at once for d <= 0.
func TestSleep(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Sleep(ctx, f, 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
	res := make(chan error, 1)
	go func() { res <- Sleep(ctx, f, time.Minute) }()
	if err := f.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Minute)
	if err := <-res; err != nil {
		t.Fatalf("Sleep after the fake passed it = %v", err)
	}
	short, stop := context.WithCancel(ctx)
	go func() { res <- Sleep(short, f, time.Minute) }()
	if err := f.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-res; err != context.Canceled {
		t.Fatalf("Sleep with its context cancelled = %v, want context.Canceled", err)
	}
}

// TestRealClocksSchedule: the wall clocks' timers fire on real time.
func TestRealClocksSchedule(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range []Clock{Real{}, NewAnchored(0), NewCoarse(ctx, 0)} {
		timer := c.NewTimer(time.Millisecond)
		select {
		case <-timer.Chan():
		case <-time.After(10 * time.Second):
			t.Fatalf("%T: a 1 ms timer did not fire", c)
		}
	}
}
