package dataplane

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestDrainWaitsForTheCallsInProgress: Drain returns at once with no call
// in progress, waits while calls are, returns once the last one ends, and
// gives up with its context's error.
func TestDrainWaitsForTheCallsInProgress(t *testing.T) {
	c := newCallCount()
	if err := c.drain(context.Background()); err != nil {
		t.Fatalf("drain with no call = got %v, want nil", err)
	}
	c.enter()
	c.enter()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.drain(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("drain with 2 calls and an ended context = got %v, want context.Canceled", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.drain(context.Background()) }()
	c.exit()
	select {
	case err := <-done:
		t.Fatalf("drain with a call still in progress = returned %v", err)
	default:
	}
	c.exit()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain after the last call = got %v, want nil", err)
		}
	case <-time.After(10 * time.Second): // a test timeout, not a measure
		t.Fatal("drain did not return within 10s of the last call's end")
	}
}

// TestDrainMissesNoWakeUp: calls entering and ending on many goroutines
// while drains run one after another; every drain returns (none misses
// the end of the last call) and finds no call in progress when the
// callers have stopped.
func TestDrainMissesNoWakeUp(t *testing.T) {
	c := newCallCount()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				c.enter()
				c.exit()
			}
		})
	}
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a test timeout
		err := c.drain(ctx)
		cancel()
		if err != nil {
			t.Fatalf("drain = got %v, want nil: a wake-up was missed", err)
		}
		select {
		case <-stopped:
			if n := c.n.Load(); n != 0 {
				t.Fatalf("calls in progress after every caller stopped = %d, want 0", n)
			}
			return
		default:
		}
	}
}
