package budget

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// model is a sequential reference of the contract, written for clarity
// rather than speed.
type model struct {
	budget  [numKinds]int64
	tenants map[string]*modelTenant
}

type modelTenant struct {
	used, res, ceil [numKinds]int64
	limits          Limits
}

func (m *model) tenant(id string) *modelTenant {
	if mt, ok := m.tenants[id]; ok {
		return mt
	}
	mt := &modelTenant{ceil: m.budget}
	m.tenants[id] = mt
	return mt
}

// committed is all reservations plus all usage beyond them.
func (m *model) committed(k Kind) int64 {
	var c int64
	for _, mt := range m.tenants {
		c += mt.res[k] + over(mt.used[k], mt.res[k])
	}
	return c
}

func (m *model) reserve(id string, k Kind, n int64) (Bound, bool) {
	if n == 0 {
		return 0, true
	}
	mt, known := m.tenants[id]
	if !known {
		mt = &modelTenant{ceil: m.budget}
	}
	if mt.used[k]+n > mt.ceil[k] {
		return TenantCeiling, false
	}
	if d := over(mt.used[k]+n, mt.res[k]) - over(mt.used[k], mt.res[k]); d > 0 && m.committed(k)+d > m.budget[k] {
		return GlobalBudget, false
	}
	m.tenants[id] = mt
	mt.used[k] += n
	return 0, true
}

func (m *model) release(id string, k Kind, n int64) (overReleased bool) {
	mt, ok := m.tenants[id]
	if !ok {
		return n > 0
	}
	r := min(n, mt.used[k])
	mt.used[k] -= r
	return r < n
}

// setLimits returns the sentinel SetLimits must wrap, or nil.
func (m *model) setLimits(id string, l Limits) error {
	var res, ceil [numKinds]int64
	for k := range Kind(numKinds) {
		res[k], ceil[k] = l.reserved(k), l.max(k)
		if ceil[k] == 0 {
			ceil[k] = m.budget[k]
		}
		if res[k] < 0 || ceil[k] < 0 || ceil[k] > m.budget[k] || res[k] > ceil[k] {
			return ErrInvalidArgument
		}
	}
	cur := &modelTenant{}
	if mt, ok := m.tenants[id]; ok {
		cur = mt
	}
	for k := range Kind(numKinds) {
		var sum int64
		for _, mt := range m.tenants {
			sum += mt.res[k]
		}
		if sum-cur.res[k]+res[k] > m.budget[k] {
			return ErrInvalidArgument
		}
	}
	for k := range Kind(numKinds) {
		if res[k] > cur.res[k] {
			need := (res[k] - cur.res[k]) - (over(cur.used[k], cur.res[k]) - over(cur.used[k], res[k]))
			if need > 0 && m.committed(k)+need > m.budget[k] {
				return ErrExhausted
			}
		}
	}
	mt := m.tenant(id)
	mt.res, mt.ceil, mt.limits = res, ceil, l
	return nil
}

