package budget

import (
	"errors"
	"strings"
	"testing"
)

// newTestBudget returns a Budget with the given budgets.
func newTestBudget(t testing.TB, resources, cells int64) *Budget {
	t.Helper()
	b, err := New(Config{Resources: resources, Cells: cells})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return b
}

func mustSetLimits(t testing.TB, b *Budget, tenant string, l Limits) {
	t.Helper()
	if err := b.SetLimits(tenant, l); err != nil {
		t.Fatalf("SetLimits(%q, %+v) = %v", tenant, l, err)
	}
}

func mustReserve(t testing.TB, b *Budget, tenant string, k Kind, n int64) {
	t.Helper()
	if err := b.Reserve(tenant, k, n); err != nil {
		t.Fatalf("Reserve(%q, %v, %d) = %v", tenant, k, n, err)
	}
}

// checkAccounting verifies, with no call in flight, that the committed
// counter of every kind equals all reservations plus all usage beyond them,
// and that the reservations add up.
func checkAccounting(t testing.TB, b *Budget) {
	t.Helper()
	var res, shared [numKinds]int64
	b.tenants.Range(func(_, v any) bool {
		for k := range Kind(numKinds) {
			w := v.(*tenant).words[k].Load()
			if w&deadBit != 0 {
				t.Errorf("forgotten tenant still listed")
			}
			u, r := unpack(w)
			res[k] += r
			shared[k] += over(u, r)
		}
		return true
	})
	for k := range Kind(numKinds) {
		g := &b.kinds[k]
		if got, want := g.reserved.Load(), res[k]; got != want {
			t.Errorf("%v: reserved = got %d, want %d (sum of tenants)", k, got, want)
		}
		if got, want := g.committed.Load(), res[k]+shared[k]; got != want {
			t.Errorf("%v: committed = got %d, want %d (reserved %d + shared %d)", k, got, want, res[k], shared[k])
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "zero means defaults", cfg: Config{}},
		{name: "explicit", cfg: Config{Resources: 10, Cells: 20}},
		{name: "largest", cfg: Config{Resources: MaxBudget, Cells: MaxBudget}},
		{name: "negative resources", cfg: Config{Resources: -1}, wantErr: true},
		{name: "negative cells", cfg: Config{Cells: -1}, wantErr: true},
		{name: "too large", cfg: Config{Cells: MaxBudget + 1}, wantErr: true},
		{name: "default ceilings", cfg: Config{Resources: 10, Cells: 20, DefaultMaxResources: 3, DefaultMaxCells: 20}},
		{name: "default ceiling above the budget", cfg: Config{Resources: 10, DefaultMaxResources: 11}, wantErr: true},
		{name: "negative default ceiling", cfg: Config{DefaultMaxCells: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if gotErr := errors.Is(err, ErrInvalidArgument); gotErr != tt.wantErr || (err != nil && !gotErr) {
				t.Fatalf("Validate(%+v) = got %v, want error %v", tt.cfg, err, tt.wantErr)
			}
			if _, err := New(tt.cfg); (err != nil) != tt.wantErr {
				t.Fatalf("New(%+v) = got %v, want error %v", tt.cfg, err, tt.wantErr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	b := newTestBudget(t, 0, 0)
	tot := b.Totals()
	if got, want := tot.Resources.Budget, int64(DefaultResources); got != want {
		t.Errorf("Totals().Resources.Budget = got %d, want %d", got, want)
	}
	if got, want := tot.Cells.Budget, int64(DefaultCells); got != want {
		t.Errorf("Totals().Cells.Budget = got %d, want %d", got, want)
	}
}

func TestReserve(t *testing.T) {
	type hold struct {
		tenant string
		n      int64
	}
	tests := []struct {
		name      string
		limits    map[string]Limits
		held      []hold // reserved beforehand, in order
		n         int64
		kind      Kind
		wantBound Bound // 0: success
		wantErr   error
	}{
		{name: "free budget", n: 10},
		{name: "exactly the budget", n: 100},
		{name: "beyond the budget", n: 101, wantBound: TenantCeiling},
		{name: "shared pool used up by others",
			held: []hold{{"b", 95}}, n: 6, wantBound: GlobalBudget},
		{name: "shared pool has just enough",
			held: []hold{{"b", 95}}, n: 5},
		{name: "within reservation while others hold the rest",
			limits: map[string]Limits{"a": {ReservedResources: 30}},
			held:   []hold{{"b", 70}}, n: 30},
		{name: "reservation plus shared",
			limits: map[string]Limits{"a": {ReservedResources: 30}},
			held:   []hold{{"b", 60}}, n: 40},
		{name: "reservation plus too much shared",
			limits: map[string]Limits{"a": {ReservedResources: 30}},
			held:   []hold{{"b", 60}}, n: 41, wantBound: GlobalBudget},
		{name: "others' reservations are not shared",
			limits: map[string]Limits{"b": {ReservedResources: 50}},
			n:      51, wantBound: GlobalBudget},
		{name: "ceiling",
			limits: map[string]Limits{"a": {MaxResources: 10}},
			held:   []hold{{"a", 8}}, n: 3, wantBound: TenantCeiling},
		{name: "up to the ceiling",
			limits: map[string]Limits{"a": {MaxResources: 10}},
			held:   []hold{{"a", 8}}, n: 2},
		{name: "ceiling checked before the global budget",
			limits: map[string]Limits{"a": {MaxResources: 10}},
			held:   []hold{{"b", 100}}, n: 11, wantBound: TenantCeiling},
		{name: "cells are separate",
			held: []hold{{"b", 100}}, kind: Cells, n: 200},
		{name: "zero is a no-op", held: []hold{{"b", 100}}, n: 0},
		{name: "negative", n: -1, wantErr: ErrInvalidArgument},
		{name: "unknown kind", kind: 7, n: 1, wantErr: ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBudget(t, 100, 200)
			for id, l := range tt.limits {
				mustSetLimits(t, b, id, l)
			}
			for _, h := range tt.held {
				mustReserve(t, b, h.tenant, Resources, h.n)
			}
			before, beforeTotals := b.Usage("a"), b.Totals()

			err := b.Reserve("a", tt.kind, tt.n)

			var ex *ExhaustedError
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Reserve(a, %v, %d) = got %v, want %v", tt.kind, tt.n, err, tt.wantErr)
				}
			case tt.wantBound == 0:
				if err != nil {
					t.Fatalf("Reserve(a, %v, %d) = got %v, want nil", tt.kind, tt.n, err)
				}
				if got, want := b.Usage("a").Of(tt.kind), before.Of(tt.kind)+tt.n; got != want {
					t.Fatalf("Usage(a).Of(%v) = got %d, want %d", tt.kind, got, want)
				}
			case !errors.As(err, &ex) || !errors.Is(err, ErrExhausted):
				t.Fatalf("Reserve(a, %v, %d) = got %v, want an *ExhaustedError", tt.kind, tt.n, err)
			case ex.Bound != tt.wantBound || ex.Kind != tt.kind || ex.Requested != tt.n:
				t.Fatalf("Reserve(a, %v, %d) = got %+v, want limit %v, kind %v, requested %d",
					tt.kind, tt.n, *ex, tt.wantBound, tt.kind, tt.n)
			}
			if err != nil {
				if after, afterTotals := b.Usage("a"), b.Totals(); after != before || afterTotals != beforeTotals {
					t.Fatalf("refused Reserve changed state: usage %+v → %+v, totals %+v → %+v",
						before, after, beforeTotals, afterTotals)
				}
			}
			checkAccounting(t, b)
		})
	}
}

// TestDefaultCeilingShares is the default fairness: with a default ceiling
// of a quarter of the budget, a tenant that nobody configured takes at most
// a quarter, and a second one gets its quarter after the first took all it
// could.
func TestDefaultCeilingShares(t *testing.T) {
	b, err := New(Config{Resources: 100, Cells: 400, DefaultMaxResources: 25, DefaultMaxCells: 100})
	if err != nil {
		t.Fatalf("New() = got error %v, want nil", err)
	}
	take := func(tenant string) int64 {
		var n int64
		for b.Reserve(tenant, Resources, 1) == nil {
			n++
		}
		return n
	}
	if got := take("greedy"); got != 25 {
		t.Fatalf("units a greedy tenant took = got %d, want 25 (its default ceiling)", got)
	}
	var ex *ExhaustedError
	if err := b.Reserve("greedy", Resources, 1); !errors.As(err, &ex) || ex.Bound != TenantCeiling || ex.Max != 25 {
		t.Fatalf("Reserve(greedy, 1) past its default ceiling = got %v, want the tenant ceiling of 25", err)
	}
	if got := take("second"); got != 25 {
		t.Fatalf("units a second tenant took = got %d, want 25", got)
	}
	mustSetLimits(t, b, "greedy", Limits{ReservedCells: 10})
	if err := b.Reserve("greedy", Resources, 1); !errors.As(err, &ex) || ex.Max != 25 {
		t.Fatalf("Reserve(greedy, 1) with a zero ceiling set = got %v, want the default ceiling of 25", err)
	}
	mustSetLimits(t, b, "greedy", Limits{MaxResources: 60})
	if got := take("greedy"); got != 35 {
		t.Fatalf("units taken up to a ceiling of 60 = got %d, want 35 more", got)
	}
	checkAccounting(t, b)
}

// TestRefusalsTellOnlyTheTenantsOwnFigures: a refusal by the global budget
// says neither its size nor what others hold.
func TestRefusalsTellOnlyTheTenantsOwnFigures(t *testing.T) {
	b, err := New(Config{Resources: 9173, DefaultMaxResources: 9000})
	if err != nil {
		t.Fatalf("New() = got error %v, want nil", err)
	}
	mustReserve(t, b, "other", Resources, 8642)
	mustReserve(t, b, "me", Resources, 3)
	err = b.Reserve("me", Resources, 600)
	var ex *ExhaustedError
	if !errors.As(err, &ex) || ex.Bound != GlobalBudget {
		t.Fatalf("Reserve(me, 600) = got %v, want a global budget refusal", err)
	}
	for _, secret := range []string{"9173", "8642", "8645", "528", "531"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Reserve(me, 600) = got %q, which tells %s (the budget, others' usage or what is free)", err, secret)
		}
	}
	for _, own := range []string{"holds 3", "ceiling of 9000", "600 requested"} {
		if !strings.Contains(err.Error(), own) {
			t.Errorf("Reserve(me, 600) = got %q, want it to say %q", err, own)
		}
	}
}

func TestExhaustedErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *ExhaustedError
		want string
	}{
		{
			name: "ceiling",
			err:  &ExhaustedError{Kind: Cells, Bound: TenantCeiling, Requested: 2, Used: 9, Max: 10},
			want: "budget exhausted: cells: tenant ceiling of 10 reached (9 in use, 2 requested)",
		},
		{
			name: "global",
			err:  &ExhaustedError{Kind: Resources, Bound: GlobalBudget, Requested: 3, Used: 7, Reserved: 5, Max: 100},
			want: "budget exhausted: resources: no shared capacity is free on this server (this tenant holds 7, 5 of them within its reservation, under its ceiling of 100; 3 requested); only a reservation guarantees capacity",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("Error() = got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	tests := []struct {
		name          string
		reserved      int64 // tenant a's reservation
		held          int64
		release       int64
		wantErr       error
		wantUsed      int64
		wantShared    int64
		wantOverCount int64
	}{
		{name: "part", held: 10, release: 4, wantUsed: 6, wantShared: 6},
		{name: "all", held: 10, release: 10},
		{name: "shared units go first", reserved: 8, held: 10, release: 2, wantUsed: 8},
		{name: "then reserved ones", reserved: 8, held: 10, release: 5, wantUsed: 5},
		{name: "more than held is clamped", held: 3, release: 5,
			wantErr: ErrOverRelease, wantOverCount: 2},
		{name: "nothing held", release: 1, wantErr: ErrOverRelease, wantOverCount: 1},
		{name: "negative", held: 3, release: -1, wantErr: ErrInvalidArgument, wantUsed: 3, wantShared: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBudget(t, 100, 100)
			if tt.reserved > 0 {
				mustSetLimits(t, b, "a", Limits{ReservedResources: tt.reserved})
			}
			if tt.held > 0 {
				mustReserve(t, b, "a", Resources, tt.held)
			}
			err := b.Release("a", Resources, tt.release)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Release(a, resources, %d) = got %v, want %v", tt.release, err, tt.wantErr)
			}
			if got := b.Usage("a").Resources; got != tt.wantUsed {
				t.Errorf("Usage(a).Resources = got %d, want %d", got, tt.wantUsed)
			}
			tot := b.Totals().Resources
			if tot.Shared != tt.wantShared {
				t.Errorf("Totals().Resources.Shared = got %d, want %d", tot.Shared, tt.wantShared)
			}
			if tot.OverReleased != tt.wantOverCount {
				t.Errorf("Totals().Resources.OverReleased = got %d, want %d", tot.OverReleased, tt.wantOverCount)
			}
			checkAccounting(t, b)
		})
	}
}

