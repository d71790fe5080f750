package pool

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func affine(t *testing.T, p *Pool, ctx, key string) Lease {
	t.Helper()
	l, err := p.AcquireAffine(ctx, time.Minute, nil, nil, Affinity{Key: key})
	if err != nil {
		t.Fatalf("AcquireAffine(%q, %q) = %v", ctx, key, err)
	}
	return l
}

// TestAffinityKeepsTheSameResource: while the bound resource is healthy
// and has capacity, every acquire with the key gets it, however much
// better the others look; other keys spread over the pool.
func TestAffinityKeepsTheSameResource(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	for i := range 10 {
		register(t, p, Spec{ID: fmt.Sprintf("r%d", i), Capacity: 100})
	}
	first := affine(t, p, "login", "alice")
	if first.Rebound {
		t.Fatal("a new key's first lease says Rebound")
	}
	for i := range 10 {
		if fmt.Sprintf("r%d", i) != first.Resource {
			report(t, p, fmt.Sprintf("r%d", i), "login", Success, 50) // the others look much better
		}
	}
	for range 50 {
		l := affine(t, p, "login", "alice")
		if l.Resource != first.Resource || l.Rebound {
			t.Fatalf("key alice got %s (rebound %v), want its bound %s", l.Resource, l.Rebound, first.Resource)
		}
		if _, err := p.Release(l.ID, l.Token, Success); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for i := range 40 {
		seen[affine(t, p, "login", fmt.Sprintf("user-%d", i)).Resource] = true
	}
	if len(seen) < 3 {
		t.Fatalf("40 keys were bound to %d resources, want them spread", len(seen))
	}
	if res, _, ok := p.Binding("login", "alice"); !ok || res != first.Resource {
		t.Fatalf("Binding(login, alice) = %q, %v; want %s", res, ok, first.Resource)
	}
	if _, _, ok := p.Binding("other-context", "alice"); ok {
		t.Fatal("a key's binding is per context: another context has none")
	}
}

// TestAffinityRebinds: the key moves to another resource (Rebound, and
// stays there) when its resource fails a release or a report on the
// key's lease, is quarantined, is
// full, is retired, is removed, or is excluded.
func TestAffinityRebinds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, p *Pool, bound Lease)
	}{
		{"failed release", func(t *testing.T, p *Pool, l Lease) {
			if _, err := p.Release(l.ID, l.Token, Failure); err != nil {
				t.Fatal(err)
			}
		}},
		{"blocked release", func(t *testing.T, p *Pool, l Lease) {
			if _, err := p.Release(l.ID, l.Token, Blocked); err != nil {
				t.Fatal(err)
			}
		}},
		{"failure reported on the lease, released without an outcome", func(t *testing.T, p *Pool, l Lease) {
			if _, err := p.Report(Report{Resource: l.Resource, Context: l.Context, Outcome: Failure, LeaseID: l.ID, Token: l.Token}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Release(l.ID, l.Token, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"quarantined", func(t *testing.T, p *Pool, l Lease) {
			if _, err := p.Quarantine(l.Resource, time.Hour, "test"); err != nil {
				t.Fatal(err)
			}
		}},
		{"at capacity", func(t *testing.T, p *Pool, l Lease) {
			// l itself holds the capacity-1 resource
		}},
		{"removed", func(t *testing.T, p *Pool, l Lease) {
			if _, _, err := p.Deregister([]string{l.Resource}); err != nil {
				t.Fatal(err)
			}
		}},
		{"retired", func(t *testing.T, p *Pool, l Lease) {
			if _, err := p.Release(l.ID, l.Token, Success); err != nil {
				t.Fatal(err)
			}
			if err := p.SetPolicy(Policy{MaxUses: 2}); err != nil {
				t.Fatal(err)
			}
			again := affine(t, p, "cart", "k") // its second use retires it
			if _, err := p.Release(again.ID, again.Token, Success); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPool(t, Config{})
			register(t, p, Spec{ID: "a"}, Spec{ID: "b"}, Spec{ID: "c"})
			bound := affine(t, p, "cart", "k")
			tc.break_(t, p, bound)
			l := affine(t, p, "cart", "k")
			if l.Resource == bound.Resource || !l.Rebound {
				t.Fatalf("after %s: key got %s (rebound %v), want another than %s, rebound", tc.name, l.Resource, l.Rebound, bound.Resource)
			}
			if _, err := p.Release(l.ID, l.Token, Success); err != nil {
				t.Fatal(err)
			}
			again := affine(t, p, "cart", "k")
			if again.Resource != l.Resource || again.Rebound {
				t.Fatalf("after the rebind the key got %s (rebound %v), want %s again", again.Resource, again.Rebound, l.Resource)
			}
			if c := p.Counters(); c.Rebound != 1 {
				t.Fatalf("Rebound = %d, want 1", c.Rebound)
			}
		})
	}
	t.Run("excluded", func(t *testing.T) {
		p, _ := newTestPool(t, Config{})
		register(t, p, Spec{ID: "a", Capacity: 5}, Spec{ID: "b", Capacity: 5})
		bound := affine(t, p, "cart", "k")
		l, err := p.AcquireAffine("cart", time.Minute, nil, []string{bound.Resource}, Affinity{Key: "k"})
		if err != nil || l.Resource == bound.Resource || !l.Rebound {
			t.Fatalf("AcquireAffine excluding the bound resource = %+v, %v", l, err)
		}
	})
}

// TestAffinityAfterAFailureWithOneResource: a failed key whose resource
// is the only one that can serve gets it again rather than nothing.
func TestAffinityAfterAFailureWithOneResource(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "only"})
	l := affine(t, p, "job", "k")
	if _, err := p.Release(l.ID, l.Token, Failure); err != nil {
		t.Fatal(err)
	}
	if again := affine(t, p, "job", "k"); again.Resource != "only" {
		t.Fatalf("got %s, want the only resource", again.Resource)
	}
}

