package pool

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/repool/repool/internal/clock"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestPool(t *testing.T, cfg Config) (*Pool, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(t0)
	cfg.Clock = fc
	if cfg.Rand == nil {
		cfg.Rand = rand.NewPCG(1, 2)
	}
	if cfg.CooldownJitter == 0 {
		cfg.CooldownJitter = -1 // exact cooldowns unless a test asks for jitter
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return p, fc
}

func register(t *testing.T, p *Pool, specs ...Spec) {
	t.Helper()
	if _, _, err := p.Register(specs); err != nil {
		t.Fatalf("Register(%v) = %v", specs, err)
	}
}

func mustAcquire(t *testing.T, p *Pool, ctx string) Lease {
	t.Helper()
	l, err := p.Acquire(ctx, time.Minute, nil)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", ctx, err)
	}
	return l
}

func report(t *testing.T, p *Pool, id, ctx string, o Outcome, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := p.Report(Report{Resource: id, Context: ctx, Outcome: o}); err != nil {
			t.Fatalf("Report(%s, %s, %v) = %v", id, ctx, o, err)
		}
	}
}

// fingerprint is the pool's durable state in comparable form; taking it
// clears the change set, which no test here depends on.
// fingerprint is everything a caller can observe of p's state: its
// snapshot (taking it starts a new change set), its counters and its live
// leases.
func fingerprint(t *testing.T, p *Pool) string {
	t.Helper()
	s := p.Snapshot()
	return fmt.Sprintf("%+v counters %+v leases %d", normalize(s), p.Counters(), p.ActiveLeases())
}

func normalize(s Snapshot) Snapshot {
	sortBy := func(n int, less func(i, j int) bool, swap func(i, j int)) {
		for i := 1; i < n; i++ {
			for j := i; j > 0 && less(j, j-1); j-- {
				swap(j, j-1)
			}
		}
	}
	sortBy(len(s.Resources), func(i, j int) bool { return s.Resources[i].ID < s.Resources[j].ID },
		func(i, j int) { s.Resources[i], s.Resources[j] = s.Resources[j], s.Resources[i] })
	sortBy(len(s.Cells), func(i, j int) bool {
		return s.Cells[i].Resource+"\x00"+s.Cells[i].Context < s.Cells[j].Resource+"\x00"+s.Cells[j].Context
	}, func(i, j int) { s.Cells[i], s.Cells[j] = s.Cells[j], s.Cells[i] })
	sortBy(len(s.Leases), func(i, j int) bool { return s.Leases[i].ID < s.Leases[j].ID },
		func(i, j int) { s.Leases[i], s.Leases[j] = s.Leases[j], s.Leases[i] })
	return s
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"defaults", Config{}, ""},
		{"negative half-life", Config{HalfLife: -time.Second}, "HalfLife"},
		{"too many leaders", Config{Leaders: 33}, "Leaders"},
		{"too many candidates", Config{Candidates: 33}, "Candidates"},
		{"threshold at one", Config{QuarantineBelow: 1}, "QuarantineBelow"},
		{"cooldowns out of order", Config{CooldownBase: time.Hour, CooldownMax: time.Minute}, "CooldownBase"},
		{"jitter at one", Config{CooldownJitter: 1}, "CooldownJitter"},
		{"cooldown cap beyond 73 years", Config{CooldownMax: maxCooldown + 1}, "CooldownMax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate() = %v, want ErrInvalidArgument naming %s", err, tt.field)
			}
		})
	}
}