func TestEmptyTenant(t *testing.T) {
	b := newTestBudget(t, 10, 10)
	calls := []struct {
		name string
		call func() error
	}{
		{"Reserve", func() error { return b.Reserve("", Resources, 1) }},
		{"Release", func() error { return b.Release("", Resources, 1) }},
		{"Account", func() error { return b.Account("", Resources, 1) }},
		{"SetLimits", func() error { return b.SetLimits("", Limits{}) }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("%s(\"\", ...) = got %v, want ErrInvalidArgument", c.name, err)
			}
		})
	}
	if got := b.Totals().Resources.Tenants; got != 0 {
		t.Fatalf("Totals().Resources.Tenants = got %d, want 0", got)
	}
}

func TestSetLimits(t *testing.T) {
	tests := []struct {
		name    string
		before  map[string]Limits // applied first
		holdB   int64             // resources tenant b holds before the call
		holdBC  int64             // cells tenant b holds before the call
		limits  Limits            // then applied to tenant a
		wantErr error
	}{
		{name: "zero limits", limits: Limits{}},
		{name: "all set", limits: Limits{ReservedResources: 10, MaxResources: 20, ReservedCells: 30, MaxCells: 40}},
		{name: "reservation equal to ceiling", limits: Limits{ReservedResources: 20, MaxResources: 20}},
		{name: "reservation is the whole budget", limits: Limits{ReservedResources: 100}},
		{name: "negative reservation", limits: Limits{ReservedCells: -1}, wantErr: ErrInvalidArgument},
		{name: "negative ceiling", limits: Limits{MaxResources: -1}, wantErr: ErrInvalidArgument},
		{name: "ceiling above the budget", limits: Limits{MaxCells: 201}, wantErr: ErrInvalidArgument},
		{name: "reservation above the ceiling",
			limits: Limits{ReservedResources: 11, MaxResources: 10}, wantErr: ErrInvalidArgument},
		{name: "reservation above the budget",
			limits: Limits{ReservedResources: 101}, wantErr: ErrInvalidArgument},
		{name: "sum of reservations above the budget",
			before:  map[string]Limits{"b": {ReservedResources: 60}, "c": {ReservedResources: 30}},
			limits:  Limits{ReservedResources: 11},
			wantErr: ErrInvalidArgument},
		{name: "sum of reservations equal to the budget",
			before: map[string]Limits{"b": {ReservedResources: 60}, "c": {ReservedResources: 30}},
			limits: Limits{ReservedResources: 10}},
		{name: "second kind invalid changes neither",
			limits: Limits{ReservedResources: 5, ReservedCells: 201}, wantErr: ErrInvalidArgument},
		{name: "reservation held by others in the shared pool",
			holdB: 95, limits: Limits{ReservedResources: 10}, wantErr: ErrExhausted},
		{name: "reservation fits beside others",
			holdB: 90, limits: Limits{ReservedResources: 10}},
		{name: "resources raised then cells refused changes neither",
			holdBC: 195, limits: Limits{ReservedResources: 10, ReservedCells: 10}, wantErr: ErrExhausted},
		{name: "resources lowered and cells refused changes neither",
			holdBC: 195, limits: Limits{ReservedCells: 10}, wantErr: ErrExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBudget(t, 100, 200)
			for id, l := range tt.before {
				mustSetLimits(t, b, id, l)
			}
			if tt.holdB > 0 {
				mustReserve(t, b, "b", Resources, tt.holdB)
			}
			if tt.holdBC > 0 {
				mustReserve(t, b, "b", Cells, tt.holdBC)
			}
			mustSetLimits(t, b, "a", Limits{ReservedResources: 1, MaxResources: 50, ReservedCells: 2, MaxCells: 60})
			beforeLimits, beforeTotals := b.Limits("a"), b.Totals()

			err := b.SetLimits("a", tt.limits)

			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("SetLimits(a, %+v) = got %v, want %v", tt.limits, err, tt.wantErr)
			}
			wantBounds := tt.limits
			if err != nil {
				wantBounds = beforeLimits
				if got := b.Totals(); got != beforeTotals {
					t.Errorf("Totals() after refused SetLimits = got %+v, want %+v", got, beforeTotals)
				}
				for k := range Kind(numKinds) {
					if got, want := b.lookup("a").ceil[k].Load(), beforeLimits.max(k); got != want {
						t.Errorf("%v ceiling after refused SetLimits = got %d, want %d", k, got, want)
					}
				}
			}
			if got := b.Limits("a"); got != wantBounds {
				t.Errorf("Limits(a) = got %+v, want %+v", got, wantBounds)
			}
			checkAccounting(t, b)
		})
	}
}

