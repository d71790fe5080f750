package pool

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAcquireExcluding: an excluded resource is never leased, however good
// its statistics; unknown ids are ignored; when every resource that could
// serve now is excluded the answer says so (all_excluded), not that the
// pool is leased out.
func TestAcquireExcluding(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	for i := range 10 {
		register(t, p, Spec{ID: fmt.Sprintf("r%d", i), Capacity: 1000})
	}
	report(t, p, "r0", "job", Success, 200) // the best by far
	exclude := []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "no-such-resource"}
	for range 500 {
		l, err := p.AcquireExcluding("job", time.Minute, nil, exclude)
		if err != nil || l.Resource != "r9" {
			t.Fatalf("AcquireExcluding(all but r9) = %+v, %v; want r9", l, err)
		}
	}
	_, err := p.AcquireExcluding("job", time.Minute, nil, append(exclude, "r9"))
	var ex *ExhaustedError
	if !errors.As(err, &ex) || ex.Why != WhyAllExcluded || !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), `context "job"`) {
		t.Fatalf("AcquireExcluding(every resource) = %v, want ErrExhausted why %s", err, WhyAllExcluded)
	}
	// Quarantined or full resources are not counted as excluded ones that
	// could serve: the answer is about them.
	q, _ := newTestPool(t, Config{})
	register(t, q, Spec{ID: "a"}, Spec{ID: "b"})
	mustAcquire(t, q, "job")
	mustAcquire(t, q, "job")
	if _, err := q.AcquireExcluding("job", time.Minute, nil, []string{"a"}); !errors.As(err, &ex) || ex.Why != WhyAllLeased {
		t.Fatalf("AcquireExcluding with everything leased = %v, want why %s", err, WhyAllLeased)
	}
	if c := q.Counters(); c.Exhausted != 1 {
		t.Fatalf("Exhausted = %d after one refused acquire, want 1", c.Exhausted)
	}
}

// TestAcquireExcludingValidates: too many ids, or a bad one, is an invalid
// argument naming the field, and nothing is leased.
func TestAcquireExcludingValidates(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	many := make([]string, MaxExclude+1)
	for i := range many {
		many[i] = fmt.Sprintf("x%d", i)
	}
	for _, tc := range []struct {
		exclude []string
		want    string
	}{
		{many, "exclude names 33 resources; at most 32"},
		{[]string{"ok", ""}, "exclude[1]"},
	} {
		if _, err := p.AcquireExcluding("job", time.Minute, nil, tc.exclude); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AcquireExcluding(%d ids) = %v, want an invalid argument saying %q", len(tc.exclude), err, tc.want)
		}
	}
	if _, _, _, err := p.ReleaseNext(1, 1, Failure, Next{Context: "job", TTL: time.Minute, Exclude: many}); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "next.exclude") {
		t.Errorf("ReleaseNext with 33 excluded = %v, want an invalid argument naming next.exclude", err)
	}
	if n := p.Counters().Acquired; n != 0 {
		t.Fatalf("%d leases granted by refused calls, want 0", n)
	}
}

