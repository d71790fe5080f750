package tenants

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/repool/repool/internal/pool"
)

func TestConcurrentFirstRequestsCreateOnePool(t *testing.T) {
	for round := 0; round < 20; round++ {
		var made atomic.Int32
		r := NewRegistry(func(string) (*pool.Pool, error) {
			made.Add(1)
			return pool.New(pool.Config{})
		})
		const n = 100
		got := make([]*pool.Pool, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				p, err := r.Pool("acme")
				if err != nil {
					t.Error(err)
				}
				got[i] = p
			}(i)
		}
		wg.Wait()
		if made.Load() != 1 {
			t.Fatalf("round %d: newPool called %d times, want 1", round, made.Load())
		}
		for i := range got {
			if got[i] != got[0] {
				t.Fatalf("round %d: caller %d got a different pool", round, i)
			}
		}
	}
}

func TestNoTenantIsAnError(t *testing.T) {
	r := NewRegistry(func(string) (*pool.Pool, error) { return pool.New(pool.Config{}) })
	if p, err := r.Pool(""); err == nil || p != nil {
		t.Fatalf("Pool(\"\") = %v, %v; want an error and no pool", p, err)
	}
	if len(r.Tenants()) != 0 {
		t.Fatal("a pool was created for the empty tenant")
	}
}

func newTestRegistry() *Registry {
	return NewRegistry(func(string) (*pool.Pool, error) { return pool.New(pool.Config{}) })
}

// TestRemovedTenantGetsNoNewPool: a call that reaches Pool after its
// tenant's deletion gets ErrDeleted, never a new empty pool, and reopening
// the registry (a later takeover) does not bring the tenant back.
func TestRemovedTenantGetsNoNewPool(t *testing.T) {
	r := newTestRegistry()
	a, _ := r.Pool("a")
	if got := r.Remove("a"); got != a {
		t.Fatal("Remove returned another pool")
	}
	if _, ok := r.Lookup("a"); ok {
		t.Fatal("Lookup found a removed tenant")
	}
	if p, err := r.Pool("a"); !errors.Is(err, ErrDeleted) || p != nil {
		t.Fatalf("Pool(a) after Remove = %p, %v; want nil, ErrDeleted", p, err)
	}
	// A tenant deleted before it ever had a pool is refused too.
	if got := r.Remove("b"); got != nil {
		t.Fatalf("Remove(b) = %v, want nil (no pool)", got)
	}
	if _, err := r.Pool("b"); !errors.Is(err, ErrDeleted) {
		t.Fatalf("Pool(b) after Remove = %v, want ErrDeleted", err)
	}
	r.Close()
	r.Open()
	if _, err := r.Pool("a"); !errors.Is(err, ErrDeleted) {
		t.Fatalf("Pool(a) after Close and Open = %v, want ErrDeleted", err)
	}
	if got := r.Tenants(); len(got) != 0 {
		t.Fatalf("Tenants() = %q, want none", got)
	}
	if _, err := r.Pool("c"); err != nil {
		t.Fatalf("Pool(c) of another tenant = %v, want a pool", err)
	}
}

// TestClosedRegistryRefusesUntilOpened: Close drops every pool (a step-down)
// and Pool refuses with ErrClosed until Open (a takeover), after which
// tenants get new pools.
func TestClosedRegistryRefusesUntilOpened(t *testing.T) {
	r := newTestRegistry()
	a, _ := r.Pool("a")
	b, _ := r.Pool("b")
	dropped := r.Close()
	if len(dropped) != 2 || dropped["a"] != a || dropped["b"] != b {
		t.Fatalf("Close() = %v, want the pools of a and b", dropped)
	}
	if got := r.Tenants(); len(got) != 0 {
		t.Fatalf("Tenants() after Close = %q, want none", got)
	}
	if p, err := r.Pool("a"); !errors.Is(err, ErrClosed) || p != nil {
		t.Fatalf("Pool(a) while closed = %p, %v; want nil, ErrClosed", p, err)
	}
	if _, err := r.Pool("new"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Pool(new) while closed = %v, want ErrClosed", err)
	}
	if got := r.Close(); len(got) != 0 {
		t.Fatalf("Close() again = %v, want nothing", got)
	}

	r.Open()
	p, err := r.Pool("a")
	if err != nil || p == nil || p == a {
		t.Fatalf("Pool(a) after Open = %p, %v; want a new pool", p, err)
	}
	if q, _ := r.Lookup("a"); q != p {
		t.Fatal("Lookup(a) after Open returned another pool")
	}
}