func TestSetLimitsLive(t *testing.T) {
	b := newTestBudget(t, 100, 100)
	mustReserve(t, b, "a", Cells, 20)

	// Lowering the ceiling below usage keeps the state and refuses more.
	mustSetLimits(t, b, "a", Limits{MaxCells: 10})
	if got := b.Usage("a").Cells; got != 20 {
		t.Fatalf("Usage(a).Cells = got %d, want 20", got)
	}
	var ex *ExhaustedError
	if err := b.Reserve("a", Cells, 1); !errors.As(err, &ex) || ex.Bound != TenantCeiling {
		t.Fatalf("Reserve(a, cells, 1) = got %v, want the tenant ceiling", err)
	}
	if err := b.Release("a", Cells, 11); err != nil {
		t.Fatalf("Release(a, cells, 11) = %v", err)
	}
	mustReserve(t, b, "a", Cells, 1)

	// Raising the reservation moves usage out of the shared pool.
	mustSetLimits(t, b, "a", Limits{ReservedCells: 10, MaxCells: 50})
	if got := b.Totals().Cells; got.Shared != 0 || got.Reserved != 10 || got.Free != 90 {
		t.Fatalf("Totals().Cells = got %+v, want shared 0, reserved 10, free 90", got)
	}
	mustReserve(t, b, "b", Cells, 90)
	mustReserve(t, b, "a", Cells, 0)
	if err := b.Reserve("a", Cells, 1); !errors.As(err, &ex) || ex.Bound != GlobalBudget {
		t.Fatalf("Reserve(a, cells, 1) = got %v, want the global budget", err)
	}

	// Lowering the reservation moves usage into the shared pool, which the
	// freed reservation covers.
	mustSetLimits(t, b, "a", Limits{ReservedCells: 4})
	if got := b.Totals().Cells; got.Shared != 96 || got.Reserved != 4 || got.Free != 0 {
		t.Fatalf("Totals().Cells = got %+v, want shared 96, reserved 4, free 0", got)
	}
	checkAccounting(t, b)
}

