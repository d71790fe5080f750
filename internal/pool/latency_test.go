package pool

import (
	"errors"
	"testing"
	"time"
)

// timedPair registers a fast and a slow resource (both always succeed)
// and reports 20 timed successes each for context x: "fast" takes 100ms,
// "slow" 1s.
func timedPair(t *testing.T, cfg Config) *Pool {
	t.Helper()
	p, _ := newTestPool(t, cfg)
	register(t, p, Spec{ID: "fast"}, Spec{ID: "slow"})
	for range 20 {
		for id, d := range map[string]time.Duration{"fast": 100 * time.Millisecond, "slow": time.Second} {
			if _, err := p.Report(Report{Resource: id, Context: "x", Outcome: Success, Latency: d}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// picks counts which resource n Acquire+Release rounds lease.
func picks(t *testing.T, p *Pool, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		l := mustAcquire(t, p, "x")
		got[l.Resource]++
		if _, err := p.Release(l.ID, l.Token, 0); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// TestObjectiveSuccessPerTimePrefersTheFastResource: two resources that
// always succeed, one 10× slower. Under the default objective the draws
// tie on success and both are leased; under success_per_time the fast one
// takes nearly every lease.
func TestObjectiveSuccessPerTimePrefersTheFastResource(t *testing.T) {
	got := picks(t, timedPair(t, Config{}), 400)
	if got["slow"] < 100 {
		t.Fatalf("objective success: leases %v, want both leased (the latency does not count)", got)
	}
	got = picks(t, timedPair(t, Config{Objective: ObjectiveSuccessPerTime}), 400)
	if got["fast"] < 390 {
		t.Fatalf("objective success_per_time: leases %v, want nearly all on fast", got)
	}
}

// TestObjectiveWeighsSuccessAgainstTime: a resource 10× faster but that
// fails half the time still brings 5× the successes per second of a slow
// one that always succeeds; a fast one that always fails does not. (A pool
// of two scores each several times per Acquire, which favours the less
// certain posterior: hence "most", not "all".)
func TestObjectiveWeighsSuccessAgainstTime(t *testing.T) {
	for _, tt := range []struct {
		name     string
		failures int // of 40 reports on "fast"
		want     string
		atLeast  int // of 200 leases
	}{
		{"fast and half failing", 20, "fast", 170},
		{"fast and always failing", 40, "slow", 150},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newTestPool(t, Config{Objective: ObjectiveSuccessPerTime, QuarantineBelow: -1, FailuresToQuarantine: 1000, FailuresToQuarantineWhole: 1000})
			register(t, p, Spec{ID: "fast"}, Spec{ID: "slow"})
			for i := range 40 {
				o := Success
				if i < tt.failures {
					o = Failure
				}
				if _, err := p.Report(Report{Resource: "fast", Context: "x", Outcome: o, Latency: 100 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				if _, err := p.Report(Report{Resource: "slow", Context: "x", Outcome: Success, Latency: time.Second}); err != nil {
					t.Fatal(err)
				}
			}
			if got := picks(t, p, 200); got[tt.want] < tt.atLeast {
				t.Fatalf("leases %v, want most on %s", got, tt.want)
			}
		})
	}
}

// TestSetPolicyObjectiveReranksTheBoard: switching a running pool to
// success_per_time takes effect at the next Acquire.
func TestSetPolicyObjectiveReranksTheBoard(t *testing.T) {
	p := timedPair(t, Config{})
	if err := p.SetPolicy(Policy{Objective: ObjectiveSuccessPerTime}); err != nil {
		t.Fatal(err)
	}
	if got := picks(t, p, 200); got["fast"] < 195 {
		t.Fatalf("after SetPolicy(success_per_time): leases %v, want nearly all on fast", got)
	}
	if err := p.SetPolicy(Policy{Objective: "fastest"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SetPolicy(objective fastest) = %v, want ErrInvalidArgument", err)
	}
	if _, err := New(Config{Objective: "fastest"}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("New(objective fastest) = %v, want ErrInvalidArgument", err)
	}
}

// TestLatencyIsADecayedMean: the cell's latency is the mean of what
// outcomes carried, recent ones weighing more, and outcomes without one
// leave it alone.
func TestLatencyIsADecayedMean(t *testing.T) {
	p, fc := newTestPool(t, Config{HalfLife: time.Hour})
	register(t, p, Spec{ID: "a"})
	rep := func(d time.Duration) {
		t.Helper()
		if _, err := p.Report(Report{Resource: "a", Context: "x", Outcome: Success, Latency: d}); err != nil {
			t.Fatal(err)
		}
	}
	rep(100 * time.Millisecond)
	rep(300 * time.Millisecond)
	rep(0) // not measured
	latencyOf := func() time.Duration {
		info, err := p.Get("a")
		if err != nil {
			t.Fatal(err)
		}
		return info.Contexts[0].Latency
	}
	if got := latencyOf(); got < 199*time.Millisecond || got > 201*time.Millisecond {
		t.Fatalf("latency = %v, want 200ms, the mean", got)
	}
	// An hour later the two weigh half as much as a new one: (0.5·0.1 +
	// 0.5·0.3 + 1·0.8) / 2 = 0.5s.
	fc.Advance(time.Hour)
	rep(800 * time.Millisecond)
	if got := latencyOf(); got < 499*time.Millisecond || got > 501*time.Millisecond {
		t.Fatalf("latency = %v, want 500ms", got)
	}
}

// TestBadLatencyChangesNothing: a negative or too long latency, or one
// without an outcome, is refused and nothing is recorded or released.
func TestBadLatencyChangesNothing(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	l := mustAcquire(t, p, "x")
	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"negative, release", func() error { return second(p.ReleaseTimed(l.ID, l.Token, Success, -time.Millisecond)) }},
		{"too long, release", func() error { return second(p.ReleaseTimed(l.ID, l.Token, Success, MaxLatency+1)) }},
		{"without an outcome, release", func() error { return second(p.ReleaseTimed(l.ID, l.Token, 0, time.Second)) }},
		{"negative, release next", func() error {
			_, _, _, err := p.ReleaseNextTimed(l.ID, l.Token, Failure, -1, Next{Context: "x", TTL: time.Minute})
			return err
		}},
		{"negative, report", func() error {
			return second(p.Report(Report{Resource: "a", Context: "x", Outcome: Success, Latency: -1}))
		}},
	} {
		if err := tt.call(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tt.name, err)
		}
	}
	if p.ActiveLeases() != 1 || p.HasCell("a", "x") {
		t.Fatal("a refused latency released the lease or recorded an outcome")
	}
	if _, err := p.ReleaseTimed(l.ID, l.Token, Success, 250*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if info, _ := p.Get("a"); info.Contexts[0].Latency != 250*time.Millisecond {
		t.Fatalf("latency after ReleaseTimed = %v, want 250ms", info.Contexts[0].Latency)
	}
}

// TestTimedHotPathDoesNotAllocate: the timed calls and the time objective
// keep Acquire, Release and Report free of allocations.
func TestTimedHotPathDoesNotAllocate(t *testing.T) {
	p, _ := newTestPool(t, Config{Objective: ObjectiveSuccessPerTime})
	for i := range 200 {
		register(t, p, Spec{ID: "r" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	for range 500 { // warm up: cells, boards and tables grown
		l := mustAcquire(t, p, "x")
		if _, err := p.ReleaseTimed(l.ID, l.Token, Success, 30*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if got := testing.AllocsPerRun(500, func() {
		l, err := p.Acquire("x", time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Report(Report{Resource: l.Resource, Context: "x", Outcome: Failure, LeaseID: l.ID, Token: l.Token, Latency: time.Second}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.ReleaseTimed(l.ID, l.Token, Success, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}); got != 0 {
		t.Fatalf("timed Acquire+Report+Release allocates %v times per call, want 0", got)
	}
}
