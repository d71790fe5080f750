package pool

import (
	"errors"
	"testing"
	"time"
)

func TestReleaseNextReleasesAndLeasesInOneCall(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	first := mustAcquire(t, p, "search")
	_, next, nextErr, err := p.ReleaseNext(first.ID, first.Token, Success, Next{Context: "search", TTL: time.Minute})
	if err != nil || nextErr != nil {
		t.Fatalf("ReleaseNext = %v, %v", nextErr, err)
	}
	if next.ID == first.ID || next.Token <= first.Token {
		t.Fatalf("next lease %+v does not follow %+v", next, first)
	}
	if got := p.ActiveLeases(); got != 1 {
		t.Fatalf("active leases = %d, want 1 (the first released, the next held)", got)
	}
	if !p.HasCell(first.Resource, "search") {
		t.Fatal("the outcome was not recorded")
	}
}

func TestReleaseNextReleasesEvenWhenNothingIsFree(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"}, Spec{ID: "x", Labels: map[string]string{"tier": "gold"}})
	l, err := p.Acquire("search", time.Minute, map[string]string{"tier": "gold"})
	if err != nil {
		t.Fatal(err)
	}
	// The only gold resource is the one being released, but a next lease
	// asking for "silver" finds none: the release stands.
	_, _, nextErr, err := p.ReleaseNext(l.ID, l.Token, 0, Next{Context: "search", TTL: time.Minute, Labels: map[string]string{"tier": "silver"}})
	var ex *ExhaustedError
	if err != nil || !errors.As(nextErr, &ex) || ex.Why != WhyNoneMatch {
		t.Fatalf("ReleaseNext = next %v, err %v; want the release done and none_match", nextErr, err)
	}
	if got := p.ActiveLeases(); got != 0 {
		t.Fatalf("active leases = %d, want 0", got)
	}
}

func TestReleaseNextWithBadNextChangesNothing(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	l := mustAcquire(t, p, "search")
	for name, n := range map[string]Next{
		"no context": {TTL: time.Minute},
		"ttl zero":   {Context: "search"},
		"bad label":  {Context: "search", TTL: time.Minute, Labels: map[string]string{"": "x"}},
	} {
		if _, _, _, err := p.ReleaseNext(l.ID, l.Token, Success, n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: ReleaseNext = %v, want ErrInvalidArgument", name, err)
		}
	}
	if got := p.ActiveLeases(); got != 1 {
		t.Fatalf("active leases = %d, want 1: a refused call must not release", got)
	}
	if _, _, _, err := p.ReleaseNext(l.ID, l.Token+1, Success, Next{Context: "search", TTL: time.Minute}); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("stale token: ReleaseNext = %v, want ErrStaleToken", err)
	}
}

func TestExhaustedSaysWhy(t *testing.T) {
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 2, CooldownBase: 30 * time.Second})
	why := func() *ExhaustedError {
		t.Helper()
		_, err := p.Acquire("search", time.Minute, nil)
		var ex *ExhaustedError
		if !errors.As(err, &ex) || !errors.Is(err, ErrExhausted) {
			t.Fatalf("Acquire = %v, want an *ExhaustedError", err)
		}
		return ex
	}
	if ex := why(); ex.Why != WhyNoneRegistered {
		t.Fatalf("empty pool: why = %s", ex.Why)
	}
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	mustAcquire(t, p, "search")
	l := mustAcquire(t, p, "search")
	ex := why()
	if ex.Why != WhyAllLeased || !ex.FreesAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("all leased: %+v, want all_leased freeing at %v", ex, t0.Add(time.Minute))
	}
	// Quarantine b for "search", then a too once its lease ends.
	p.Release(l.ID, l.Token, 0)
	report(t, p, "a", "search", Failure, 2)
	report(t, p, "b", "search", Failure, 2)
	fc.Advance(time.Second)
	ex = why()
	if ex.Why != WhyLeasedOrQuarantined && ex.Why != WhyAllQuarantined {
		t.Fatalf("quarantined: why = %s", ex.Why)
	}
	if ex.FreesAt.IsZero() || ex.FreesAt.After(t0.Add(time.Minute)) {
		t.Fatalf("quarantined: frees at %v, want the earliest of the cooldown ends and the lease expiry", ex.FreesAt)
	}
	if _, err := p.Acquire("search", time.Minute, map[string]string{"k": "v"}); !errors.As(err, &ex) || ex.Why != WhyNoneMatch {
		t.Fatalf("selector without a match: %v", err)
	}
	p.SetMaxLeases(1)
	if _, err := p.Acquire("order", time.Minute, nil); !errors.As(err, &ex) || ex.Why != WhyLeaseLimit {
		t.Fatalf("lease limit: %v", err)
	}
}