// TestReleaseNextWithAffinity: a release's next carries the key; after a
// failure it moves the key, after a success it keeps it.
func TestReleaseNextWithAffinity(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a", Capacity: 4}, Spec{ID: "b", Capacity: 4}, Spec{ID: "c", Capacity: 4})
	l := affine(t, p, "job", "k")
	next := Next{Context: "job", TTL: time.Minute, Affinity: Affinity{Key: "k"}}
	_, n, nextErr, err := p.ReleaseNext(l.ID, l.Token, Success, next)
	if err != nil || nextErr != nil || n.Resource != l.Resource || n.Rebound {
		t.Fatalf("ReleaseNext(success, affinity) = %+v, %v, %v; want %s again", n, nextErr, err, l.Resource)
	}
	_, m, nextErr, err := p.ReleaseNext(n.ID, n.Token, Failure, next)
	if err != nil || nextErr != nil || m.Resource == n.Resource || !m.Rebound {
		t.Fatalf("ReleaseNext(failure, affinity) = %+v, %v, %v; want another than %s", m, nextErr, err, n.Resource)
	}
	if _, _, _, err := p.ReleaseNext(m.ID, m.Token, Success, Next{Context: "job", TTL: time.Minute, Affinity: Affinity{Key: "bad\x00key"}}); err == nil || !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("ReleaseNext with a bad key = %v, want ErrInvalidArgument", err)
	}
}

// TestAffinityExpires: a binding lasts its TTL after its last use; a use
// extends it; past it the key is bound afresh and the binding's cell is
// given back.
func TestAffinityExpires(t *testing.T) {
	g := &countGate{ceiling: 100}
	p, fc := newTestPool(t, Config{Gate: g})
	register(t, p, Spec{ID: "a", Capacity: 100}, Spec{ID: "b", Capacity: 100})
	aff := Affinity{Key: "k", TTL: 10 * time.Minute}
	if _, err := p.AcquireAffine("job", time.Minute, nil, nil, aff); err != nil {
		t.Fatal(err)
	}
	if _, cells := g.counts(); cells != BindingCells {
		t.Fatalf("a binding charged %d cells, want %d", cells, BindingCells)
	}
	fc.Advance(9 * time.Minute)
	if _, err := p.AcquireAffine("job", time.Minute, nil, nil, aff); err != nil { // extends to 19 min
		t.Fatal(err)
	}
	fc.Advance(9 * time.Minute)
	if _, _, ok := p.Binding("job", "k"); !ok {
		t.Fatal("a binding used 9 minutes ago with a 10-minute TTL is gone")
	}
	fc.Advance(2 * time.Minute)
	p.Tick()
	if _, _, ok := p.Binding("job", "k"); ok || p.Bindings() != 0 {
		t.Fatalf("a binding past its TTL is kept (%d bindings)", p.Bindings())
	}
	if _, cells := g.counts(); cells != 0 {
		t.Fatalf("an expired binding still holds %d cells", cells)
	}
	if c := p.Counters(); c.BindingsExpired != 1 {
		t.Fatalf("BindingsExpired = %d, want 1", c.BindingsExpired)
	}
}

