package pool

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRecentWindowKeepsTheLatestOutcomes(t *testing.T) {
	var w recent
	var ref []bool
	for i := range 200 {
		s := i%3 == 0 || i%7 == 0
		w.add(s)
		ref = append(ref, s)
		if len(ref) > RecentWindow {
			ref = ref[1:]
		}
		wantS := 0
		for _, x := range ref {
			if x {
				wantS++
			}
		}
		if gs, gf := w.counts(); gs != wantS || gf != len(ref)-wantS {
			t.Fatalf("after %d outcomes: counts %d/%d, want %d/%d", i+1, gs, gf, wantS, len(ref)-wantS)
		}
	}
}

// TestRecentCountsTellWhatThePosteriorHides is the reported case: a proxy
// with a long good history that now fails 90% of its calls. Its decayed
// posterior (prior included) still says it mostly succeeds; its recent
// counts say what it does now.
func TestRecentCountsTellWhatThePosteriorHides(t *testing.T) {
	p, fc := newTestPool(t, Config{QuarantineBelow: -1, FailuresToQuarantine: 1000, FailuresToQuarantineWhole: 1000})
	register(t, p, Spec{ID: "a"})
	report(t, p, "a", "x", Success, 500)
	fc.Advance(time.Minute)
	for range 6 {
		report(t, p, "a", "x", Success, 1)
		report(t, p, "a", "x", Failure, 9)
	}
	info, err := p.Get("a")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []ContextStats{info.Aggregate, info.Contexts[0]} {
		if s.SuccessRate < 0.8 {
			t.Fatalf("%q: posterior %v; the test wants one that hides the failures", s.Context, s.SuccessRate)
		}
		// The last 63: 3 of the early successes, then 6 × (1 success, 9 failures).
		if s.RecentSuccesses != 9 || s.RecentFailures != 54 {
			t.Fatalf("%q: recent %d successes, %d failures; want 9 and 54", s.Context, s.RecentSuccesses, s.RecentFailures)
		}
	}
	s := p.Snapshot()
	q, _ := newTestPool(t, Config{})
	if err := q.Restore(s); err != nil {
		t.Fatal(err)
	}
	back, _ := q.Get("a")
	if back.Aggregate.RecentFailures != info.Aggregate.RecentFailures || back.Contexts[0].RecentSuccesses != info.Contexts[0].RecentSuccesses {
		t.Fatalf("restored recent counts %+v, want %+v", back, info)
	}
}