// runOps decodes ops from data, applies each to a Budget and to the model,
// and checks after each that they agree and that the invariants hold.
func runOps(t *testing.T, data []byte) {
	t.Helper()
	const budget = 24
	b := newTestBudget(t, budget, budget+8)
	m := &model{budget: [numKinds]int64{budget, budget + 8}, tenants: map[string]*modelTenant{}}
	ids := []string{"a", "b", "c"}
	accounted := false
	for len(data) >= 5 {
		op, id, k, x, y := data[0]%8, ids[int(data[1])%len(ids)], Kind(data[2]%numKinds), int64(data[3]%16), int64(data[4]%16)
		data = data[5:]
		var committedBefore [numKinds]int64
		for k := range Kind(numKinds) {
			committedBefore[k] = b.kinds[k].committed.Load()
		}
		switch op {
		case 0, 1, 2:
			mt := m.tenants[id]
			withinReservation := mt != nil && mt.used[k]+x <= mt.res[k]
			wantBound, wantOK := m.reserve(id, k, x)
			err := b.Reserve(id, k, x)
			var ex *ExhaustedError
			switch {
			case withinReservation && err != nil:
				t.Fatalf("Reserve(%s, %v, %d) within reservation = got %v, want nil", id, k, x, err)
			case wantOK && err != nil:
				t.Fatalf("Reserve(%s, %v, %d) = got %v, want nil", id, k, x, err)
			case !wantOK && (!errors.As(err, &ex) || ex.Bound != wantBound):
				t.Fatalf("Reserve(%s, %v, %d) = got %v, want %v", id, k, x, err, wantBound)
			}
		case 3, 4:
			wantOver := m.release(id, k, x)
			if err := b.Release(id, k, x); errors.Is(err, ErrOverRelease) != wantOver || (err != nil && !wantOver) {
				t.Fatalf("Release(%s, %v, %d) = got %v, want over-release %v", id, k, x, err, wantOver)
			}
		case 5:
			l := Limits{ReservedResources: x, MaxResources: y * 2, ReservedCells: y, MaxCells: x * 2}
			want := m.setLimits(id, l)
			if err := b.SetLimits(id, l); !errors.Is(err, want) || (want == nil && err != nil) {
				t.Fatalf("SetLimits(%s, %+v) = got %v, want %v", id, l, err, want)
			}
		case 6:
			n := x * y / 4
			m.tenant(id).used[k] += n
			if m.committed(k) > m.budget[k] {
				accounted = true
			}
			if err := b.Account(id, k, n); err != nil {
				t.Fatalf("Account(%s, %v, %d) = %v", id, k, n, err)
			}
		case 7:
			var want Usage
			if mt, ok := m.tenants[id]; ok {
				want = Usage{Resources: mt.used[Resources], Cells: mt.used[Cells]}
				delete(m.tenants, id)
			}
			if got := b.Forget(id); got != want {
				t.Fatalf("Forget(%s) = got %+v, want %+v", id, got, want)
			}
		}

		// The implementation agrees with the model...
		for _, id := range ids {
			var want Usage
			var wantBounds Limits
			if mt, ok := m.tenants[id]; ok {
				want = Usage{Resources: mt.used[Resources], Cells: mt.used[Cells]}
				wantBounds = mt.limits
			}
			if got := b.Usage(id); got != want {
				t.Fatalf("Usage(%s) = got %+v, want %+v", id, got, want)
			}
			if got := b.Limits(id); got != wantBounds {
				t.Fatalf("Limits(%s) = got %+v, want %+v", id, got, wantBounds)
			}
		}
		checkAccounting(t, b)
		// ...and the invariants hold.
		tot := b.Totals()
		for k := range Kind(numKinds) {
			kt := tot.Of(k)
			if got, want := kt.Free, m.budget[k]-m.committed(k); got != want {
				t.Fatalf("Totals().Of(%v).Free = got %d, want %d", k, got, want)
			}
			for _, id := range ids {
				if u := b.Usage(id).Of(k); u < 0 {
					t.Fatalf("Usage(%s).Of(%v) = got %d, want ≥ 0", id, k, u)
				}
			}
			if kt.Used > kt.Budget && !accounted {
				t.Fatalf("Totals().Of(%v).Used = got %d, want ≤ %d (no Account overdrew it)", k, kt.Used, kt.Budget)
			}
			// Only Account may raise commitments beyond the budget.
			if c := b.kinds[k].committed.Load(); op != 6 && c > kt.Budget && c > committedBefore[k] {
				t.Fatalf("op %d raised %v committed from %d to %d, beyond the budget %d", op, k, committedBefore[k], c, kt.Budget)
			}
		}
	}
}

// FuzzOps checks random sequences of operations against the model.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 0, 0, 10, 0, 5, 1, 0, 8, 4, 0, 1, 0, 15, 0, 0, 0, 0, 15, 0})
	f.Add([]byte{6, 0, 1, 15, 15, 0, 1, 1, 3, 0, 3, 0, 1, 15, 0, 7, 0, 0, 0, 0})
	f.Add([]byte{5, 2, 0, 9, 3, 0, 1, 0, 15, 0, 0, 2, 0, 15, 0, 5, 2, 0, 3, 3})
	f.Fuzz(runOps)
}

// TestRandomOps is the property test: many random sequences, every run.
func TestRandomOps(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 3))
		data := make([]byte, 5*200)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		runOps(t, data)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
}