// TestAffinityBoundedByTheBudget: when the Gate refuses a new binding, the
// one that expires soonest is evicted to make room; with no binding to
// evict, the acquire fails with ErrOverBudget and leases nothing. A tenant
// cannot grow the pool's bindings beyond its budget however many keys it
// sends.
func TestAffinityBoundedByTheBudget(t *testing.T) {
	g := &countGate{ceiling: 10 * BindingCells}
	p, fc := newTestPool(t, Config{Gate: g})
	register(t, p, Spec{ID: "a", Capacity: 1 << 20}) // 1 resource unit
	for i := range 10 {
		l := affine(t, p, "job", fmt.Sprint("key-", i))
		if _, err := p.Release(l.ID, l.Token, 0); err != nil {
			t.Fatal(err)
		}
		fc.Advance(time.Second)
	}
	if n := p.Bindings(); n != 10 {
		t.Fatalf("%d bindings, want 10", n)
	}
	affine(t, p, "job", "key-0") // used again: key-1 now expires soonest
	for i := 10; i < 1000; i++ {
		l := affine(t, p, "job", fmt.Sprint("key-", i))
		if _, err := p.Release(l.ID, l.Token, 0); err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			if _, _, ok := p.Binding("job", "key-1"); ok {
				t.Fatal("the binding that expires soonest (key-1) was not the one evicted")
			}
			if _, _, ok := p.Binding("job", "key-0"); !ok {
				t.Fatal("key-0, used again, was evicted")
			}
		}
	}
	if n := p.Bindings(); n != 10 {
		t.Fatalf("%d bindings after 1,000 keys, want the budget's 10", n)
	}
	if _, cells := g.counts(); cells != 10*BindingCells {
		t.Fatalf("the Gate holds %d cells, want %d", cells, 10*BindingCells)
	}
	if c := p.Counters(); c.BindingsEvicted != 990 {
		t.Fatalf("BindingsEvicted = %d, want 990", c.BindingsEvicted)
	}

	// Nothing to evict: refused, nothing leased.
	g2 := &countGate{ceiling: 1}
	q, _ := newTestPool(t, Config{Gate: g2})
	register(t, q, Spec{ID: "a"})
	report(t, q, "a", "job", Success, 1) // the one cell
	_, err := q.AcquireAffine("job", time.Minute, nil, nil, Affinity{Key: "k"})
	if !errors.Is(err, ErrOverBudget) || q.ActiveLeases() != 0 {
		t.Fatalf("AcquireAffine over budget = %v with %d leases, want ErrOverBudget and none", err, q.ActiveLeases())
	}
}

// TestAffinityValidates: a bad key or TTL is an invalid argument in our
// words and changes nothing.
func TestAffinityValidates(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	for _, tc := range []struct {
		aff  Affinity
		want string
	}{
		{Affinity{Key: strings.Repeat("k", MaxIDLen+1)}, "affinity key is 257 bytes, more than 256"},
		{Affinity{Key: "a\x00b"}, "affinity key contains NUL"},
		{Affinity{Key: "\xff"}, "affinity key is not valid UTF-8"},
		{Affinity{Key: "k", TTL: time.Millisecond}, "affinity_ttl 1ms is outside [1s, 24h0m0s]"},
		{Affinity{Key: "k", TTL: 25 * time.Hour}, "affinity_ttl 25h0m0s is outside"},
		{Affinity{TTL: time.Minute}, "affinity_ttl without affinity"},
	} {
		_, err := p.AcquireAffine("job", time.Minute, nil, nil, tc.aff)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AcquireAffine(%q, %v) = %v, want ErrInvalidArgument %q", tc.aff.Key, tc.aff.TTL, err, tc.want)
		}
	}
	if p.ActiveLeases() != 0 || p.Bindings() != 0 {
		t.Fatal("a refused call leased or bound something")
	}
}

