package callbudget

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBudgetCountsByClaim(t *testing.T) {
	b, err := New(Config{PerTenant: 2, Unverified: 1, Hold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a1, err1 := b.Admit("a")
	_, err2 := b.Admit("a")
	if err1 != nil || err2 != nil {
		t.Fatalf("two calls of a = got errors %v, %v, want none", err1, err2)
	}
	if _, err := b.Admit("a"); !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), `tenant "a" has 2 calls in flight`) {
		t.Fatalf("a third call of a = got %v, want ErrFull naming a and its 2 calls", err)
	}
	if _, err := b.Admit("b"); err != nil {
		t.Fatalf("a call of b while a is full = got %v, want nil", err)
	}
	a1.Release()
	a1.Release() // a second release gives nothing back twice
	if got := b.InFlight("a"); got != 1 {
		t.Fatalf("a's calls after one release (twice) = got %d, want 1", got)
	}
	u, err := b.Admit("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(""); !errors.Is(err, ErrFull) {
		t.Fatalf("a second unverified call = got %v, want ErrFull", err)
	}
	if !u.Expired() {
		t.Fatal("an unverified slot not authenticated: Expired = false, want true")
	}
	u.Authenticated("b")
	if u.Expired() || b.InFlight("") != 0 || b.InFlight("b") != 2 {
		t.Fatalf("after Authenticated(b): expired %v, unverified %d, b %d; want false, 0, 2", u.Expired(), b.InFlight(""), b.InFlight("b"))
	}
	u.Release()
	if got := b.InFlight("b"); got != 1 {
		t.Fatalf("b's calls after the moved slot's release = got %d, want 1", got)
	}
}

func TestNewRefusesBadSizes(t *testing.T) {
	for _, c := range []Config{{PerTenant: 0, Unverified: 1, Hold: 1}, {PerTenant: 1, Unverified: 0, Hold: 1}, {PerTenant: 1, Unverified: 1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) = nil error, want one naming the field", c)
		}
	}
}
