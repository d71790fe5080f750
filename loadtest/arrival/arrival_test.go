package arrival

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
)

// TestRunOnFakeClockStartsEachIterationOnTime drives the executor with a
// fake clock: iteration i starts exactly when it is due (i × TimeUnit /
// Rate from the start), none before the clock gets there, and the run's
// elapsed time is the schedule's.
func TestRunOnFakeClockStartsEachIterationOnTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := clock.NewFake(t0)
	type start struct {
		iter int64
		at   time.Time
	}
	ran := make(chan start)
	e, err := New(Config{Rate: 4, TimeUnit: time.Second, Duration: time.Second, PreAllocatedVUs: 4, GracefulStop: time.Minute, Clock: fake},
		func(_ context.Context, iter int64) { ran <- start{iter, fake.Now()} })
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan Stats, 1)
	go func() { done <- e.Run(ctx, nil) }()
	for i := range int64(4) {
		want := t0.Add(time.Duration(i) * 250 * time.Millisecond)
		select {
		case got := <-ran:
			if got.iter != i || !got.at.Equal(want) {
				t.Errorf("iteration %d started at %v, want iteration %d at %v", got.iter, got.at.Sub(t0), i, want.Sub(t0))
			}
		case <-ctx.Done():
			t.Fatalf("iteration %d did not start", i)
		}
		if i == 3 {
			break
		}
		if err := fake.Wait(ctx, 1); err != nil {
			t.Fatalf("the executor armed no timer for iteration %d: %v", i+1, err)
		}
		select {
		case got := <-ran:
			t.Fatalf("iteration %d started at %v, before the clock reached it", got.iter, got.at.Sub(t0))
		default:
		}
		fake.Advance(250 * time.Millisecond)
	}
	st := <-done
	want := Stats{Iterations: 4, MaxVUs: 4, PeakActive: st.PeakActive, Elapsed: 750 * time.Millisecond}
	if st != want {
		t.Errorf("Run() = %+v, want %+v", st, want)
	}
}

// The tests below run on the wall clock, as the executor does by default,
// and assert counts that do not depend on how fast the machine is.

func TestRunFastIterationsDropNothing(t *testing.T) {
	var calls atomic.Int64
	e, err := New(Config{Rate: 200, TimeUnit: time.Second, Duration: 250 * time.Millisecond, PreAllocatedVUs: 5, MaxVUs: 10, GracefulStop: 5 * time.Second},
		func(context.Context, int64) { calls.Add(1) })
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	st := e.Run(context.Background(), nil)
	// Iterations 0..49 are due before 250ms.
	if got := st.Iterations + st.Dropped; got != 50 {
		t.Errorf("Run() iterations+dropped = %d, want 50 (%+v)", got, st)
	}
	if st.Iterations != calls.Load() || st.Interrupted != 0 {
		t.Errorf("Run() = %+v, want %d iterations and none interrupted", st, calls.Load())
	}
	if st.MaxVUs < 5 {
		t.Errorf("Run() MaxVUs = %d, want at least the 5 pre-allocated", st.MaxVUs)
	}
}

func TestRunBusyVUsDropAndGrowToMax(t *testing.T) {
	// Iterations never finish on their own: after the 4 VUs are busy every
	// due iteration is dropped, and graceful stop 0 interrupts the 4.
	var seen [64]atomic.Bool
	e, err := New(Config{Rate: 100, TimeUnit: time.Second, Duration: 500 * time.Millisecond, PreAllocatedVUs: 2, MaxVUs: 4},
		func(ctx context.Context, iter int64) {
			seen[iter].Store(true)
			<-ctx.Done()
		})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	st := e.Run(context.Background(), nil)
	want := Stats{Iterations: 0, Dropped: 46, Interrupted: 4, MaxVUs: 4, PeakActive: 4}
	st.Elapsed = 0
	if st != want {
		t.Errorf("Run() = %+v, want %+v", st, want)
	}
	for i := range 4 {
		if !seen[i].Load() {
			t.Errorf("iteration %d did not run; iterations are numbered from 0 as they start", i)
		}
	}
}

func TestRunGracefulStopLetsIterationsFinish(t *testing.T) {
	e, err := New(Config{Rate: 10, TimeUnit: time.Second, Duration: 50 * time.Millisecond, PreAllocatedVUs: 1, GracefulStop: 5 * time.Second},
		func(ctx context.Context, _ int64) {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	st := e.Run(context.Background(), nil)
	if st.Iterations != 1 || st.Interrupted != 0 || st.Dropped != 0 {
		t.Errorf("Run() = %+v, want 1 iteration finished within the graceful stop", st)
	}
}

func TestRunCancelInterrupts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	e, err := New(Config{Rate: 10, TimeUnit: time.Second, Duration: time.Hour, PreAllocatedVUs: 1, GracefulStop: time.Hour},
		func(ctx context.Context, _ int64) {
			cancel()
			<-ctx.Done()
		})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	done := make(chan Stats)
	go func() { done <- e.Run(ctx, nil) }()
	select {
	case st := <-done:
		if st.Interrupted != 1 {
			t.Errorf("Run() after cancel = %+v, want the running iteration interrupted", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run() did not return after its context was cancelled")
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Rate: 1, TimeUnit: time.Second, Duration: time.Second, PreAllocatedVUs: 1}
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"zero rate", func(c *Config) { c.Rate = 0 }},
		{"zero time unit", func(c *Config) { c.TimeUnit = 0 }},
		{"zero duration", func(c *Config) { c.Duration = 0 }},
		{"no VUs", func(c *Config) { c.PreAllocatedVUs = 0 }},
		{"max below pre-allocated", func(c *Config) { c.PreAllocatedVUs, c.MaxVUs = 3, 2 }},
		{"negative graceful stop", func(c *Config) { c.GracefulStop = -1 }},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", ok, err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			if err := c.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", c)
			}
		})
	}
}

func TestDueSpacesIterationsEvenly(t *testing.T) {
	c := Config{Rate: 3, TimeUnit: time.Second}
	for i, want := range []time.Duration{0, 333333333, 666666666, time.Second} {
		if got := c.Due(int64(i)); got != want {
			t.Errorf("Due(%d) = %v, want %v", i, got, want)
		}
	}
}
