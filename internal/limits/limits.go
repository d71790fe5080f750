// Package limits declares a tenant's limits once, in one table: for each
// limit its name (the control plane's JSON field, the stores' column, the
// server's flag and configuration key), its range, whether it is a
// reservation, whether 0 means no cap, whether it is a whole number, and
// the server's built-in default. The control plane, the stores, the
// server's configuration and the tenants' lifecycle read the table rather
// than naming the limits one by one: a new limit is a constant and a row
// here, a migration per store, and the code that enforces it
// (docs/architecture.md, "Adding a limit").
package limits

import (
	"strconv"
	"strings"

	"github.com/repool/repool/internal/ratelimit"
)

// Limit names one of a tenant's limits. The constants are in the order of
// the control plane's JSON fields.
type Limit int

// The limits.
const (
	// RatePerSecond is the refill rate of the tenant's request token
	// bucket.
	RatePerSecond Limit = iota
	// Burst is the size of the tenant's request token bucket.
	Burst
	// ReservedResources are resources always available to the tenant.
	ReservedResources
	// MaxResources caps the tenant's resources.
	MaxResources
	// ReservedCells are cells always available to the tenant.
	ReservedCells
	// MaxCells caps the tenant's cells.
	MaxCells
	// MaxStreams caps the tenant's concurrent event streams.
	MaxStreams
	// MaxLeases caps the tenant's outstanding leases.
	MaxLeases
	// MaxLeaseStreams caps the tenant's open Leases streams.
	MaxLeaseStreams

	// Count is the number of limits, not a limit: Values has a slot for
	// each limit below it.
	Count
)

// Budget names the global budget that bounds a limit from above, in place
// of Spec.Max.
type Budget int

// The global budgets.
const (
	// NoBudget: Spec.Max bounds the limit.
	NoBudget Budget = iota
	// ResourceBudget is the global budget of resources
	// (--global-resources).
	ResourceBudget
	// CellBudget is the global budget of cells (--global-cells).
	CellBudget
)

// Spec is a limit's row of the table.
type Spec struct {
	// Name is the limit's JSON field (under tenant_admin too) and its
	// column in the stores' tenant_limits table; the tenant-admin's value
	// is in the column "admin_" + Name. With dashes for underscores it
	// is the server's flag (--max-lease-streams), from which the YAML key
	// and the REPOOL_ variable follow.
	Name string
	// Integer limits are whole numbers (an INTEGER or bigint column);
	// the others are rates, any number in range (a REAL or double
	// precision column).
	Integer bool
	// Min and Max bound the value; with a Budget, the global budget
	// bounds it from above instead of Max.
	Min, Max float64
	Budget   Budget
	// ZeroUnbounded: 0 means no cap, above every other value.
	ZeroUnbounded bool
	// Reservation limits are the operator's alone: a share of Budget
	// kept for the tenant, with no tenant-admin value, at most the value
	// in force of Ceiling.
	Reservation bool
	Ceiling     Limit
	// Default is the server's built-in default: what a tenant gets when
	// the operator set no value, unless the server's flag (FlagUsage)
	// or Share says otherwise.
	Default float64
	// FlagUsage is the help text of the server flag that sets the
	// default (a back-quoted word names its value in -h); empty: no flag.
	FlagUsage string
	// Share: the default is the server's default tenant share
	// (--default-tenant-share percent) of Budget.
	Share bool
	// DefaultAboveZero: the server's default must be above 0, where a
	// tenant's own value may be 0 (a default rate or burst of 0 would
	// refuse every call of every tenant not given its own).
	DefaultAboveZero bool
}