func TestRegisterIsIdempotent(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	got, existing, err := p.Register([]Spec{{ID: "a"}, {ID: "b", Capacity: 3, Labels: map[string]string{"region": "eu"}}, {ID: "a"}})
	if err != nil || !slices.Equal(got, []string{"a", "b"}) || existing != 1 {
		t.Fatalf("Register() = %q, %d, %v; want [a b], 1, nil", got, existing, err)
	}
	got, existing, err = p.Register([]Spec{{ID: "b", Capacity: 9}, {ID: "c"}})
	if err != nil || !slices.Equal(got, []string{"c"}) || existing != 1 {
		t.Fatalf("Register(again) = %q, %d, %v; want [c], 1, nil", got, existing, err)
	}
	info, err := p.Get("b")
	if err != nil || info.Capacity != 3 || info.Labels["region"] != "eu" {
		t.Fatalf("Get(b) = %+v, %v; want capacity 3 and label region=eu unchanged", info, err)
	}
	if info, _ := p.Get("a"); info.Capacity != 1 {
		t.Fatalf("Get(a).Capacity = %d, want the default 1", info.Capacity)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	long := strings.Repeat("x", MaxIDLen+1)
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "r1", Capacity: 2})
	report(t, p, "r1", "ctx", Success, 1)
	l := mustAcquire(t, p, "ctx")
	register(t, p, Spec{ID: "r2"})
	report(t, p, "r2", "ctx", Success, 1)
	tooMany := map[string]string{}
	for i := 0; i <= MaxLabels; i++ {
		tooMany[fmt.Sprint(i)] = "v"
	}

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"register empty id", func() error { _, _, err := p.Register([]Spec{{ID: "ok"}, {ID: ""}}); return err }, ErrInvalidArgument},
		{"register long id", func() error { _, _, err := p.Register([]Spec{{ID: long}}); return err }, ErrInvalidArgument},
		{"register bad utf8", func() error { _, _, err := p.Register([]Spec{{ID: "\xff"}}); return err }, ErrInvalidArgument},
		{"register negative capacity", func() error { _, _, err := p.Register([]Spec{{ID: "n", Capacity: -1}}); return err }, ErrInvalidArgument},
		{"register too many labels", func() error { _, _, err := p.Register([]Spec{{ID: "n", Labels: tooMany}}); return err }, ErrInvalidArgument},
		{"register empty label key", func() error {
			_, _, err := p.Register([]Spec{{ID: "n", Labels: map[string]string{"": "v"}}})
			return err
		}, ErrInvalidArgument},
		{"register NUL in id", func() error { _, _, err := p.Register([]Spec{{ID: "a\x00b"}}); return err }, ErrInvalidArgument},
		{"register NUL in label key", func() error {
			_, _, err := p.Register([]Spec{{ID: "n", Labels: map[string]string{"k\x00": "v"}}})
			return err
		}, ErrInvalidArgument},
		{"register NUL in label value", func() error {
			_, _, err := p.Register([]Spec{{ID: "n", Labels: map[string]string{"k": "\x00"}}})
			return err
		}, ErrInvalidArgument},
		{"deregister empty id", func() error { _, _, err := p.Deregister([]string{"r1", ""}); return err }, ErrInvalidArgument},
		{"deregister NUL in id", func() error { _, _, err := p.Deregister([]string{"r1", "r1\x00"}); return err }, ErrInvalidArgument},
		{"acquire empty context", func() error { _, err := p.Acquire("", time.Minute, nil); return err }, ErrInvalidArgument},
		{"acquire long context", func() error { _, err := p.Acquire(long, time.Minute, nil); return err }, ErrInvalidArgument},
		{"acquire NUL in context", func() error { _, err := p.Acquire("c\x00tx", time.Minute, nil); return err }, ErrInvalidArgument},
		{"acquire NUL in selector", func() error {
			_, err := p.Acquire("ctx", time.Minute, map[string]string{"region": "eu\x00"})
			return err
		}, ErrInvalidArgument},
		{"acquire ttl below 1s", func() error { _, err := p.Acquire("ctx", 999*time.Millisecond, nil); return err }, ErrInvalidArgument},
		{"acquire ttl above 1h", func() error { _, err := p.Acquire("ctx", time.Hour+time.Nanosecond, nil); return err }, ErrInvalidArgument},
		{"renew ttl zero", func() error { _, err := p.Renew(l.ID, l.Token, 0); return err }, ErrInvalidArgument},
		{"renew unknown lease", func() error { _, err := p.Renew(l.ID+99, l.Token, time.Minute); return err }, ErrNotFound},
		{"renew stale token", func() error { _, err := p.Renew(l.ID, l.Token-1, time.Minute); return err }, ErrStaleToken},
		{"release stale token", func() error { return second(p.Release(l.ID, l.Token+1, Success)) }, ErrStaleToken},
		{"release bad outcome", func() error { return second(p.Release(l.ID, l.Token, Outcome(9))) }, ErrInvalidArgument},
		{"release unknown lease", func() error { return second(p.Release(12345, 1, 0)) }, ErrNotFound},
		{"report unknown resource", func() error { return second(p.Report(Report{Resource: "nope", Context: "ctx", Outcome: Success})) }, ErrNotFound},
		{"report no outcome", func() error { return second(p.Report(Report{Resource: "r1", Context: "ctx"})) }, ErrInvalidArgument},
		{"report empty context", func() error { return second(p.Report(Report{Resource: "r1", Outcome: Success})) }, ErrInvalidArgument},
		{"report NUL in context", func() error {
			return second(p.Report(Report{Resource: "r1", Context: "\x00", Outcome: Success}))
		}, ErrInvalidArgument},
		{"report NUL in resource id", func() error {
			return second(p.Report(Report{Resource: "r1\x00", Context: "ctx", Outcome: Success}))
		}, ErrInvalidArgument},
		{"report stale token", func() error {
			return second(p.Report(Report{Resource: "r1", Context: "ctx", Outcome: Failure, LeaseID: l.ID, Token: l.Token + 1}))
		}, ErrStaleToken},
		{"report lease of another resource", func() error {
			return second(p.Report(Report{Resource: "r2", Context: "ctx", Outcome: Failure, LeaseID: l.ID, Token: l.Token}))
		}, ErrInvalidArgument},
		{"report unknown resource with a lease", func() error {
			return second(p.Report(Report{Resource: "nope", Context: "ctx", Outcome: Failure, LeaseID: l.ID, Token: l.Token}))
		}, ErrNotFound},
		{"report unknown lease", func() error {
			return second(p.Report(Report{Resource: "r1", Context: "ctx", Outcome: Failure, LeaseID: l.ID + 99, Token: l.Token}))
		}, ErrNotFound},
		{"report token without lease id", func() error {
			return second(p.Report(Report{Resource: "r1", Context: "ctx", Outcome: Success, Token: l.Token}))
		}, ErrInvalidArgument},
		{"report lease id without token", func() error {
			return second(p.Report(Report{Resource: "r1", Context: "ctx", Outcome: Success, LeaseID: l.ID}))
		}, ErrInvalidArgument},
		{"renew lease id 0", func() error { _, err := p.Renew(0, l.Token, time.Minute); return err }, ErrNotFound},
		{"release lease id 0", func() error { return second(p.Release(0, l.Token, Success)) }, ErrNotFound},
		{"report lease of another context", func() error {
			return second(p.Report(Report{Resource: "r1", Context: "other", Outcome: Failure, LeaseID: l.ID, Token: l.Token}))
		}, ErrInvalidArgument},
		{"get empty id", func() error { _, err := p.Get(""); return err }, ErrInvalidArgument},
		{"get NUL in id", func() error { _, err := p.Get("r1\x00"); return err }, ErrInvalidArgument},
		{"get unknown", func() error { _, err := p.Get("nope"); return err }, ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := fingerprint(t, p) // Snapshot also starts a new change set
			sub := p.Subscribe(0, 0)
			defer sub.Close()
			err := tt.call()
			if !errors.Is(err, tt.want) {
				t.Fatalf("got error %v, want %v", err, tt.want)
			}
			if ch := p.TakeChanges(); len(ch.Resources)+len(ch.Cells)+len(ch.Removed) > 0 {
				t.Fatalf("a rejected call left changes for the checkpoint: %+v", ch)
			}
			select {
			case e := <-sub.C:
				t.Fatalf("a rejected call emitted %+v", e)
			default:
			}
			if after := fingerprint(t, p); after != before {
				t.Fatalf("state changed on a rejected call:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func TestList(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "c"}, Spec{ID: "a"}, Spec{ID: "b"})
	ids := func(infos []ResourceInfo) (out []string) {
		for _, in := range infos {
			out = append(out, in.ID)
		}
		return out
	}
	tests := []struct {
		name     string
		after    string
		limit    int
		want     []string
		wantMore bool
	}{
		{"all", "", 10, []string{"a", "b", "c"}, false},
		{"first page", "", 2, []string{"a", "b"}, true},
		{"next page", "b", 2, []string{"c"}, false},
		{"zero limit", "", 0, nil, true},
		{"negative limit", "", -1, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			infos, more := p.List(tt.after, tt.limit)
			if got := ids(infos); !reflect.DeepEqual(got, tt.want) || more != tt.wantMore {
				t.Fatalf("List(%q, %d) = %v, %v; want %v, %v", tt.after, tt.limit, got, more, tt.want, tt.wantMore)
			}
		})
	}
}

func TestAcquireRespectsCapacity(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a", Capacity: 2}, Spec{ID: "b"})
	seen := map[string]int{}
	for i := 0; i < 3; i++ {
		seen[mustAcquire(t, p, "ctx").Resource]++
	}
	if seen["a"] != 2 || seen["b"] != 1 {
		t.Fatalf("leases per resource = %v, want a:2 b:1", seen)
	}
	if _, err := p.Acquire("ctx", time.Minute, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire(full pool) = %v, want ErrExhausted", err)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireSelector(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	for i := 0; i < 200; i++ {
		region := "us"
		if i%50 == 0 {
			region = "eu"
		}
		register(t, p, Spec{ID: fmt.Sprintf("r%03d", i), Labels: map[string]string{"region": region, "kind": "dc"}})
	}
	for i := 0; i < 4; i++ {
		l, err := p.Acquire("ctx", time.Minute, map[string]string{"region": "eu", "kind": "dc"})
		if err != nil {
			t.Fatalf("Acquire(eu) #%d = %v", i, err)
		}
		info, _ := p.Get(l.Resource)
		if info.Labels["region"] != "eu" {
			t.Fatalf("Acquire(region=eu) leased %s with labels %v", l.Resource, info.Labels)
		}
	}
	if _, err := p.Acquire("ctx", time.Minute, map[string]string{"region": "eu"}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire(eu, all leased) = %v, want ErrExhausted", err)
	}
	if _, err := p.Acquire("ctx", time.Minute, map[string]string{"region": "mars"}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire(no such label) = %v, want ErrExhausted", err)
	}
}

func TestAcquirePrefersBetterResources(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "good", Capacity: 1000}, Spec{ID: "bad", Capacity: 1000})
	report(t, p, "good", "ctx", Success, 50)
	report(t, p, "bad", "ctx", Success, 10)
	report(t, p, "bad", "ctx", Failure, 4) // below the quarantine thresholds
	report(t, p, "bad", "ctx", Success, 1)
	report(t, p, "bad", "ctx", Failure, 4)
	counts := map[string]int{}
	for i := 0; i < 200; i++ {
		counts[mustAcquire(t, p, "ctx").Resource]++
	}
	if counts["good"] < 180 {
		t.Fatalf("Acquire picked good %d of 200 times, want at least 180 (counts %v)", counts["good"], counts)
	}
}

func TestAcquireDoesNotCreateCells(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	report(t, p, "a", "known", Success, 3)
	l := mustAcquire(t, p, "fresh")
	if p.HasCell("a", "fresh") {
		t.Fatal("HasCell(a, fresh) = true after Acquire, want false: Acquire must not store cells")
	}
	if _, cells := p.Len(); cells != 1 {
		t.Fatalf("Len() cells = %d, want 1", cells)
	}
	if _, err := p.Release(l.ID, l.Token, Success); err != nil {
		t.Fatal(err)
	}
	if !p.HasCell("a", "fresh") {
		t.Fatal("HasCell(a, fresh) = false after Release with an outcome, want true")
	}
}

func TestNewCellTakesPriorFromAggregate(t *testing.T) {
	p, _ := newTestPool(t, Config{PriorWeight: 2})
	register(t, p, Spec{ID: "a"})
	report(t, p, "a", "x", Success, 98) // aggregate mean (1+98)/(2+98) = 0.99
	report(t, p, "a", "y", Failure, 1)
	info, _ := p.Get("a")
	var y ContextStats
	for _, c := range info.Contexts {
		if c.Context == "y" {
			y = c
		}
	}
	// prior: 2 pseudo-observations at mean 0.99, then one failure.
	wantA, wantB := 1+2*0.99, 1+2*0.01+1
	if math.Abs(y.Successes-wantA) > 1e-9 || math.Abs(y.Failures-wantB) > 1e-9 {
		t.Fatalf("cell y = (%v, %v), want (%v, %v)", y.Successes, y.Failures, wantA, wantB)
	}
}

func TestDecayHalvesCountsPerHalfLife(t *testing.T) {
	p, fc := newTestPool(t, Config{HalfLife: time.Hour})
	register(t, p, Spec{ID: "a"})
	report(t, p, "a", "ctx", Success, 8)
	fc.Advance(time.Hour)
	info, _ := p.Get("a")
	if got := info.Contexts[0].Successes; math.Abs(got-(1+4)) > 1e-9 {
		t.Fatalf("successes after one half-life = %v, want 5 (1 + 8/2)", got)
	}
	fc.Advance(time.Hour)
	report(t, p, "a", "ctx", Failure, 1)
	info, _ = p.Get("a")
	if got := info.Contexts[0]; math.Abs(got.Successes-3) > 1e-9 || math.Abs(got.Failures-2) > 1e-9 {
		t.Fatalf("after two half-lives and a failure = (%v, %v), want (3, 2)", got.Successes, got.Failures)
	}
}