func TestRetireAfterMaxUses(t *testing.T) {
	p, _ := newTestPool(t, Config{MaxUses: 5})
	register(t, p, Spec{ID: "a", MaxUses: 2, Capacity: 3})
	sub := p.Subscribe(KindsOf(EventRetired), 0)
	defer sub.Close()
	mustAcquire(t, p, "x")
	if info, _ := p.Get("a"); info.State != StateActive || info.Uses != 1 {
		t.Fatalf("after 1 use: %+v", info)
	}
	last := mustAcquire(t, p, "x")
	info, _ := p.Get("a")
	if info.State != StateRetired || info.RetiredReason != "max_uses 2 reached" || info.Uses != 2 || info.MaxUses != 2 {
		t.Fatalf("after 2 uses: %+v, want retired for max_uses 2", info)
	}
	if ev := drain(sub); len(ev) != 1 || ev[0].Resource != "a" || ev[0].Detail != "max_uses 2 reached" {
		t.Fatalf("events = %+v, want one retired a", ev)
	}
	_, err := p.Acquire("x", time.Minute, nil)
	var ex *ExhaustedError
	if !errors.As(err, &ex) || ex.Why != WhyAllRetired {
		t.Fatalf("Acquire with only a retired resource = %v, want %s", err, WhyAllRetired)
	}
	// The lease out runs its course and its outcome counts.
	if _, err := p.Release(last.ID, last.Token, Success); err != nil {
		t.Fatalf("releasing the last lease of a retired resource: %v", err)
	}
	if _, existing, _ := p.Register([]Spec{{ID: "a"}}); existing != 1 {
		t.Fatal("registering a retired id again created it")
	}
	if info, _ := p.Get("a"); info.State != StateRetired {
		t.Fatalf("registering a retired id again changed it: %+v", info)
	}
	if _, _, err := p.Register([]Spec{{ID: "c", MaxUses: -1}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Register(max_uses -1) = %v, want ErrInvalidArgument", err)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestRetireAfterMaxAge(t *testing.T) {
	p, fc := newTestPool(t, Config{MaxAge: time.Hour})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b", MaxAge: 2 * time.Hour})
	fc.Advance(time.Hour - time.Second)
	p.Tick()
	if info, _ := p.Get("a"); info.State != StateActive {
		t.Fatalf("a second before max_age: %+v", info)
	}
	fc.Advance(time.Second)
	if l := mustAcquire(t, p, "x"); l.Resource != "b" {
		t.Fatalf("Acquire at a's max_age leased %s, want b", l.Resource)
	}
	info, _ := p.Get("a")
	if info.State != StateRetired || info.RetiredReason != "max_age 1h0m0s reached" || !info.RegisteredAt.Equal(t0) || info.MaxAge != time.Hour {
		t.Fatalf("a at max_age: %+v", info)
	}
	// b is restored elsewhere and keeps its registration time.
	q, qc := newTestPool(t, Config{})
	qc.Set(fc.Now())
	if err := q.Restore(p.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if info, _ := q.Get("a"); info.State != StateRetired || info.RetiredReason != "max_age 1h0m0s reached" {
		t.Fatalf("restored a: %+v", info)
	}
	qc.Advance(time.Hour - time.Second)
	q.Tick()
	if info, _ := q.Get("b"); info.State != StateActive {
		t.Fatalf("restored b before its max_age: %+v", info)
	}
	qc.Advance(time.Second)
	q.Tick()
	if info, _ := q.Get("b"); info.State != StateRetired || info.RetiredReason != "max_age 2h0m0s reached" {
		t.Fatalf("restored b at its max_age, 2h after its registration: %+v", info)
	}
}

func TestSetPolicyRetiresAtOnce(t *testing.T) {
	p, fc := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b", MaxUses: 10})
	for range 3 {
		l := mustAcquire(t, p, "x")
		if _, err := p.Release(l.ID, l.Token, Success); err != nil {
			t.Fatal(err)
		}
	}
	fc.Advance(10 * time.Minute)
	if err := p.SetPolicy(Policy{MaxAge: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if info, _ := p.Get(id); info.State != StateRetired || !strings.HasPrefix(info.RetiredReason, "max_age 5m0s") {
			t.Fatalf("%s after max_age 5m, registered 10m ago: %+v", id, info)
		}
	}
	if err := p.SetPolicy(Policy{MaxUses: -1}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SetPolicy(MaxUses -1) = %v", err)
	}
}

func TestImposeAndLiftQuarantine(t *testing.T) {
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 2, QuarantineBelow: -1})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	sub := p.Subscribe(KindsOf(EventBlocked, EventRecovered), 0)
	defer sub.Close()
	if _, err := p.Quarantine("a", 0, "test"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Quarantine(0s) = %v, want ErrInvalidArgument", err)
	}
	if _, err := p.Quarantine("zz", time.Minute, "test"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Quarantine(unknown) = %v, want ErrNotFound", err)
	}
	info, err := p.Quarantine("a", 10*time.Minute, "operator")
	if err != nil || info.Quarantine != QuarantineBlocked || !info.BlockedUntil.Equal(fc.Now().Add(10*time.Minute)) {
		t.Fatalf("Quarantine = %+v, %v", info, err)
	}
	for range 10 {
		l := mustAcquire(t, p, "x")
		if l.Resource != "a" && l.Resource != "b" || l.Resource == "a" {
			t.Fatalf("leased %s during an imposed quarantine", l.Resource)
		}
		if _, err := p.Release(l.ID, l.Token, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Survives a restore, still imposed.
	s := p.Snapshot()
	if s.Resources[0].ID != "a" || !s.Resources[0].Imposed {
		t.Fatalf("snapshot of a: %+v, want imposed", s.Resources[0])
	}
	q, qc := newTestPool(t, Config{FailuresToQuarantine: 2, QuarantineBelow: -1})
	qc.Set(fc.Now())
	if err := q.Restore(s); err != nil {
		t.Fatal(err)
	}
	if info, _ := q.Get("a"); info.Quarantine != QuarantineBlocked {
		t.Fatalf("restored a: %+v", info)
	}
	// Lift ends it and a per-context quarantine.
	report(t, p, "a", "y", Failure, 2)
	info, err = p.Lift("a", "operator")
	if err != nil || info.Quarantine != QuarantineNone || info.Contexts[0].Quarantine != QuarantineNone || info.Contexts[0].ConsecutiveFailures != 0 {
		t.Fatalf("Lift = %+v, %v", info, err)
	}
	ev := drain(sub)
	var lifted int
	for _, e := range ev {
		if e.Kind == EventRecovered && e.Detail == "lifted: operator" {
			lifted++
		}
	}
	if lifted != 2 || ev[0].Detail != "imposed: operator; cooldown 10m0s" {
		t.Fatalf("events %+v, want the imposed block and two lifts", ev)
	}
	seen := false
	for range 40 {
		l := mustAcquire(t, p, "y")
		seen = seen || l.Resource == "a"
		if _, err := p.Release(l.ID, l.Token, 0); err != nil {
			t.Fatal(err)
		}
	}
	if !seen {
		t.Fatal("a lifted resource is not leased for the context it was quarantined for")
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestQuarantineShareCap(t *testing.T) {
	p, _ := newTestPool(t, Config{FailuresToQuarantine: 3, QuarantineBelow: -1, FailuresToQuarantineWhole: 1000})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"}, Spec{ID: "c"}, Spec{ID: "d"})
	sub := p.Subscribe(KindsOf(EventCapped), 0)
	defer sub.Close()
	// a is good but had a bad run; b and c fail throughout.
	report(t, p, "a", "x", Success, 20)
	report(t, p, "a", "x", Failure, 3)
	report(t, p, "b", "x", Failure, 3)
	if ev := drain(sub); len(ev) != 0 {
		t.Fatalf("2 of 4 quarantined (the default cap, 0.5): events %+v, want none", ev)
	}
	report(t, p, "c", "x", Failure, 3)
	ev := drain(sub)
	if len(ev) != 1 || ev[0].Resource != "a" || ev[0].Context != "x" || !strings.Contains(ev[0].Detail, "max_quarantined_share 0.5") {
		t.Fatalf("3 of 4 quarantined: events %+v, want a (the least bad) served again", ev)
	}
	quarantined := 0
	for _, id := range []string{"a", "b", "c", "d"} {
		if info, _ := p.Get(id); len(info.Contexts) > 0 && info.Contexts[0].Quarantine != QuarantineNone {
			quarantined++
		}
	}
	if quarantined != 2 {
		t.Fatalf("%d quarantined for x, want 2 (the cap)", quarantined)
	}
	// Its next failure quarantines it again, beyond the cap: it is still
	// the least bad, so it is served again.
	report(t, p, "a", "x", Failure, 1)
	if ev := drain(sub); len(ev) != 1 || ev[0].Resource != "a" {
		t.Fatalf("a failing again: events %+v, want a served again", ev)
	}
	if info, _ := p.Get("b"); info.Contexts[0].Quarantine != QuarantineBlocked {
		t.Fatalf("b: %+v", info.Contexts[0])
	}
	// A share of 1 turns the cap off.
	if err := p.SetPolicy(Policy{FailuresToQuarantine: 3, QuarantineBelow: -1, FailuresToQuarantineWhole: 1000, MaxQuarantinedShare: 1}); err != nil {
		t.Fatal(err)
	}
	drain(sub)
	report(t, p, "d", "x", Failure, 3)
	report(t, p, "b", "x", Failure, 3)
	report(t, p, "c", "x", Failure, 3)
	if ev := drain(sub); len(ev) != 0 {
		t.Fatalf("with the cap off: events %+v", ev)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestQuarantineShareCapWholeLeavesImposed(t *testing.T) {
	p, _ := newTestPool(t, Config{FailuresToQuarantineWhole: 2, FailuresToQuarantine: 1000, QuarantineBelow: -1})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"}, Spec{ID: "c"}, Spec{ID: "d"})
	sub := p.Subscribe(KindsOf(EventCapped), 0)
	defer sub.Close()
	if _, err := p.Quarantine("a", time.Minute, "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Quarantine("b", time.Minute, "op"); err != nil {
		t.Fatal(err)
	}
	report(t, p, "c", "x", Success, 5)
	report(t, p, "c", "x", Failure, 2)
	ev := drain(sub)
	if len(ev) != 1 || ev[0].Resource != "c" || ev[0].Context != "" {
		t.Fatalf("events %+v, want c served again, not an imposed one", ev)
	}
	for _, id := range []string{"a", "b"} {
		if info, _ := p.Get(id); info.Quarantine != QuarantineBlocked {
			t.Fatalf("imposed %s: %+v", id, info)
		}
	}
}
