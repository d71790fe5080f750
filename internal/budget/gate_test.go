package budget

import (
	"errors"
	"testing"
)

// TestGateTakesBothOrNeither: a gate's Reserve takes resources and cells
// together or not at all, and Release returns them.
func TestGateTakesBothOrNeither(t *testing.T) {
	b, err := New(Config{Resources: 10, Cells: 5})
	if err != nil {
		t.Fatal(err)
	}
	g := b.Gate("t", nil)
	if err := g.Reserve(3, 4); err != nil {
		t.Fatalf("Reserve(3, 4) = %v", err)
	}
	// Resources fit, cells do not: nothing is taken.
	if err := g.Reserve(2, 2); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Reserve(2, 2) over the cells = %v, want ErrExhausted", err)
	}
	if u := b.Usage("t"); u.Of(Resources) != 3 || u.Of(Cells) != 4 {
		t.Fatalf("usage after a refused Reserve = %+v, want 3 resources and 4 cells", u)
	}
	g.Release(3, 4)
	if u := b.Usage("t"); u.Of(Resources) != 0 || u.Of(Cells) != 0 {
		t.Fatalf("usage after Release = %+v, want none", u)
	}
	g.Release(1, 0) // more than held: clamped, counted, logged; never negative
	if u := b.Usage("t"); u.Of(Resources) != 0 {
		t.Fatalf("usage after an over-release = %+v", u)
	}
	if b.Totals().Of(Resources).OverReleased != 1 {
		t.Fatalf("over-release not counted: %+v", b.Totals().Of(Resources))
	}
}