func TestLeaseLifecycle(t *testing.T) {
	p, fc := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	sub := p.Subscribe(KindsOf(EventLeaseExpired), 0)
	defer sub.Close()

	l := mustAcquire(t, p, "ctx")
	if !l.ExpiresAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("ExpiresAt = %v, want %v", l.ExpiresAt, t0.Add(time.Minute))
	}
	fc.Advance(50 * time.Second)
	r, err := p.Renew(l.ID, l.Token, 2*time.Minute)
	if err != nil || r.Token != l.Token || !r.ExpiresAt.Equal(fc.Now().Add(2*time.Minute)) {
		t.Fatalf("Renew() = %+v, %v; want same token, expiry now+2m", r, err)
	}
	fc.Advance(90 * time.Second) // past the original expiry, within the renewed one
	if _, err := p.Acquire("ctx", time.Minute, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire(while renewed lease holds) = %v, want ErrExhausted", err)
	}
	fc.Advance(31 * time.Second)
	p.Tick()
	select {
	case e := <-sub.C:
		if e.Kind != EventLeaseExpired || e.Resource != "a" || e.Context != "ctx" {
			t.Fatalf("event = %+v, want lease_expired for a/ctx", e)
		}
	default:
		t.Fatal("no lease_expired event after expiry")
	}
	if _, err := p.Release(l.ID, l.Token, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Release(expired) = %v, want ErrNotFound", err)
	}
	l2 := mustAcquire(t, p, "ctx")
	if l2.Token <= l.Token || l2.ID == l.ID {
		t.Fatalf("second lease %+v, want a larger token than %d and a new id", l2, l.Token)
	}
	if _, err := p.Release(l2.ID, l2.Token, Success); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if _, err := p.Release(l2.ID, l2.Token, Success); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Release(twice) = %v, want ErrNotFound", err)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestExpiryFreesCapacityWithoutTick(t *testing.T) {
	p, fc := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	mustAcquire(t, p, "ctx")
	fc.Advance(time.Minute)
	l := mustAcquire(t, p, "ctx") // Acquire itself expires the old lease
	if l.Resource != "a" {
		t.Fatalf("Acquire() = %+v", l)
	}
}