func TestAccount(t *testing.T) {
	b := newTestBudget(t, 100, 100)
	mustSetLimits(t, b, "a", Limits{ReservedResources: 10, MaxResources: 20})
	mustSetLimits(t, b, "b", Limits{ReservedResources: 5})

	// Restored state beyond the ceiling and the budget is kept.
	if err := b.Account("a", Resources, 150); err != nil {
		t.Fatalf("Account(a, resources, 150) = %v", err)
	}
	if got := b.Usage("a").Resources; got != 150 {
		t.Fatalf("Usage(a).Resources = got %d, want 150", got)
	}
	if got := b.Totals().Resources; got.Free != 100-15-140 {
		t.Fatalf("Totals().Resources.Free = got %d, want %d", got.Free, 100-15-140)
	}
	checkAccounting(t, b)

	tests := []struct {
		name      string
		tenant    string
		n         int64
		wantBound Bound
	}{
		{name: "over the ceiling", tenant: "a", n: 1, wantBound: TenantCeiling},
		{name: "shared pool overdrawn", tenant: "c", n: 1, wantBound: GlobalBudget},
		{name: "within another tenant's reservation", tenant: "b", n: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := b.Reserve(tt.tenant, Resources, tt.n)
			var ex *ExhaustedError
			switch {
			case tt.wantBound == 0 && err != nil:
				t.Fatalf("Reserve(%s, resources, %d) = got %v, want nil", tt.tenant, tt.n, err)
			case tt.wantBound != 0 && (!errors.As(err, &ex) || ex.Bound != tt.wantBound):
				t.Fatalf("Reserve(%s, resources, %d) = got %v, want %v", tt.tenant, tt.n, err, tt.wantBound)
			}
		})
	}

	// Releasing brings the tenant back under its limits.
	if err := b.Release("a", Resources, 140); err != nil {
		t.Fatalf("Release(a, resources, 140) = %v", err)
	}
	mustReserve(t, b, "a", Resources, 10)
	mustReserve(t, b, "c", Resources, 75)
	if got := b.Totals().Resources; got.Used != 100 || got.Free != 0 {
		t.Fatalf("Totals().Resources = got %+v, want used 100, free 0", got)
	}
	checkAccounting(t, b)

	if err := b.Account("a", Resources, -1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Account(a, resources, -1) = got %v, want ErrInvalidArgument", err)
	}
	if err := b.Account("a", Resources, MaxUsage-10); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Account(a, resources, MaxUsage-10) = got %v, want ErrInvalidArgument", err)
	}
	checkAccounting(t, b)
}

