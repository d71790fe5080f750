package pool

import (
	"testing"
	"time"
)

// TestQuarantinedCountsWhatIsQuarantinedNow: the gauge's source counts a
// cell and a whole resource while they are quarantined (blocked, then
// awaiting a probe) and not once a probe succeeded; Counters.Outcomes
// counts reports by outcome.
func TestQuarantinedCountsWhatIsQuarantinedNow(t *testing.T) {
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 2, FailuresToQuarantineWhole: 1000, CooldownBase: 10 * time.Second, CooldownJitter: -1, QuarantineBelow: -1})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"}, Spec{ID: "c"})
	check := func(wantRes, wantCells int) {
		t.Helper()
		if r, c := p.Quarantined(); r != wantRes || c != wantCells {
			t.Fatalf("Quarantined() = %d resources, %d cells; want %d, %d", r, c, wantRes, wantCells)
		}
	}
	check(0, 0)
	report(t, p, "a", "x", Success, 3)
	report(t, p, "a", "x", Failure, 2)
	report(t, p, "b", "y", Blocked, 1)
	check(0, 2)
	fc.Advance(10 * time.Second) // cooldown over: awaiting a probe is still quarantined
	check(0, 2)
	probe := mustAcquire(t, p, "x")
	if probe.Resource != "a" {
		t.Fatalf("Acquire(x) = %s, want the probe on a", probe.Resource)
	}
	if _, err := p.Release(probe.ID, probe.Token, Success); err != nil {
		t.Fatal(err)
	}
	check(0, 1)
	n := p.Counters()
	if got, want := n.Outcomes, [Blocked + 1]uint64{0, 4, 2, 1}; got != want {
		t.Fatalf("Counters().Outcomes = %v, want %v", got, want)
	}
	if sum := n.Outcomes[Success] + n.Outcomes[Failure] + n.Outcomes[Blocked]; sum != n.Reports {
		t.Fatalf("outcomes sum to %d, Reports = %d", sum, n.Reports)
	}
}

// TestQuarantinedCountsWholeResources: a resource quarantined for every
// context counts as a resource.
func TestQuarantinedCountsWholeResources(t *testing.T) {
	p, _ := newTestPool(t, Config{FailuresToQuarantine: 1000, FailuresToQuarantineWhole: 1, CooldownBase: 10 * time.Second, CooldownJitter: -1, QuarantineBelow: -1})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	report(t, p, "a", "x", Failure, 1)
	if r, _ := p.Quarantined(); r != 1 {
		t.Fatalf("Quarantined() = %d resources, want 1", r)
	}
}