// TestExpiryBehindManyRenewalsFreesCapacity: a lease renewed many times
// leaves as many stale expiry entries due before its real one; an Acquire
// that finds nothing free within its budget finishes the due work, so the
// expired lease's capacity is not held.
func TestExpiryBehindManyRenewalsFreesCapacity(t *testing.T) {
	p, fc := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	l := mustAcquire(t, p, "x")
	for range 4 * dueBudget {
		fc.Advance(time.Second)
		if _, err := p.Renew(l.ID, l.Token, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	fc.Advance(3 * time.Second)
	if got := mustAcquire(t, p, "x"); got.Resource != "a" {
		t.Fatalf("Acquire() after the only lease expired = %+v, want resource a", got)
	}
	if c := p.Counters(); c.Expired != 1 || c.Exhausted != 0 {
		t.Fatalf("Counters() = %+v, want 1 expired, 0 exhausted", c)
	}
}

// TestRenewalsKeepOneExpiryEntryPerLease: renewals that land on an expiry
// the lease already has (a coarse clock reads the same instant many times)
// add no entry, and compaction keeps one entry per live lease even after a
// lease's expiry went back to an earlier value.
func TestRenewalsKeepOneExpiryEntryPerLease(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	l := mustAcquire(t, p, "x")
	mustAcquire(t, p, "x")
	for i := range 20_000 {
		ttl := time.Minute
		if i%2 == 1 && i > 10_000 {
			ttl = 2 * time.Minute // back and forth between two expiries
		}
		if _, err := p.Renew(l.ID, l.Token, ttl); err != nil {
			t.Fatal(err)
		}
		if n, bound := len(p.expiries), 2*p.leases.len()+1024; n > bound {
			t.Fatalf("renewal %d: %d expiry entries for %d leases, want at most %d", i, n, p.leases.len(), bound)
		}
	}
	p.expiries = append(p.expiries, make(minHeap[uint64], 2000)...) // force a compaction
	p.compactExpiries()
	if n := len(p.expiries); n != 2 {
		t.Fatalf("after compaction: %d expiry entries for 2 leases, want 2", n)
	}
}

func TestFencingTokensGrowAcrossEpochsAndRestore(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a", Capacity: 100})
	var last uint64
	take := func(p *Pool) {
		t.Helper()
		l := mustAcquire(t, p, "ctx")
		if l.Token <= last {
			t.Fatalf("token %d after %d: tokens must strictly increase", l.Token, last)
		}
		last = l.Token
	}
	take(p)
	take(p)
	snap := p.Snapshot()
	take(p) // issued after the snapshot: a restore must not go back below it

	q, _ := newTestPool(t, Config{})
	if err := q.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if err := q.SetEpoch(1); err != nil {
		t.Fatal(err)
	}
	take(q)
	if err := q.SetEpoch(0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SetEpoch(back) = %v, want ErrInvalidArgument", err)
	}
	if err := q.SetEpoch(MaxEpoch + 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("SetEpoch(too big) = %v, want ErrInvalidArgument", err)
	}
	if err := q.SetEpoch(7); err != nil {
		t.Fatal(err)
	}
	take(q)
	// Restoring an older snapshot into a pool never lowers its tokens.
	if err := q.Restore(snap); err != nil {
		t.Fatal(err)
	}
	take(q)
	if e, _ := q.Epoch(); e != 7 {
		t.Fatalf("Epoch() = %d after restoring an older snapshot, want 7", e)
	}
}

// TestTokensOfAnEpochRunOut: the last counter value of an epoch is used,
// then Acquire refuses rather than let the counter carry into the epoch's
// bits (which would make tokens go down), until a new epoch.
func TestTokensOfAnEpochRunOut(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	const epoch = 3
	full := uint64(epoch)<<tokenBits | (1<<tokenBits - 1)
	if err := p.Restore(Snapshot{
		Epoch: epoch, LastToken: full - 1, LastLease: full - 1,
		Resources: []ResourceState{{ID: "a", Capacity: 100}},
	}); err != nil {
		t.Fatal(err)
	}
	last := mustAcquire(t, p, "ctx")
	if last.Token != full || last.ID != full {
		t.Fatalf("Acquire() = token %#x id %#x, want both %#x (the epoch's last)", last.Token, last.ID, full)
	}
	before := p.Counters().Exhausted
	if l, err := p.Acquire("ctx", time.Minute, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire() past the epoch's last token = %+v, %v; want ErrExhausted", l, err)
	}
	if got := p.Counters().Exhausted; got != before+1 {
		t.Fatalf("Counters().Exhausted = %d, want %d", got, before+1)
	}
	if n := p.ActiveLeases(); n != 1 {
		t.Fatalf("ActiveLeases() = %d after the refusal, want 1", n)
	}
	if err := p.SetEpoch(epoch + 1); err != nil {
		t.Fatal(err)
	}
	if l := mustAcquire(t, p, "ctx"); l.Token <= last.Token || l.ID <= last.ID {
		t.Fatalf("Acquire() in the next epoch = token %#x id %#x, want above %#x", l.Token, l.ID, full)
	}
}

// TestRestoredLeasesKeepThePoolsContextName: a restored lease of a known
// context refers to the pool's interned name, as an acquired one does, not
// to a string of the snapshot's.
func TestRestoredLeasesKeepThePoolsContextName(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a", Capacity: 2})
	report(t, p, "a", "search", Success, 1)
	mustAcquire(t, p, "search")
	snap := p.Snapshot()
	snap.Leases[0].Context = strings.Clone(snap.Leases[0].Context)

	q, _ := newTestPool(t, Config{})
	if err := q.Restore(snap); err != nil {
		t.Fatal(err)
	}
	l, ok := q.leases.get(snap.Leases[0].ID)
	ctx, known := q.findContext("search")
	if !ok || !known {
		t.Fatalf("restored lease found %v, context known %v; want both", ok, known)
	}
	if unsafe.StringData(l.context) != unsafe.StringData(q.ctxs[ctx].name) {
		t.Fatal("restored lease's context is the snapshot's string, want the pool's interned name")
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	p, fc := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a", Capacity: 2, Labels: map[string]string{"k": "v"}}, Spec{ID: "b"})
	report(t, p, "a", "x", Success, 3)
	report(t, p, "b", "x", Blocked, 1)
	mustAcquire(t, p, "x")
	fc.Advance(time.Second)
	snap := p.Snapshot()

	q, _ := newTestPool(t, Config{})
	fc2 := clock.NewFake(fc.Now())
	q.clock = fc2
	if err := q.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if got, want := normalize(q.Snapshot()), normalize(snap); !reflect.DeepEqual(got, want) {
		t.Fatalf("Snapshot after Restore differs:\n got %+v\nwant %+v", got, want)
	}
	if err := q.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	// The restored lease still holds capacity, and b is still quarantined.
	mustAcquire(t, q, "x")
	if _, err := q.Acquire("x", time.Minute, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire() = %v, want ErrExhausted (a full, b quarantined)", err)
	}
}

// TestRestoreGoesOnInTheLatestEpoch: a snapshot whose lease high-water
// mark lies in a later epoch than its token one (or whose own epoch is
// later than both) restores into that epoch, so that neither new lease ids
// nor new tokens can repeat or go below a restored one.
func TestRestoreGoesOnInTheLatestEpoch(t *testing.T) {
	lease := LeaseState{ID: 1<<tokenBits | 5, Resource: "a", Context: "c", Token: 7, ExpiresAt: t0.Add(time.Hour)}
	tests := []struct {
		name      string
		snap      Snapshot
		wantEpoch uint32
	}{
		{"leases ahead of tokens", Snapshot{LastToken: 7, LastLease: lease.ID, Leases: []LeaseState{lease}}, 1},
		{"tokens ahead of leases", Snapshot{LastToken: 2<<tokenBits | 3, LastLease: lease.ID, Leases: []LeaseState{lease}}, 2},
		{"the snapshot's epoch ahead of both", Snapshot{Epoch: 4, LastToken: 7, LastLease: lease.ID, Leases: []LeaseState{lease}}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newTestPool(t, Config{})
			tt.snap.Resources = []ResourceState{{ID: "a", Capacity: 3}}
			if err := p.Restore(tt.snap); err != nil {
				t.Fatal(err)
			}
			if e, _ := p.Epoch(); e != tt.wantEpoch {
				t.Fatalf("Epoch() = %d after Restore, want %d", e, tt.wantEpoch)
			}
			for range 2 {
				l := mustAcquire(t, p, "c")
				if l.ID <= tt.snap.LastLease || l.Token <= tt.snap.LastToken {
					t.Fatalf("Acquire() = id %#x token %#x, want above the snapshot's %#x and %#x", l.ID, l.Token, tt.snap.LastLease, tt.snap.LastToken)
				}
			}
			if err := p.checkInvariants(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRestoreKeepsLeasesBeyondCapacity: a snapshot may hold more leases
// of a resource than its capacity (a failover restores every lease that
// may still be held). All are live; the resource takes no new lease until
// enough of them end, and then one at a time up to its capacity.
func TestRestoreKeepsLeasesBeyondCapacity(t *testing.T) {
	p, fc := newTestPool(t, Config{})
	snap := Snapshot{LastToken: 3, LastLease: 3, Resources: []ResourceState{{ID: "a", Capacity: 1}}, Leases: []LeaseState{
		{ID: 1, Resource: "a", Context: "c", Token: 1, ExpiresAt: t0.Add(time.Minute)},
		{ID: 2, Resource: "a", Context: "c", Token: 2, ExpiresAt: t0.Add(2 * time.Minute)},
		{ID: 3, Resource: "a", Context: "c", Token: 3, ExpiresAt: t0.Add(3 * time.Minute)},
	}}
	if err := p.Restore(snap); err != nil {
		t.Fatalf("Restore(3 leases of a capacity-1 resource) = %v, want nil", err)
	}
	for _, l := range snap.Leases {
		if !p.leaseLive(l.ID, l.Token) {
			t.Fatalf("restored lease %d is not live", l.ID)
		}
	}
	for _, after := range []time.Duration{0, time.Minute, 2 * time.Minute} {
		fc.Set(t0.Add(after))
		if l, err := p.Acquire("c", time.Hour, nil); !errors.Is(err, ErrExhausted) {
			t.Fatalf("Acquire() at +%v with restored leases still live = %+v, %v; want ErrExhausted", after, l, err)
		}
	}
	fc.Set(t0.Add(3 * time.Minute)) // the last restored lease ends
	mustAcquire(t, p, "c")
	if l, err := p.Acquire("c", time.Hour, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("second Acquire() = %+v, %v; want ErrExhausted at capacity 1", l, err)
	}
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	good := Snapshot{LastToken: 10, LastLease: 10, Resources: []ResourceState{{ID: "a", Capacity: 1}}}
	tests := []struct {
		name   string
		mutate func(*Snapshot)
	}{
		{"zero capacity", func(s *Snapshot) { s.Resources[0].Capacity = 0 }},
		{"duplicate resource", func(s *Snapshot) { s.Resources = append(s.Resources, s.Resources[0]) }},
		{"NaN counts", func(s *Snapshot) { s.Resources[0].Aggregate.Alpha = math.NaN() }},
		{"cell of unknown resource", func(s *Snapshot) { s.Cells = []CellState{{Resource: "zz", Context: "c"}} }},
		{"negative cell counts", func(s *Snapshot) { s.Cells = []CellState{{Resource: "a", Context: "c", Stats: Stats{Beta: -1}}} }},
		{"lease token above high-water mark", func(s *Snapshot) { s.Leases = []LeaseState{{ID: 1, Resource: "a", Context: "c", Token: 11}} }},
		{"epoch too large", func(s *Snapshot) { s.Epoch = MaxEpoch + 1 }},
		{"token high-water mark beyond the largest epoch", func(s *Snapshot) { s.LastToken = 1 << 63 }},
		{"lease high-water mark beyond the largest epoch", func(s *Snapshot) { s.LastLease = (MaxEpoch + 1) << tokenBits }},
		{"lease id 0", func(s *Snapshot) { s.Leases = []LeaseState{{ID: 0, Resource: "a", Context: "c", Token: 1}} }},
		{"lease token 0", func(s *Snapshot) { s.Leases = []LeaseState{{ID: 1, Resource: "a", Context: "c", Token: 0}} }},
		{"repeated lease id", func(s *Snapshot) {
			s.Resources[0].Capacity = 2
			s.Leases = []LeaseState{{ID: 1, Resource: "a", Context: "c", Token: 1}, {ID: 1, Resource: "a", Context: "c", Token: 2}}
		}},
		{"consecutive failures beyond int32", func(s *Snapshot) { s.Resources[0].Aggregate.ConsecutiveFailures = math.MaxInt32 + 1 }},
		{"cell consecutive failures beyond int32", func(s *Snapshot) {
			s.Cells = []CellState{{Resource: "a", Context: "c", Stats: Stats{ConsecutiveFailures: 1 << 32}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newTestPool(t, Config{})
			register(t, p, Spec{ID: "keep"})
			before := fingerprint(t, p)
			s := good
			s.Resources = append([]ResourceState(nil), good.Resources...)
			tt.mutate(&s)
			if err := p.Restore(s); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("Restore() = %v, want ErrInvalidArgument", err)
			}
			if after := fingerprint(t, p); after != before {
				t.Fatalf("state changed on a rejected Restore")
			}
		})
	}
}

func TestTakeChanges(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"}, Spec{ID: "c"})
	p.Snapshot()
	report(t, p, "a", "x", Success, 2)
	if _, _, err := p.Deregister([]string{"c"}); err != nil {
		t.Fatal(err)
	}
	ch := p.TakeChanges()
	if len(ch.Resources) != 1 || ch.Resources[0].ID != "a" || len(ch.Cells) != 1 || !reflect.DeepEqual(ch.Removed, []string{"c"}) {
		t.Fatalf("TakeChanges() = %+v, want resource a, one cell, removed [c]", ch)
	}
	if ch := p.TakeChanges(); len(ch.Resources)+len(ch.Cells)+len(ch.Removed) != 0 {
		t.Fatalf("second TakeChanges() = %+v, want nothing", ch)
	}

	// A resource removed and registered again within one interval reuses
	// its slot and its cell's slot: each is written once, in its current
	// state, after the removal.
	report(t, p, "b", "x", Failure, 1)
	if _, _, err := p.Deregister([]string{"b"}); err != nil {
		t.Fatal(err)
	}
	register(t, p, Spec{ID: "b", Capacity: 3})
	report(t, p, "b", "x", Success, 1)
	ch = p.TakeChanges()
	if len(ch.Resources) != 1 || ch.Resources[0].ID != "b" || ch.Resources[0].Capacity != 3 || ch.Resources[0].Aggregate.Beta != 0 ||
		len(ch.Cells) != 1 || ch.Cells[0].Resource != "b" || ch.Cells[0].Stats.Beta != 0 || !reflect.DeepEqual(ch.Removed, []string{"b"}) {
		t.Fatalf("TakeChanges() after remove and re-register = %+v, want resource b (capacity 3, no failure) once, its cell once, removed [b]", ch)
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestDeregisterDropsLeasesAndCells(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	report(t, p, "a", "x", Success, 1)
	l := mustAcquire(t, p, "x")
	n, cells, err := p.Deregister([]string{"a", "unknown"})
	if err != nil || n != 1 || cells != 1 {
		t.Fatalf("Deregister() = %d, %d, %v; want 1 resource, 1 cell, nil", n, cells, err)
	}
	if p.HasResource("a") || p.HasCell("a", "x") {
		t.Fatal("resource or cell still present after Deregister")
	}
	if _, err := p.Release(l.ID, l.Token, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Release(lease of removed resource) = %v, want ErrNotFound", err)
	}
	register(t, p, Spec{ID: "a"})
	if p.HasCell("a", "x") {
		t.Fatal("re-registered resource inherited the old cell")
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestQuarantineAfterConsecutiveFailuresThenProbe(t *testing.T) {
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 3, CooldownBase: 10 * time.Second, QuarantineBelow: -1})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	sub := p.Subscribe(KindsOf(EventBlocked, EventRecovered), 0)
	defer sub.Close()

	report(t, p, "a", "x", Failure, 2)
	if ev := drain(sub); len(ev) != 0 {
		t.Fatalf("events after 2 failures = %v, want none", ev)
	}
	report(t, p, "a", "x", Failure, 1)
	if ev := drain(sub); len(ev) != 1 || ev[0].Kind != EventBlocked || ev[0].Resource != "a" || ev[0].Context != "x" {
		t.Fatalf("events after 3 failures = %v, want one blocked a/x", ev)
	}
	info, _ := p.Get("a")
	if want := t0.Add(10 * time.Second); !info.Contexts[0].BlockedUntil.Equal(want) {
		t.Fatalf("BlockedUntil = %v, want %v", info.Contexts[0].BlockedUntil, want)
	}
	// During the cooldown, a is never leased for x but is for other contexts.
	for i := 0; i < 20; i++ {
		l := mustAcquire(t, p, "x")
		if l.Resource != "b" {
			t.Fatalf("Acquire(x) during cooldown leased %s", l.Resource)
		}
		if _, err := p.Release(l.ID, l.Token, 0); err != nil {
			t.Fatal(err)
		}
	}
	fc.Advance(10 * time.Second)
	probe := mustAcquire(t, p, "x")
	if probe.Resource != "a" {
		t.Fatalf("first Acquire(x) after cooldown leased %s, want the probe on a", probe.Resource)
	}
	// Only one probe at a time.
	other := mustAcquire(t, p, "x")
	if other.Resource != "b" {
		t.Fatalf("second Acquire(x) leased %s, want b", other.Resource)
	}
	// The probe fails: a longer cooldown (level 1: 20s).
	if _, err := p.Release(probe.ID, probe.Token, Failure); err != nil {
		t.Fatal(err)
	}
	info, _ = p.Get("a")
	if want := fc.Now().Add(20 * time.Second); !info.Contexts[0].BlockedUntil.Equal(want) {
		t.Fatalf("BlockedUntil after failed probe = %v, want %v (doubled)", info.Contexts[0].BlockedUntil, want)
	}
	fc.Advance(20 * time.Second)
	probe = mustAcquire(t, p, "x")
	if probe.Resource != "a" {
		t.Fatalf("Acquire(x) after second cooldown leased %s, want a", probe.Resource)
	}
	if _, err := p.Release(probe.ID, probe.Token, Success); err != nil {
		t.Fatal(err)
	}
	ev := drain(sub)
	if len(ev) != 2 || ev[0].Kind != EventBlocked || ev[1].Kind != EventRecovered {
		t.Fatalf("events = %v, want blocked then recovered", ev)
	}
	info, _ = p.Get("a")
	if !info.Contexts[0].BlockedUntil.IsZero() {
		t.Fatalf("a still blocked after a successful probe: %+v", info.Contexts[0])
	}
}

func TestProbeWithoutOutcomeIsRetried(t *testing.T) {
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 1, CooldownBase: time.Second})
	register(t, p, Spec{ID: "a"})
	report(t, p, "a", "x", Failure, 1)
	fc.Advance(time.Second)
	probe := mustAcquire(t, p, "x")
	if _, err := p.Release(probe.ID, probe.Token, 0); err != nil {
		t.Fatal(err)
	}
	again := mustAcquire(t, p, "x")
	if again.Resource != "a" {
		t.Fatalf("Acquire() after a probe released without outcome = %+v, want a new probe on a", again)
	}
}

// TestAnEarlierProbeEndingDoesNotReleaseAnother: a probe lease whose
// failure quarantined its cell again, and that is released only after the
// next cooldown's probe went out, does not put the cell back on probation:
// there is never more than one probe out.
func TestAnEarlierProbeEndingDoesNotReleaseAnother(t *testing.T) {
	for _, whole := range []bool{false, true} {
		t.Run(map[bool]string{false: "cell", true: "whole resource"}[whole], func(t *testing.T) {
			cfg := Config{FailuresToQuarantine: 1, FailuresToQuarantineWhole: 1000, CooldownBase: 10 * time.Second, CooldownJitter: -1, QuarantineBelow: -1}
			if whole {
				cfg.FailuresToQuarantine, cfg.FailuresToQuarantineWhole = 1000, 1
			}
			p, fc := newTestPool(t, cfg)
			register(t, p, Spec{ID: "a", Capacity: 5})
			report(t, p, "a", "x", Failure, 1)
			fc.Advance(10 * time.Second)
			first := mustAcquire(t, p, "x") // the probe
			if _, err := p.Report(Report{Resource: "a", Context: "x", Outcome: Failure, LeaseID: first.ID, Token: first.Token}); err != nil {
				t.Fatal(err)
			}
			fc.Advance(20 * time.Second) // the second cooldown (doubled) is over
			second := mustAcquire(t, p, "x")
			if _, err := p.Release(first.ID, first.Token, 0); err != nil {
				t.Fatal(err)
			}
			if err := p.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			if l, err := p.Acquire("x", time.Minute, nil); !errors.Is(err, ErrExhausted) {
				t.Fatalf("Acquire() while probe %d is out = %+v, %v; want ErrExhausted (no second probe)", second.ID, l, err)
			}
			// The probe that is out, released without an outcome, is retried.
			if _, err := p.Release(second.ID, second.Token, 0); err != nil {
				t.Fatal(err)
			}
			if l := mustAcquire(t, p, "x"); l.Resource != "a" {
				t.Fatalf("Acquire() after the probe ended without an outcome = %+v, want the next probe of a", l)
			}
		})
	}
}

// TestWholeProbeWaitsForTheContextsCooldown: a resource whose whole
// quarantine ended is not handed out as a probe for a context it is still
// quarantined for; it is for another context.
func TestWholeProbeWaitsForTheContextsCooldown(t *testing.T) {
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 100, FailuresToQuarantineWhole: 3, QuarantineBelow: -1, CooldownBase: time.Minute, CooldownJitter: -1})
	register(t, p, Spec{ID: "a"})
	report(t, p, "a", "x", Success, 5)
	report(t, p, "a", "x", Blocked, 1) // a/x blocked until +1m
	fc.Advance(time.Minute)
	p.Tick()                           // a/x on probation
	report(t, p, "a", "x", Blocked, 1) // a/x blocked again, until +3m
	report(t, p, "a", "y", Failure, 1) // third failure in a row: whole quarantine until +2m
	fc.Advance(time.Minute)            // +2m: the whole cooldown is over, x's is not
	if l, err := p.Acquire("x", time.Minute, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire(x) = %+v, %v; want ErrExhausted: a is quarantined for x until +3m", l, err)
	}
	l := mustAcquire(t, p, "y")
	if l.Resource != "a" || p.Counters().Probes != 1 {
		t.Fatalf("Acquire(y) = %+v with %d probes, want a's whole-resource probe", l, p.Counters().Probes)
	}
}

func TestBlockedOutcomeQuarantinesAtOnce(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	report(t, p, "a", "x", Success, 20)
	report(t, p, "a", "x", Blocked, 1)
	if _, err := p.Acquire("x", time.Minute, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire(x) after BLOCKED = %v, want ErrExhausted", err)
	}
	mustAcquire(t, p, "y") // other contexts unaffected
}

func TestLowPosteriorQuarantines(t *testing.T) {
	p, _ := newTestPool(t, Config{QuarantineBelow: 0.3, QuarantineMinEvidence: 10, FailuresToQuarantine: 100})
	register(t, p, Spec{ID: "a"})
	for i := 0; i < 4; i++ { // alternate so there are never many failures in a row
		report(t, p, "a", "x", Failure, 3)
		report(t, p, "a", "x", Success, 1)
	}
	if _, err := p.Acquire("x", time.Minute, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire(x) with posterior mean ~0.28 = %v, want ErrExhausted", err)
	}
}

func TestWholeResourceQuarantine(t *testing.T) {
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 100, FailuresToQuarantineWhole: 6, QuarantineBelow: -1, CooldownBase: time.Minute})
	register(t, p, Spec{ID: "a"})
	for _, c := range []string{"x", "y", "z"} {
		report(t, p, "a", c, Failure, 2)
	}
	if _, err := p.Acquire("fresh", time.Minute, nil); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Acquire(any context) after whole quarantine = %v, want ErrExhausted", err)
	}
	info, _ := p.Get("a")
	if info.BlockedUntil.IsZero() {
		t.Fatal("Get(a).BlockedUntil is zero, want the quarantine end")
	}
	fc.Advance(time.Minute)
	probe := mustAcquire(t, p, "fresh")
	if _, err := p.Release(probe.ID, probe.Token, Success); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, p, "x2")
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestCooldownJitterAndCap(t *testing.T) {
	p, _ := newTestPool(t, Config{CooldownBase: 100 * time.Second, CooldownMax: 400 * time.Second, CooldownJitter: 0.2})
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		d := p.cooldown(0)
		if d < 80*time.Second || d > 120*time.Second {
			t.Fatalf("cooldown(0) = %v, want within 100s ± 20%%", d)
		}
		seen[d] = true
		if d := p.cooldown(10); d > 480*time.Second {
			t.Fatalf("cooldown(10) = %v, want at most 400s + 20%%", d)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("cooldown(0) took %d distinct values in 50 draws, want jitter", len(seen))
	}
	// At the largest cap, doubling saturates instead of overflowing.
	big, _ := newTestPool(t, Config{CooldownBase: time.Hour, CooldownMax: maxCooldown, CooldownJitter: 0.5})
	for level := uint8(0); level <= 30; level++ {
		if d := big.cooldown(level); d < time.Hour/2 || d > maxCooldown*3/2 {
			t.Fatalf("cooldown(%d) with CooldownMax %v = %v, want within [30m, 1.5 × the cap]", level, time.Duration(maxCooldown), d)
		}
	}
}

func drain(s *Subscription) []Event {
	var out []Event
	for {
		select {
		case e, ok := <-s.C:
			if !ok {
				return out
			}
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestEvents(t *testing.T) {
	p, _ := newTestPool(t, Config{EventBuffer: 4, EventHistory: 8})
	all := p.Subscribe(0, 0)
	onlyRemoved := p.Subscribe(KindsOf(EventRemoved), 0)
	slow := p.Subscribe(0, 0)
	defer all.Close()
	defer onlyRemoved.Close()

	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	if _, _, err := p.Deregister([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	if ev := drain(all); len(ev) != 3 || ev[0].Kind != EventRegistered || ev[2].Kind != EventRemoved || ev[2].Seq != ev[0].Seq+2 {
		t.Fatalf("all events = %v, want registered a, registered b, removed a with consecutive seqs", ev)
	}
	if ev := drain(onlyRemoved); len(ev) != 1 || ev[0].Resource != "a" {
		t.Fatalf("removed-only events = %v", ev)
	}
	// slow never reads: its buffer of 4 fills and it is disconnected.
	register(t, p, Spec{ID: "c"}, Spec{ID: "d"})
	if _, ok := <-drainAll(slow); ok {
		t.Fatal("slow subscriber still open")
	}
	if !errors.Is(slow.Err(), ErrSlowSubscriber) {
		t.Fatalf("slow.Err() = %v, want ErrSlowSubscriber", slow.Err())
	}
	if got := p.Counters().DroppedEvents; got != 1 {
		t.Fatalf("DroppedEvents = %d, want 1", got)
	}
	if ev := drain(all); len(ev) != 2 {
		t.Fatalf("fast subscriber got %d events, want 2: a slow one must not hold it back", len(ev))
	}
}

// drainAll reads s until it closes and returns a closed channel to test.
func drainAll(s *Subscription) <-chan Event {
	for range s.C {
	}
	return s.C
}

func TestEventsResume(t *testing.T) {
	p, _ := newTestPool(t, Config{EventHistory: 4})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"}, Spec{ID: "c"})
	s := p.Subscribe(0, 1)
	ev := drain(s)
	s.Close()
	if len(ev) != 2 || ev[0].Seq != 2 || ev[1].Seq != 3 {
		t.Fatalf("resume after 1 = %v, want seqs 2, 3", ev)
	}
	register(t, p, Spec{ID: "d"}, Spec{ID: "e"}, Spec{ID: "f"}) // seqs 4..6; history keeps 3..6
	s = p.Subscribe(0, 1)
	ev = drain(s)
	s.Close()
	if len(ev) != 5 || ev[0].Kind != EventGap || ev[1].Seq != 3 {
		t.Fatalf("resume after an evicted seq = %v, want a gap marker then seqs 3..6", ev)
	}
	s.Close() // idempotent

	// Caught up: nothing to replay, no gap.
	s = p.Subscribe(0, 6)
	if ev = drain(s); len(ev) != 0 {
		t.Fatalf("resume after the last seq = %v, want nothing", ev)
	}
	s.Close()
	// Beyond the last event: the subscriber saw an earlier pool's events
	// (a restart numbers them anew), so it gets a gap marker, then live
	// events.
	s = p.Subscribe(0, 100)
	register(t, p, Spec{ID: "g"})
	ev = drain(s)
	s.Close()
	if len(ev) != 2 || ev[0].Kind != EventGap || ev[1].Seq != 7 {
		t.Fatalf("resume after a seq this pool never reached = %v, want a gap marker then seq 7", ev)
	}
}

func TestCloseSubscriptions(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	s := p.Subscribe(0, 0)
	why := errors.New("tenant suspended")
	p.CloseSubscriptions(why)
	if _, ok := <-s.C; ok || !errors.Is(s.Err(), why) {
		t.Fatalf("after CloseSubscriptions: open=%v err=%v", ok, s.Err())
	}
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	region := map[bool]string{true: "eu", false: "us"}
	for i := 0; i < 1000; i++ {
		register(t, p, Spec{ID: fmt.Sprintf("r%04d", i), Capacity: 4, Labels: map[string]string{"region": region[i%2 == 0]}})
		report(t, p, fmt.Sprintf("r%04d", i), "x", Success, 1)
	}
	eu := map[string]string{"region": "eu"}
	// Warm up so that slices and maps have grown to their steady size.
	for i := 0; i < 2000; i++ {
		l := mustAcquire(t, p, "x")
		_, _ = p.Release(l.ID, l.Token, Success)
	}
	p.TakeChanges()
	tests := []struct {
		name string
		fn   func()
	}{
		{"HasResource", func() { p.HasResource("r0042") }},
		{"HasCell", func() { p.HasCell("r0042", "x") }},
		{"Acquire+Release", func() {
			l, err := p.Acquire("x", time.Minute, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Release(l.ID, l.Token, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"Acquire+Release with a selector", func() {
			l, err := p.Acquire("x", time.Minute, eu)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Release(l.ID, l.Token, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"Report", func() {
			if _, err := p.Report(Report{Resource: "r0042", Context: "x", Outcome: Success}); err != nil {
				t.Fatal(err)
			}
		}},
		{"Acquire+Report with the lease+Release", func() {
			l, err := p.Acquire("x", time.Minute, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Report(Report{Resource: l.Resource, Context: "x", Outcome: Failure, LeaseID: l.ID, Token: l.Token}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Release(l.ID, l.Token, Success); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(500, tt.fn); got != 0 {
				t.Fatalf("%s allocates %v times per call, want 0", tt.name, got)
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

func TestMaxLeases(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a", Capacity: 10})
	p.SetMaxLeases(2)
	l := mustAcquire(t, p, "x")
	mustAcquire(t, p, "x")
	if _, err := p.Acquire("x", time.Minute, nil); !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Acquire(over the lease limit) = %v, want ErrExhausted naming the limit", err)
	}
	if _, err := p.Release(l.ID, l.Token, 0); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, p, "x")
	p.SetMaxLeases(0)
	mustAcquire(t, p, "x")
}

func TestBusyProbeDoesNotHoldUpTheQueue(t *testing.T) {
	p, fc := newTestPool(t, Config{FailuresToQuarantine: 1, CooldownBase: time.Second})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	report(t, p, "a", "x", Failure, 1) // a/x quarantined first: head of the probe queue
	report(t, p, "b", "x", Failure, 1)
	other := mustAcquire(t, p, "y") // a or b is busy in another context
	fc.Advance(time.Second)
	probe := mustAcquire(t, p, "x")
	if probe.Resource == other.Resource {
		t.Fatalf("probe went to the busy resource %s", probe.Resource)
	}
	if _, err := p.Release(probe.ID, probe.Token, Success); err != nil {
		t.Fatal(err)
	}
	info, _ := p.Get(probe.Resource)
	for _, c := range info.Contexts {
		if c.Context == "x" && !c.BlockedUntil.IsZero() {
			t.Fatalf("%s/x still blocked after its probe succeeded", probe.Resource)
		}
	}
}

func TestBusyLeadersDoNotCrowdOutTheNextBest(t *testing.T) {
	p, _ := newTestPool(t, Config{Leaders: 2, Candidates: 1})
	for i := 0; i < 200; i++ {
		register(t, p, Spec{ID: fmt.Sprintf("r%03d", i)})
	}
	// r000..r009 are good, in order; the rest unknown.
	for i := 0; i < 10; i++ {
		report(t, p, fmt.Sprintf("r%03d", i), "x", Success, 30-i)
	}
	good := 0
	for i := 0; i < 10; i++ {
		l := mustAcquire(t, p, "x")
		var n int
		fmt.Sscanf(l.Resource, "r%03d", &n)
		if n < 10 {
			good++
		}
	}
	if good < 9 {
		t.Fatalf("%d of 10 acquires took one of the 10 known-good resources, want at least 9: busy leaders must let the next best through", good)
	}
}

// TestWarmCandidatesStayValid: replacements drawn ahead for the explore
// reservoir are only handed out while they can still take a lease, and a
// full or removed resource is never acquired through them.
func TestWarmCandidatesStayValid(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	var specs []Spec
	for i := range 200 {
		id := fmt.Sprintf("r%03d", i)
		specs = append(specs, Spec{ID: id, Capacity: 1, Labels: map[string]string{"id": id}})
	}
	register(t, p, specs...)
	// Warm the reservoir of a context, then make every drawn-ahead
	// candidate unable to take a lease: lease one, deregister the other.
	if _, err := p.Report(Report{Resource: "r000", Context: "c", Outcome: Success}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire("c", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	res := &p.ctxs[p.ctxIDs["c"]].explore
	var ahead []string
	for _, c := range append(res.warm[:res.nwarm:res.nwarm], res.drawn[:res.ndrawn]...) {
		ahead = append(ahead, p.res[c].id)
	}
	p.mu.Unlock()
	if len(ahead) == 0 {
		t.Fatal("no candidates drawn ahead after an Acquire")
	}
	gone := map[string]bool{}
	for i, id := range ahead {
		if gone[id] {
			continue
		}
		gone[id] = true
		if i%2 == 0 {
			if _, _, err := p.Deregister([]string{id}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if l, err := p.Acquire("c", time.Minute, map[string]string{"id": id}); err != nil || l.Resource != id {
			t.Fatalf("Acquire(id=%s) = %v, %v", id, l, err)
		}
	}
	p.mu.Lock()
	p.warmCandidates(res, p.ctxIDs["c"], len(p.avail)) // drawn ones become warm
	for range 4 * warmAhead {
		if c := p.nextCandidate(res, len(p.avail)); p.res[c].availPos < 0 || gone[p.res[c].id] {
			p.mu.Unlock()
			t.Fatalf("nextCandidate = %s, which is full or removed", p.res[c].id)
		}
	}
	p.mu.Unlock()
	for range 300 {
		l, err := p.Acquire("c", time.Minute, nil)
		if errors.Is(err, ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if gone[l.Resource] {
			t.Fatalf("Acquire leased %s, which was full or removed when drawn ahead", l.Resource)
		}
	}
	if err := p.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestPresence(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"})
	report(t, p, "a", "x", Success, 1)
	for _, tt := range []struct {
		id, ctx        string
		resource, cell bool
	}{
		{"a", "x", true, true},
		{"a", "y", true, false},
		{"b", "x", true, false},
		{"nope", "x", false, false},
	} {
		if r, c := p.HasResource(tt.id), p.HasCell(tt.id, tt.ctx); r != tt.resource || c != tt.cell {
			t.Errorf("HasResource, HasCell(%q, %q) = %v, %v; want %v, %v", tt.id, tt.ctx, r, c, tt.resource, tt.cell)
		}
	}
}

// countGate is a Gate with a ceiling on resources and on cells; refuse
// makes it refuse everything.
type countGate struct {
	mu                sync.Mutex
	resources, cells  int
	ceiling           int
	refuse            bool
	reserves, refunds int
}

func (g *countGate) Reserve(resources, cells int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse || g.resources+resources > g.ceiling || g.cells+cells > g.ceiling {
		return errors.New("ceiling reached")
	}
	g.resources += resources
	g.cells += cells
	g.reserves++
	return nil
}

func (g *countGate) Release(resources, cells int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resources -= resources
	g.cells -= cells
	g.refunds++
}

func (g *countGate) counts() (resources, cells int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resources, g.cells
}

// TestGateChargesExactlyWhatThePoolHolds: every call that creates state
// charges the Gate for exactly that, every removal refunds it, and a call
// the Gate refuses changes nothing at all.
func TestGateChargesExactlyWhatThePoolHolds(t *testing.T) {
	g := &countGate{ceiling: 100}
	p, _ := newTestPool(t, Config{Gate: g})
	same := func(step string) {
		t.Helper()
		res, cells := p.Len()
		if r, c := g.counts(); r != res || c != cells {
			t.Fatalf("after %s: the gate holds %d resources and %d cells, the pool %d and %d", step, r, c, res, cells)
		}
	}
	register(t, p, Spec{ID: "a"}, Spec{ID: "b"}, Spec{ID: "a"}) // a repeat counts once
	register(t, p, Spec{ID: "a"}, Spec{ID: "c", Capacity: 2})   // a exists
	same("Register")
	report(t, p, "a", "x", Success, 3) // one cell, charged once
	report(t, p, "b", "y", Failure, 1)
	same("Report")
	l := mustAcquire(t, p, "z")
	if _, err := p.Release(l.ID, l.Token, Success); err != nil { // creates the cell for z
		t.Fatal(err)
	}
	same("Release with an outcome")
	if _, _, err := p.Deregister([]string{"a", "nope"}); err != nil {
		t.Fatal(err)
	}
	same("Deregister")

	// Refused: nothing changes, not even an interned context.
	g.mu.Lock()
	g.refuse = true
	g.mu.Unlock()
	held := mustAcquire(t, p, "x")
	before := fingerprint(t, p)
	nctx := len(p.ctxs)
	refused := []struct {
		name string
		call func() error
	}{
		{"Register", func() error { _, _, err := p.Register([]Spec{{ID: "b"}, {ID: "new"}}); return err }},
		{"Report on a new context", func() error { return second(p.Report(Report{Resource: "b", Context: "fresh", Outcome: Success})) }},
		{"Release creating a cell", func() error { return second(p.Release(held.ID, held.Token, Failure)) }},
	}
	for _, tt := range refused {
		err := tt.call()
		if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), "ceiling reached") {
			t.Fatalf("%s with the gate refusing = %v, want ErrOverBudget wrapping the gate's error", tt.name, err)
		}
		if after := fingerprint(t, p); after != before || len(p.ctxs) != nctx {
			t.Fatalf("%s refused by the gate changed the pool:\nbefore %s\nafter  %s", tt.name, before, after)
		}
	}
	// A large batch with repeats and existing ids is charged for exactly
	// the distinct new ones.
	g.mu.Lock()
	g.refuse = false
	g.mu.Unlock()
	var batch []Spec
	for i := range 60 {
		batch = append(batch, Spec{ID: fmt.Sprintf("big-%d", i%40)}, Spec{ID: "b"})
	}
	if created, _, err := p.Register(batch); err != nil || len(created) != 40 {
		t.Fatalf("Register(60 specs, 40 distinct new ids) = %d created, %v; want 40", len(created), err)
	}
	same("a large Register with repeats")
	g.mu.Lock()
	g.refuse = true
	g.mu.Unlock()
	// Reusing state is never refused.
	if _, _, err := p.Register([]Spec{{ID: "b"}}); err != nil {
		t.Fatalf("Register(existing) with the gate refusing = %v, want nil", err)
	}
	report(t, p, "b", "y", Success, 1)
	same("reuse while refusing")
}

// TestGateAndLenAgreeUnderConcurrency: goroutines register, deregister,
// report and release with outcomes on a few ids, against a ceiling, and
// the pool is closed midway. The gate's counts equal the pool's Len at the
// end, never exceed the ceiling, and do not move once Close has returned.
func TestGateAndLenAgreeUnderConcurrency(t *testing.T) {
	g := &countGate{ceiling: 6}
	p, _ := newTestPool(t, Config{Gate: g})
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var wg sync.WaitGroup
	closed := make(chan [2]int, 1)
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for i := range 2000 {
				if w == 0 && i == 1000 {
					p.Close(errors.New("tenant deleted"))
					r, c := g.counts()
					closed <- [2]int{r, c}
				}
				id := ids[rng.IntN(len(ids))]
				switch rng.IntN(4) {
				case 0:
					_, _, _ = p.Register([]Spec{{ID: id}, {ID: ids[rng.IntN(len(ids))]}})
				case 1:
					_, _, _ = p.Deregister([]string{id})
				case 2:
					_, _ = p.Report(Report{Resource: id, Context: fmt.Sprint("c", rng.IntN(3)), Outcome: Success})
				default:
					if l, err := p.Acquire(fmt.Sprint("c", rng.IntN(3)), time.Minute, nil); err == nil {
						_, _ = p.Release(l.ID, l.Token, Failure)
					}
				}
				if r, c := g.counts(); r > 6 || c > 6 {
					t.Errorf("gate holds %d resources and %d cells, over the ceiling of 6", r, c)
					return
				}
			}
		})
	}
	wg.Wait()
	at := <-closed
	res, cells := p.Len()
	if r, c := g.counts(); r != res || c != cells || r != at[0] || c != at[1] {
		t.Fatalf("gate %d/%d, pool %d/%d, gate when Close returned %d/%d: want all equal", r, c, res, cells, at[0], at[1])
	}
}

// TestCloseRefusesEveryChange: a closed pool refuses every change with
// ErrPoolClosed and the reason, ends its subscriptions and every later one,
// stays closed to OpenSubscriptions, and still answers reads.
func TestCloseRefusesEveryChange(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a", Capacity: 2})
	l := mustAcquire(t, p, "x")
	sub := p.Subscribe(0, 0)
	why := errors.New("tenant deleted")
	p.Close(why)
	if _, ok := <-sub.C; ok || !errors.Is(sub.Err(), why) {
		t.Fatalf("subscription after Close: open %v, Err %v; want ended with %v", ok, sub.Err(), why)
	}
	before := fingerprint(t, p)
	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"Register", func() error { _, _, err := p.Register([]Spec{{ID: "b"}}); return err }},
		{"Deregister", func() error { _, _, err := p.Deregister([]string{"a"}); return err }},
		{"Acquire", func() error { _, err := p.Acquire("x", time.Minute, nil); return err }},
		{"Renew", func() error { _, err := p.Renew(l.ID, l.Token, time.Minute); return err }},
		{"Release", func() error { return second(p.Release(l.ID, l.Token, Success)) }},
		{"Report", func() error { return second(p.Report(Report{Resource: "a", Context: "x", Outcome: Success})) }},
	} {
		if err := tt.call(); !errors.Is(err, ErrPoolClosed) || !errors.Is(err, why) {
			t.Errorf("%s on a closed pool = %v, want ErrPoolClosed wrapping %v", tt.name, err, why)
		}
	}
	if after := fingerprint(t, p); after != before {
		t.Fatalf("calls on a closed pool changed it:\nbefore %s\nafter  %s", before, after)
	}
	p.OpenSubscriptions()
	if late := p.Subscribe(0, 0); !errors.Is(late.Err(), why) {
		t.Fatalf("Subscribe on a closed pool: Err %v, want ended with %v", late.Err(), why)
	}
	if !p.HasResource("a") {
		t.Fatal("HasResource(a) = false on a closed pool, want reads answered")
	}
}

// TestCloseSubscriptionsHoldsUntilOpened: after CloseSubscriptions (a
// suspended tenant) a new subscription ends at once, with the reason and
// without a replay, until OpenSubscriptions.
func TestCloseSubscriptionsHoldsUntilOpened(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "a"})
	why := errors.New("tenant suspended")
	p.CloseSubscriptions(why)
	late := p.Subscribe(0, 0)
	if ev := drain(late); len(ev) != 0 || !errors.Is(late.Err(), why) {
		t.Fatalf("Subscribe after CloseSubscriptions: events %v, Err %v; want none, %v", ev, late.Err(), why)
	}
	p.OpenSubscriptions()
	s := p.Subscribe(0, 0)
	defer s.Close()
	register(t, p, Spec{ID: "b"})
	if ev := drain(s); len(ev) != 1 || ev[0].Resource != "b" {
		t.Fatalf("events after OpenSubscriptions = %v, want b's registration", ev)
	}
}

// TestContextsComeAndGo: a tenant that uses ever new context names, on
// resources it removes again, does not grow the pool without bound: a
// sparse context left without cells is freed and its id reused. Statistics
// of the contexts still in use are untouched.
func TestContextsComeAndGo(t *testing.T) {
	p, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: "keep"})
	for i := range maxDense {
		report(t, p, "keep", fmt.Sprintf("dense-%d", i), Success, 1)
	}
	report(t, p, "keep", "sparse-kept", Success, 3)
	for i := range 1000 {
		id := fmt.Sprintf("r%d", i)
		register(t, p, Spec{ID: id})
		report(t, p, id, fmt.Sprintf("once-%d", i), Failure, 1)
		if i%3 == 0 {
			report(t, p, "keep", "sparse-kept", Success, 1) // a reused sparse context stays
		}
		if _, _, err := p.Deregister([]string{id}); err != nil {
			t.Fatal(err)
		}
		if err := p.checkInvariants(); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if n := len(p.ctxs); n > maxDense+2 {
		t.Fatalf("%d contexts after 1000 names came and went, want at most %d", n, maxDense+2)
	}
	info, err := p.Get("keep")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Contexts) != maxDense+1 {
		t.Fatalf("keep has %d contexts, want %d", len(info.Contexts), maxDense+1)
	}
	for _, c := range info.Contexts {
		if c.Context == "sparse-kept" && c.Successes < 1+3+333 {
			t.Fatalf("sparse-kept successes = %v, want at least %d: its statistics kept", c.Successes, 1+3+333)
		}
	}
}

// TestGateChargesTheBytesOfIdsAndLabels: a resource costs one unit of the
// resource budget, and one more per whole ResourceUnitBytes of its id and
// labels; removing it refunds the same, a repeat in a batch is charged as
// its first spec, and Charge (what a restore accounts) agrees.
func TestGateChargesTheBytesOfIdsAndLabels(t *testing.T) {
	long := strings.Repeat("k", MaxIDLen)
	big := map[string]string{}
	for i := range MaxLabels {
		big[fmt.Sprintf("%s%03d", long[:MaxIDLen-3], i)] = long
	}
	for _, tt := range []struct {
		id     string
		labels map[string]string
		want   int
	}{
		{"a", nil, 1},
		{"proxy-1", map[string]string{"region": "eu", "kind": "dc"}, 1},
		{strings.Repeat("x", 1023), nil, 1},
		{strings.Repeat("x", 1024), nil, 2},
		{long, big, 1 + (MaxIDLen+MaxLabels*2*MaxIDLen)/ResourceUnitBytes},
	} {
		if got := ResourceUnits(tt.id, tt.labels); got != tt.want {
			t.Errorf("ResourceUnits(id of %d bytes, %d labels) = %d, want %d", len(tt.id), len(tt.labels), got, tt.want)
		}
	}
	if got := ResourceUnits(long, big); got != 33 {
		t.Fatalf("the largest resource costs %d units, want 33", got)
	}

	g := &countGate{ceiling: 100}
	p, _ := newTestPool(t, Config{Gate: g})
	charged := func(step string, want int) {
		t.Helper()
		r, _ := g.counts()
		u, _ := p.Charge()
		if r != want || u != want {
			t.Fatalf("after %s: the gate holds %d resource units and Charge says %d, want %d", step, r, u, want)
		}
	}
	register(t, p, Spec{ID: "small"}, Spec{ID: long, Labels: big}, Spec{ID: long}) // the repeat is the first spec
	charged("Register", 1+33)
	five := map[string]string{}
	for i := range 5 {
		five[fmt.Sprint("k", i)] = long // 3 + 5 × 258 bytes: 2 units
	}
	register(t, p, Spec{ID: "two", Labels: five})
	charged("a second Register", 1+33+2)
	// 100 units: 64 more fit, not 65 (two resources of 33 units).
	if _, _, err := p.Register([]Spec{{ID: long[:200], Labels: big}, {ID: long[:201], Labels: big}}); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("Register of 66 units over a ceiling of 100 with 36 held = %v, want ErrOverBudget", err)
	}
	charged("a refused Register", 36)
	if _, _, err := p.Deregister([]string{long}); err != nil {
		t.Fatal(err)
	}
	charged("Deregister", 3)

	snap := p.Snapshot()
	q, _ := newTestPool(t, Config{})
	register(t, p, Spec{ID: long, Labels: big})
	if err := q.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if u, _ := q.Charge(); u != 3 {
		t.Fatalf("Charge after Restore = %d resource units, want 3", u)
	}
}