// table is the table, indexed by Limit; it is never written.
var table = [Count]Spec{
	RatePerSecond: {Name: "rate_per_second", Max: 1_000_000_000, DefaultAboveZero: true,
		Default: ratelimit.DefaultRate, FlagUsage: "default per-tenant request rate, per second (`rate`; above 0)"},
	Burst: {Name: "burst", Integer: true, Max: 1 << 30, DefaultAboveZero: true,
		Default: ratelimit.DefaultBurst, FlagUsage: "default per-tenant request burst (`n`; at least 1)"},
	ReservedResources: {Name: "reserved_resources", Integer: true, Budget: ResourceBudget,
		Reservation: true, Ceiling: MaxResources},
	MaxResources: {Name: "max_resources", Integer: true, Min: 1, Budget: ResourceBudget, Share: true},
	ReservedCells: {Name: "reserved_cells", Integer: true, Budget: CellBudget,
		Reservation: true, Ceiling: MaxCells},
	MaxCells: {Name: "max_cells", Integer: true, Min: 1, Budget: CellBudget, Share: true},
	MaxStreams: {Name: "max_streams", Integer: true, Max: 1_000,
		Default: 8, FlagUsage: "default per-tenant limit on event streams (`n`; 0: none allowed)"},
	MaxLeases: {Name: "max_leases", Integer: true, Max: 10_000_000, ZeroUnbounded: true,
		Default: 0, FlagUsage: "default per-tenant limit on outstanding leases (`n`; 0: none)"},
	MaxLeaseStreams: {Name: "max_lease_streams", Integer: true, Max: 1_000,
		Default: 32, FlagUsage: "default per-tenant limit on open Leases streams (`n`; 0: none allowed)"},
}

// Spec returns l's row of the table.
func (l Limit) Spec() Spec { return table[l] }

// String returns l's name.
func (l Limit) String() string { return table[l].Name }

// Column is the stores' column of the operator's value of l.
func (l Limit) Column() string { return table[l].Name }

// AdminColumn is the stores' column of the tenant-admin's value of l; a
// reservation has none ("").
func (l Limit) AdminColumn() string {
	if table[l].Reservation {
		return ""
	}
	return "admin_" + table[l].Name
}

// Flag is the name of the server flag that sets l's default (without
// dashes in front), or "" if it has none.
func (l Limit) Flag() string {
	if table[l].FlagUsage == "" {
		return ""
	}
	return strings.ReplaceAll(table[l].Name, "_", "-")
}

// Bounds returns l's range, where the global budgets of resources and
// cells are resources and cells.
func (l Limit) Bounds(resources, cells int64) (lo, hi float64) {
	s := table[l]
	switch s.Budget {
	case ResourceBudget:
		return s.Min, float64(resources)
	case CellBudget:
		return s.Min, float64(cells)
	}
	return s.Min, s.Max
}

// Below reports whether a is at most b as values of l, where 0 is no cap
// for a ZeroUnbounded limit.
func (l Limit) Below(a, b float64) bool {
	if table[l].ZeroUnbounded {
		switch {
		case b == 0:
			return true
		case a == 0:
			return false
		}
	}
	return a <= b
}

// Format shows a value of a limit in messages: whole numbers without a
// fraction or an exponent, and zero as 0 whatever its sign (-0 is a
// float's, not a limit's).
func Format(v float64) string {
	if v == 0 {
		v = 0 // -0 == 0: this drops the sign
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Values holds a value of each limit, indexed by Limit, nil where none is
// set. Its pointers are replaced (Set), never written through, so a copy
// of a Values is a copy of its values.
type Values [Count]*float64

// Get returns v's value of l and whether it is set.
func (v Values) Get(l Limit) (float64, bool) {
	if v[l] == nil {
		return 0, false
	}
	return *v[l], true
}

// Value returns v's value of l, 0 if it is not set: for the limits in
// force, of which every one is set.
func (v Values) Value(l Limit) float64 {
	x, _ := v.Get(l)
	return x
}

// Set sets v's value of l to x.
func (v *Values) Set(l Limit, x float64) { v[l] = &x }

// With returns a copy of v with l set to x.
func (v Values) With(l Limit, x float64) Values {
	v.Set(l, x)
	return v
}
