package tenants

import (
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

func TestRemove(t *testing.T) {
	r := NewRegistry(func(string) (*pool.Pool, error) { return pool.New(pool.Config{}) })
	a, _ := r.Pool("a")
	if got := r.Remove("a"); got != a {
		t.Fatal("Remove returned another pool")
	}
	if _, ok := r.Lookup("a"); ok {
		t.Fatal("Lookup found a removed tenant")
	}
}