// TestEachVisitsEveryPool: Each visits every tenant with a pool once, and
// its callback may use the registry.
func TestEachVisitsEveryPool(t *testing.T) {
	r := NewRegistry(func(string) (*pool.Pool, error) { return pool.New(pool.Config{}) })
	want := map[string]*pool.Pool{}
	for _, id := range []string{"a", "b", "c"} {
		p, err := r.Pool(id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = p
	}
	seen := map[string]*pool.Pool{}
	r.Each(func(tenant string, p *pool.Pool) {
		if _, ok := r.Lookup(tenant); !ok { // the registry is usable from f
			t.Errorf("Lookup(%s) inside Each = not found", tenant)
		}
		seen[tenant] = p
	})
	if len(seen) != len(want) {
		t.Fatalf("Each visited %v, want %v", seen, want)
	}
	for id, p := range want {
		if seen[id] != p {
			t.Fatalf("Each gave tenant %s another pool", id)
		}
	}
}

// TestShardedRegistryServesOnlyAdmittedTenants: a sharded registry refuses
// a tenant it was not given (with an *ElsewhereError), publishes an
// admitted tenant's pool only once filled — 50 callers racing the
// admission never see it empty —, refuses a tenant on its way out while
// keeping its pool for calls in flight, and lets it go with Away.
func TestShardedRegistryServesOnlyAdmittedTenants(t *testing.T) {
	r := NewRegistry(func(string) (*pool.Pool, error) { return pool.New(pool.Config{}) })
	r.Shard()
	var ee *ElsewhereError
	if _, err := r.Pool("acme"); !errors.As(err, &ee) || ee.Tenant != "acme" || ee.Group != "" {
		t.Fatalf("Pool(not admitted) = %v, want an *ElsewhereError", err)
	}
	if err := r.Serves("acme"); !errors.Is(err, ErrElsewhere) {
		t.Fatalf("Serves(not admitted) = %v, want ErrElsewhere", err)
	}
	var wg sync.WaitGroup
	var empty atomic.Int32
	stop := make(chan struct{})
	for i := 0; i < 50; i++ {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p, err := r.Pool("acme"); err == nil {
					if n, _ := p.Len(); n != 1 {
						empty.Add(1)
					}
					return
				}
			}
		})
	}
	err := r.Admit("acme", func(p *pool.Pool) error {
		_, _, err := p.Register([]pool.Spec{{ID: "r1"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(stop)
	if empty.Load() != 0 {
		t.Fatalf("%d callers saw the admitted pool before it was filled", empty.Load())
	}
	if err := r.Admit("acme", nil); err != nil {
		t.Fatalf("Admit(again, without state) = %v, want nil (placed already)", err)
	}
	if err := r.Admit("acme", func(*pool.Pool) error { return nil }); err == nil {
		t.Fatal("Admit(with state, over a pool) = nil error, want it refused")
	}
	p, _ := r.Lookup("acme")
	r.Refuse("acme", "b")
	if _, err := r.Pool("acme"); !errors.As(err, &ee) || ee.Group != "b" {
		t.Fatalf("Pool(refused) = %v, want an *ElsewhereError naming b", err)
	}
	if q, ok := r.Lookup("acme"); !ok || q != p {
		t.Fatal("Lookup(refused) lost the pool: calls in flight and the final checkpoint need it")
	}
	if got := r.Away("acme", "b"); got != p {
		t.Fatal("Away did not return the tenant's pool")
	}
	if _, ok := r.Lookup("acme"); ok || r.Placed("acme") {
		t.Fatal("Away kept the tenant")
	}
	if err := r.Serves("acme"); !errors.As(err, &ee) || ee.Group != "b" {
		t.Fatalf("Serves(away) = %v, want an *ElsewhereError naming b", err)
	}
	if err := r.Admit("acme", nil); err != nil || r.Serves("acme") != nil {
		t.Fatalf("Admit(back) = %v, Serves = %v, want it served again", err, r.Serves("acme"))
	}
	// Unsharded, every tenant is served.
	u := NewRegistry(func(string) (*pool.Pool, error) { return pool.New(pool.Config{}) })
	if err := u.Serves("anyone"); err != nil {
		t.Fatalf("Serves on an unsharded registry = %v, want nil", err)
	}
}

// TestForgetAwayDropsOnlyWhatIsGone: the memory of tenants served
// elsewhere keeps the live ones and drops the others.
func TestForgetAwayDropsOnlyWhatIsGone(t *testing.T) {
	r := NewRegistry(func(string) (*pool.Pool, error) { return pool.New(pool.Config{}) })
	r.Shard()
	r.Refuse("kept", "b")
	r.Refuse("deleted", "b")
	r.ForgetAway(func(tenant string) bool { return tenant == "kept" })
	if g, ok := r.Elsewhere("kept"); !ok || g != "b" {
		t.Fatalf("Elsewhere(kept) = %q, %v; want b, true", g, ok)
	}
	if _, ok := r.Elsewhere("deleted"); ok {
		t.Fatal("Elsewhere(deleted) still remembered after ForgetAway")
	}
}