func TestForget(t *testing.T) {
	b := newTestBudget(t, 100, 100)
	mustSetLimits(t, b, "a", Limits{ReservedResources: 30, ReservedCells: 10, MaxCells: 50})
	mustReserve(t, b, "a", Resources, 40)
	mustReserve(t, b, "a", Cells, 5)
	if err := b.Account("a", Cells, 100); err != nil {
		t.Fatalf("Account(a, cells, 100) = %v", err)
	}
	mustReserve(t, b, "b", Resources, 10)

	if got, want := b.Forget("a"), (Usage{Resources: 40, Cells: 105}); got != want {
		t.Fatalf("Forget(a) = got %+v, want %+v", got, want)
	}
	tot := b.Totals()
	if want := (Total{Budget: 100, Used: 10, Shared: 10, Free: 90, Tenants: 1}); tot.Resources != want {
		t.Errorf("Totals().Resources = got %+v, want %+v", tot.Resources, want)
	}
	if want := (Total{Budget: 100, Free: 100, Tenants: 1}); tot.Cells != want {
		t.Errorf("Totals().Cells = got %+v, want %+v", tot.Cells, want)
	}
	if got := b.Limits("a"); got != (Limits{}) {
		t.Errorf("Limits(a) after Forget = got %+v, want none", got)
	}
	if got := b.Usage("a"); got != (Usage{}) {
		t.Errorf("Usage(a) after Forget = got %+v, want zero", got)
	}
	if got := b.Forget("a"); got != (Usage{}) {
		t.Errorf("Forget(a) again = got %+v, want zero", got)
	}
	// A tenant of the same name starts afresh with default limits.
	mustReserve(t, b, "a", Cells, 100)
	checkAccounting(t, b)
}

// TestZeroAllocs holds the design: the hot path allocates nothing once a
// tenant is known.
func TestZeroAllocs(t *testing.T) {
	b := newTestBudget(t, 100, 100)
	mustSetLimits(t, b, "r", Limits{ReservedCells: 10})
	mustReserve(t, b, "s", Cells, 0) // known tenant without limits
	mustReserve(t, b, "s", Cells, 1)
	if err := b.Release("s", Cells, 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		tenant string
	}{
		{name: "within reservation", tenant: "r"},
		{name: "shared pool", tenant: "s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := testing.AllocsPerRun(1000, func() {
				if err := b.Reserve(tt.tenant, Cells, 1); err != nil {
					t.Fatal(err)
				}
				if err := b.Release(tt.tenant, Cells, 1); err != nil {
					t.Fatal(err)
				}
			})
			if got != 0 {
				t.Fatalf("Reserve+Release allocations = got %v, want 0", got)
			}
		})
	}
}