// TestAffinitySurvivesSnapshotRestore: bindings are part of the snapshot
// and of the change set, and a restored pool leases the same key the same
// resource; a binding of a resource the snapshot lacks is dropped.
func TestAffinitySurvivesSnapshotRestore(t *testing.T) {
	p, fc := newTestPool(t, Config{})
	for i := range 20 {
		register(t, p, Spec{ID: fmt.Sprintf("r%02d", i), Capacity: 10})
	}
	bound := map[string]string{}
	for i := range 30 {
		k := fmt.Sprint("session-", i)
		l := affine(t, p, "login", k)
		bound[k] = l.Resource
		if _, err := p.Release(l.ID, l.Token, Success); err != nil {
			t.Fatal(err)
		}
	}
	ch := p.TakeChanges()
	if len(ch.Bindings) != 30 || len(ch.Unbound) != 0 {
		t.Fatalf("TakeChanges: %d bindings, %d unbound; want 30 and none", len(ch.Bindings), len(ch.Unbound))
	}
	affine(t, p, "login", "session-0")
	if ch := p.TakeChanges(); len(ch.Bindings) != 0 {
		t.Fatal("a use that barely extends a binding put it in the change set")
	}
	fc.Advance(DefaultAffinityTTL / 2)
	affine(t, p, "login", "session-0")
	if ch := p.TakeChanges(); len(ch.Bindings) != 1 || ch.Bindings[0].Key != "session-0" {
		t.Fatalf("a use that extends a binding by half its TTL: change set %+v, want that binding", ch.Bindings)
	}
	s := p.Snapshot()
	if len(s.Bindings) != 30 {
		t.Fatalf("Snapshot holds %d bindings, want 30", len(s.Bindings))
	}
	q, _ := newTestPool(t, Config{Clock: fc})
	if err := q.Restore(s); err != nil {
		t.Fatal(err)
	}
	if _, cells := q.Charge(); cells != 30*BindingCells+len(s.Cells) {
		t.Fatalf("Charge() cells = %d, want the cells and bindings restored", cells)
	}
	for k, res := range bound {
		if l := affine(t, q, "login", k); l.Resource != res || l.Rebound {
			t.Fatalf("after Restore key %s got %s (rebound %v), want %s", k, l.Resource, l.Rebound, res)
		}
	}
	bad := s
	bad.Bindings = append([]BindingState{}, s.Bindings...)
	bad.Bindings[0].Resource = "no-such"
	if err := q.Restore(bad); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Restore(binding of an unknown resource) = %v, want ErrInvalidArgument", err)
	}
}

// TestAffinityAllocations: a bound acquire that stays on its resource
// allocates nothing, and the plain acquire is unchanged (TestHotPath...).
func TestAffinityAllocations(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	for i := range 64 {
		register(t, p, Spec{ID: fmt.Sprintf("r%d", i), Capacity: 1 << 20})
	}
	aff := Affinity{Key: "session-1"}
	_, _ = p.AcquireAffine("job", time.Hour, nil, nil, aff)
	if n := testing.AllocsPerRun(200, func() {
		if _, err := p.AcquireAffine("job", time.Hour, nil, nil, aff); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("a bound AcquireAffine allocates %v times per call, want 0", n)
	}
}

// BenchmarkAffinity compares an acquire and release of a 1,000-resource
// pool without a key, with a key bound to a resource that serves (the
// binding's lookup and no scoring), and with 10,000 keys in turn.
func BenchmarkAffinity(b *testing.B) {
	for _, bc := range []struct {
		name string
		keys int
	}{{"plain", 0}, {"one key", 1}, {"10000 keys", 10_000}} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := New(Config{})
			if err != nil {
				b.Fatal(err)
			}
			specs := make([]Spec, 1000)
			for i := range specs {
				specs[i] = Spec{ID: fmt.Sprintf("proxy-%04d", i), Capacity: 1 << 20}
			}
			if _, _, err := p.Register(specs); err != nil {
				b.Fatal(err)
			}
			keys := make([]string, max(bc.keys, 1))
			for i := range keys {
				keys[i] = fmt.Sprint("session-", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				aff := Affinity{}
				if bc.keys > 0 {
					aff.Key = keys[i%len(keys)]
				}
				l, err := p.AcquireAffine("job", time.Minute, nil, nil, aff)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Release(l.ID, l.Token, Success); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAffinityChangeSetListsDroppedKeys: expired and evicted bindings are
// in the change set as unbound keys, so that a checkpoint deletes them.
func TestAffinityChangeSetListsDroppedKeys(t *testing.T) {
	g := &countGate{ceiling: 3 * BindingCells}
	p, fc := newTestPool(t, Config{Gate: g})
	register(t, p, Spec{ID: "a", Capacity: 100})
	for _, k := range []string{"k1", "k2", "k3"} {
		affine(t, p, "job", k)
		fc.Advance(time.Second)
	}
	_ = p.TakeChanges()
	affine(t, p, "job", "k4") // evicts k1
	ch := p.TakeChanges()
	if len(ch.Unbound) != 1 || ch.Unbound[0] != (BindingKey{"job", "k1"}) || len(ch.Bindings) != 1 || ch.Bindings[0].Key != "k4" {
		t.Fatalf("after an eviction: unbound %+v, bindings %+v; want k1 unbound, k4 bound", ch.Unbound, ch.Bindings)
	}
	fc.Advance(DefaultAffinityTTL)
	p.Tick()
	if ch := p.TakeChanges(); len(ch.Unbound) != 3 || p.Bindings() != 0 {
		t.Fatalf("after every binding expired: unbound %+v, %d bindings; want 3 unbound, none left", ch.Unbound, p.Bindings())
	}
}
