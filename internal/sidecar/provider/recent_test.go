package provider

import (
	"sync"
	"testing"
	"time"
)

// TestRecentCountsTheLastMinute checks the status page's fast-fail counts:
// calls of the last minute count, older ones drop out as their second's
// bucket is reused or falls out of the window.
func TestRecentCountsTheLastMinute(t *testing.T) {
	var r recentBuckets
	t0 := time.Unix(1_000_000, 0)
	r.add(t0, true)
	r.add(t0, false)
	r.add(t0.Add(30*time.Second), true)
	if calls, fast := r.counts(t0.Add(30 * time.Second)); calls != 3 || fast != 2 {
		t.Fatalf("counts after 30 s = %d calls, %d fast, want 3 and 2", calls, fast)
	}
	if calls, fast := r.counts(t0.Add(70 * time.Second)); calls != 1 || fast != 1 {
		t.Fatalf("counts after 70 s = %d calls, %d fast, want the call of second 30 alone", calls, fast)
	}
	r.add(t0.Add(60*time.Second), false) // reuses second 0's bucket
	if calls, fast := r.counts(t0.Add(60 * time.Second)); calls != 2 || fast != 1 {
		t.Fatalf("counts after 60 s = %d calls, %d fast, want 2 and 1", calls, fast)
	}
}

// TestRecentConcurrent adds from many goroutines within one second: once
// the second's bucket is claimed, every call is counted (the race detector
// checks the atomics). Only a call racing the claim itself may be lost.
func TestRecentConcurrent(t *testing.T) {
	var r recentBuckets
	now := time.Unix(2_000_000, 0)
	r.add(now, false)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				r.add(now, i%4 == 0)
			}
		})
	}
	wg.Wait()
	if calls, fast := r.counts(now); calls != 8001 || fast != 2000 {
		t.Fatalf("counts = %d calls, %d fast, want 8001 and 2000", calls, fast)
	}
}
