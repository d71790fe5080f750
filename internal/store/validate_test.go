package store

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/limits"
)

func TestValidateTenantID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		ok   bool
	}{
		{name: "single letter", id: "a", ok: true},
		{name: "single digit", id: "7", ok: true},
		{name: "dash underscore", id: "a-b_c", ok: true},
		{name: "64 chars", id: strings.Repeat("z", 64), ok: true},
		{name: "empty", id: ""},
		{name: "65 chars", id: strings.Repeat("z", 65)},
		{name: "leading dash", id: "-a"},
		{name: "leading underscore", id: "_a"},
		{name: "upper case", id: "aB"},
		{name: "slash", id: "a/b"},
		{name: "NUL", id: "a\x00"},
		{name: "non-ASCII", id: "é"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTenantID(tc.id)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("ValidateTenantID(%q) = got %v, want ok=%v (errors wrap ErrInvalid)", tc.id, err, tc.ok)
			}
		})
	}
}

func TestValidateKeyID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		ok   bool
	}{
		{name: "mixed case", id: "Key_01-x", ok: true},
		{name: "64 chars", id: strings.Repeat("K", 64), ok: true},
		{name: "empty", id: ""},
		{name: "65 chars", id: strings.Repeat("K", 65)},
		{name: "space", id: "k 1"},
		{name: "dot", id: "k.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := ValidateKeyID(tc.id); tc.ok != (err == nil) {
				t.Fatalf("ValidateKeyID(%q) = got %v, want ok=%v", tc.id, err, tc.ok)
			}
		})
	}
}

func TestValidateTransition(t *testing.T) {
	tests := []struct {
		from, to Status
		ok       bool
	}{
		{StatusActive, StatusSuspended, true},
		{StatusSuspended, StatusActive, true},
		{StatusActive, StatusActive, false},
		{StatusSuspended, StatusSuspended, false},
		{StatusActive, StatusDeleted, false},
		{StatusSuspended, StatusDeleted, false},
		{StatusDeleted, StatusActive, false},
		{StatusDeleted, StatusSuspended, false},
		{"", StatusActive, false},
	}
	for _, tc := range tests {
		t.Run(string(tc.from)+"→"+string(tc.to), func(t *testing.T) {
			if err := ValidateTransition(tc.from, tc.to); tc.ok != (err == nil) {
				t.Fatalf("ValidateTransition(%q, %q) = got %v, want ok=%v", tc.from, tc.to, err, tc.ok)
			}
		})
	}
}