// TestReleaseNextAfterAFailureMovesOn: after a FAILURE or BLOCKED outcome
// the next lease is another resource, even the best one failing; with
// keep_failed, or after a success, it may be the same; when the failed one
// is the only one that can serve, it is leased again rather than none.
func TestReleaseNextAfterAFailureMovesOn(t *testing.T) {
	// Failures never quarantine here: the test is about the choice.
	p, _ := newTestPool(t, Config{FailuresToQuarantine: 1 << 20, FailuresToQuarantineWhole: 1 << 20, QuarantineBelow: -1})
	register(t, p, Spec{ID: "best", Capacity: 1}, Spec{ID: "other", Capacity: 1})
	report(t, p, "best", "job", Success, 500)
	report(t, p, "other", "job", Success, 5)
	same := 0
	for range 200 {
		l := mustAcquire(t, p, "job")
		_, next, nextErr, err := p.ReleaseNext(l.ID, l.Token, Failure, Next{Context: "job", TTL: time.Minute})
		if err != nil || nextErr != nil {
			t.Fatalf("ReleaseNext(FAILURE) = %v, %v", err, nextErr)
		}
		if next.Resource == l.Resource {
			same++
		}
		if _, err := p.Release(next.ID, next.Token, 0); err != nil {
			t.Fatal(err)
		}
	}
	if same != 0 {
		t.Fatalf("the next lease after a failure was the failed resource %d times of 200, want 0", same)
	}

	keep := 0
	for range 50 {
		l := mustAcquire(t, p, "job")
		if l.Resource != "best" {
			continue
		}
		_, next, _, err := p.ReleaseNext(l.ID, l.Token, Failure, Next{Context: "job", TTL: time.Minute, KeepFailed: true})
		if err != nil {
			t.Fatal(err)
		}
		if next.Resource == "best" {
			keep++
		}
		_, _ = p.Release(next.ID, next.Token, 0)
	}
	if keep == 0 {
		t.Fatal("with keep_failed the best resource was never leased again after its failure, want it to stay a candidate")
	}

	// The failed resource is the only one that can serve: leased again.
	solo, _ := newTestPool(t, Config{})
	register(t, solo, Spec{ID: "only"})
	l := mustAcquire(t, solo, "job")
	_, next, nextErr, err := solo.ReleaseNext(l.ID, l.Token, Blocked, Next{Context: "job", TTL: time.Minute})
	var ex *ExhaustedError
	if err != nil || nextErr == nil || !errors.As(nextErr, &ex) || ex.Why == WhyAllExcluded {
		// BLOCKED quarantines it for the context: nothing can serve, and
		// the answer says so in the pool's own words.
		t.Fatalf("ReleaseNext(BLOCKED) of the only resource = %+v, %v, %v; want no lease, why quarantined", next, nextErr, err)
	}
	two, _ := newTestPool(t, Config{})
	register(t, two, Spec{ID: "only"}, Spec{ID: "busy"})
	mustAcquire(t, two, "other-job") // holds one of the two, whichever
	l = mustAcquire(t, two, "job")
	_, next, nextErr, err = two.ReleaseNext(l.ID, l.Token, Failure, Next{Context: "job", TTL: time.Minute})
	if err != nil || nextErr != nil || next.Resource != l.Resource {
		t.Fatalf("ReleaseNext(FAILURE) when the failed resource is the only free one = %+v, %v, %v; want it leased again", next, nextErr, err)
	}
	if c := two.Counters(); c.Exhausted != 0 {
		t.Fatalf("Exhausted = %d, want 0: the next lease was granted", c.Exhausted)
	}
	// An explicit exclusion of the only free one is kept.
	l = next
	_, _, nextErr, err = two.ReleaseNext(l.ID, l.Token, Success, Next{Context: "job", TTL: time.Minute, Exclude: []string{l.Resource}})
	if err != nil || !errors.As(nextErr, &ex) || ex.Why != WhyAllExcluded {
		t.Fatalf("ReleaseNext excluding the only free resource = %v, %v; want why %s", nextErr, err, WhyAllExcluded)
	}
}

// TestAcquireExcludingAllocates: excluding allocates nothing more than a
// plain acquire (nothing, on success).
func TestAcquireExcludingAllocates(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	for i := range 64 {
		register(t, p, Spec{ID: fmt.Sprintf("r%d", i), Capacity: 1 << 20})
	}
	exclude := []string{"r1", "r2", "r3"}
	_, _ = p.AcquireExcluding("job", time.Hour, nil, exclude)
	if n := testing.AllocsPerRun(200, func() {
		if _, err := p.AcquireExcluding("job", time.Hour, nil, exclude); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("AcquireExcluding allocates %v times per call, want 0", n)
	}
}

// TestRecoveryKeepsHistory: a resource that failed most of its calls and
// was quarantined keeps its decayed history when one probe succeeds — its
// counts are not reset to the prior's few — so that, under a policy whose
// QuarantineBelow is above its kept rate, its next failure quarantines it
// again at once instead of after FailuresToQuarantine more.
func TestRecoveryKeepsHistory(t *testing.T) {
	p, fc := newTestPool(t, Config{QuarantineBelow: 0.3})
	register(t, p, Spec{ID: "bad"})
	for i := range 20 { // 2 successes in 20: quarantined for its low rate
		o := Failure
		if i%10 == 0 {
			o = Success
		}
		if _, err := p.Report(Report{Resource: "bad", Context: "job", Outcome: o}); err != nil {
			t.Fatal(err)
		}
	}
	info, _ := p.Get("bad")
	if len(info.Contexts) != 1 || info.Contexts[0].Quarantine != QuarantineBlocked {
		t.Fatalf("after 18 failures in 20: %+v, want the cell quarantined", info.Contexts)
	}
	fc.Advance(time.Hour) // the cooldown ends: the next acquire is the probe
	l := mustAcquire(t, p, "job")
	if _, err := p.Release(l.ID, l.Token, Success); err != nil {
		t.Fatal(err)
	}
	info, _ = p.Get("bad")
	c := info.Contexts[0]
	if c.Quarantine != QuarantineNone || c.SuccessRate > 0.3 || c.Failures < 5 {
		t.Fatalf("after a successful probe: %+v; want out of quarantine with its history kept (its failures, its low rate), not the prior's", c)
	}
	l = mustAcquire(t, p, "job")
	if _, err := p.Release(l.ID, l.Token, Failure); err != nil {
		t.Fatal(err)
	}
	if info, _ = p.Get("bad"); info.Contexts[0].Quarantine != QuarantineBlocked {
		t.Fatalf("after one failure following the probe: %+v, want quarantined again at once", info.Contexts[0])
	}
}