func TestLimitsValidate(t *testing.T) {
	set := func(pairs ...any) limits.Values {
		var v limits.Values
		for i := 0; i < len(pairs); i += 2 {
			v.Set(pairs[i].(limits.Limit), pairs[i+1].(float64))
		}
		return v
	}
	tests := []struct {
		name   string
		limits Limits
		field  string // named in the error; "" means valid
	}{
		{name: "zero value", limits: Limits{}},
		{name: "explicit zeros", limits: Limits{Values: set(limits.RatePerSecond, 0.0, limits.Burst, 0.0, limits.MaxStreams, 0.0)}},
		{name: "negative rate", limits: Limits{Values: set(limits.RatePerSecond, -1.0)}, field: "rate_per_second"},
		{name: "NaN rate", limits: Limits{Values: set(limits.RatePerSecond, math.NaN())}, field: "rate_per_second"},
		{name: "negative burst", limits: Limits{Values: set(limits.Burst, -1.0)}, field: "burst"},
		{name: "fractional burst", limits: Limits{Values: set(limits.Burst, 0.5)}, field: "burst"},
		{name: "burst beyond 64 bits", limits: Limits{Values: set(limits.Burst, 0x1p63)}, field: "burst"},
		{name: "NaN burst", limits: Limits{Values: set(limits.Burst, math.NaN())}, field: "burst"},
		{name: "negative reserved cells", limits: Limits{Values: set(limits.ReservedCells, -3.0)}, field: "reserved_cells"},
		{name: "negative max leases", limits: Limits{Values: set(limits.MaxLeases, -1.0)}, field: "max_leases"},
		{name: "tenant-admin values", limits: Limits{Admin: set(limits.RatePerSecond, 1.0, limits.MaxStreams, 0.0)}},
		{name: "negative tenant-admin burst", limits: Limits{Admin: set(limits.Burst, -1.0)}, field: "admin.burst"},
		{name: "infinite tenant-admin rate", limits: Limits{Admin: set(limits.RatePerSecond, math.Inf(1))}, field: "admin.rate_per_second"},
		{name: "tenant-admin reservation", limits: Limits{Admin: set(limits.ReservedResources, 0.0)}, field: "admin.reserved_resources"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limits.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Limits.Validate() = got %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Limits.Validate() = got %v, want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}

func TestCheckpointValidate(t *testing.T) {
	res := func(ids ...string) []ResourceRow {
		var out []ResourceRow
		for _, id := range ids {
			out = append(out, ResourceRow{ID: id, Capacity: 1})
		}
		return out
	}
	cell := func(r, c string) CellRow { return CellRow{ResourceID: r, Context: c} }
	tests := []struct {
		name string
		cp   Checkpoint
		want string // substring of the error; "" means valid
	}{
		{name: "empty", cp: Checkpoint{Full: true}},
		{name: "sorted full", cp: Checkpoint{Full: true, Resources: res("a", "b"), Cells: []CellRow{cell("a", "x"), cell("a", "y"), cell("b", "x")}}},
		{name: "unsorted full", cp: Checkpoint{Full: true, Resources: res("b", "a"), Cells: []CellRow{cell("b", "x"), cell("a", "y"), cell("a", "x")}}},
		{name: "sorted orphan", cp: Checkpoint{Full: true, Resources: res("a", "c"), Cells: []CellRow{cell("a", "x"), cell("b", "x")}}, want: `cell "b"/"x": resource does not exist`},
		{name: "sorted orphan after last", cp: Checkpoint{Full: true, Resources: res("a"), Cells: []CellRow{cell("a", "x"), cell("z", "x")}}, want: `cell "z"/"x"`},
		{name: "unsorted orphan", cp: Checkpoint{Full: true, Resources: res("c", "a"), Cells: []CellRow{cell("b", "x"), cell("a", "x")}}, want: `cell "b"/"x": resource does not exist`},
		{name: "incremental orphan is the store's job", cp: Checkpoint{Cells: []CellRow{cell("b", "x")}}},
		{name: "duplicate resource", cp: Checkpoint{Resources: res("a", "b", "a")}, want: `resource "a" appears twice`},
		{name: "adjacent duplicate resource", cp: Checkpoint{Resources: res("a", "a")}, want: `resource "a" appears twice`},
		{name: "duplicate cell", cp: Checkpoint{Cells: []CellRow{cell("a", "x"), cell("b", "x"), cell("a", "x")}}, want: `cell "a"/"x" appears twice`},
		{name: "adjacent duplicate cell", cp: Checkpoint{Cells: []CellRow{cell("a", "x"), cell("a", "x")}}, want: `cell "a"/"x" appears twice`},
		{name: "capacity", cp: Checkpoint{Resources: []ResourceRow{{ID: "a"}}}, want: `resource "a": capacity 0`},
		{name: "infinite alpha", cp: Checkpoint{Resources: []ResourceRow{{ID: "a", Capacity: 1, Alpha: math.Inf(1)}}}, want: "alpha +Inf"},
		{name: "negative cell beta", cp: Checkpoint{Cells: []CellRow{{ResourceID: "a", Context: "x", Beta: -0.5}}}, want: `cell "a"/"x": beta -0.5`},
		{name: "long context", cp: Checkpoint{Cells: []CellRow{cell("a", strings.Repeat("c", MaxRowIDLen+1))}}, want: "cell context"},
		{name: "fencing mark", cp: Checkpoint{FencingHWM: math.MaxUint64}, want: "fencing high-water mark"},
		{name: "bad removed id", cp: Checkpoint{Removed: []string{"ok", ""}}, want: "removed resource id"},
		{name: "full ignores removed", cp: Checkpoint{Full: true, Removed: []string{""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cp.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Checkpoint.Validate() = got %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Checkpoint.Validate() = got %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestPoolStateValidateIsCorrupt(t *testing.T) {
	st := PoolState{Resources: []ResourceRow{{ID: "a", Capacity: 1}}, Cells: []CellRow{{ResourceID: "b", Context: "x"}}}
	err := st.Validate()
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `cell "b"/"x"`) {
		t.Fatalf("PoolState.Validate() = got %v, want ErrCorrupt (not ErrInvalid) naming the cell", err)
	}
}

func TestKeyAndAuditValidate(t *testing.T) {
	digest := make([]byte, DigestLen)
	tests := []struct {
		name string
		err  error
		ok   bool
	}{
		{name: "key ok", err: Key{ID: "k1", TenantID: "t", Digest: digest}.Validate(), ok: true},
		{name: "key short digest", err: Key{ID: "k1", TenantID: "t", Digest: digest[:31]}.Validate()},
		{name: "key bad tenant", err: Key{ID: "k1", TenantID: "T", Digest: digest}.Validate()},
		{name: "key long prefix", err: Key{ID: "k1", TenantID: "t", Prefix: strings.Repeat("p", MaxPrefixLen+1), Digest: digest}.Validate()},
		{name: "audit ok", err: AuditEntry{TenantID: "t", Action: "a"}.Validate(), ok: true},
		{name: "audit no action", err: AuditEntry{TenantID: "t"}.Validate()},
		{name: "audit long detail", err: AuditEntry{TenantID: "t", Action: "a", Detail: strings.Repeat("d", MaxDetailLen+1)}.Validate()},
		{name: "audit invalid UTF-8", err: AuditEntry{TenantID: "t", Action: "a", Target: "\xff"}.Validate()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ok != (tc.err == nil) || (tc.err != nil && !errors.Is(tc.err, ErrInvalid)) {
				t.Fatalf("Validate() = got %v, want ok=%v (errors wrap ErrInvalid)", tc.err, tc.ok)
			}
		})
	}
}

func TestOptionsNow(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 678901234, time.FixedZone("X", 3600))
	got := Options{Clock: clock.NewFake(at)}.Now()
	if want := time.Date(2030, 1, 2, 2, 4, 5, 678901000, time.UTC); !got.Equal(want) || got.Location() != time.UTC {
		t.Fatalf("Options.Now() = got %v, want %v (UTC, microseconds)", got, want)
	}
	if real := (Options{}).Now(); time.Since(real) > time.Minute || real.Location() != time.UTC {
		t.Fatalf("Options{}.Now() = got %v, want the wall clock in UTC", real)
	}
	if got := Timestamp(time.Time{}); !got.IsZero() {
		t.Fatalf("Timestamp(zero) = got %v, want zero", got)
	}
}

func TestOptionsStamp(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Options{Clock: clock.NewFake(now)}
	tests := []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"zero is now", time.Time{}, now},
		{"given is normalized", time.Date(2029, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600)), time.Date(2029, 5, 6, 6, 8, 9, 123456000, time.UTC)},
		{"under a microsecond past zero is now", time.Time{}.Add(500), now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := o.Stamp(tt.in); !got.Equal(tt.want) || got.Location() != time.UTC {
				t.Fatalf("Stamp(%v) = got %v, want %v (UTC)", tt.in, got, tt.want)
			}
		})
	}
}
