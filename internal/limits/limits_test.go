package limits

import (
	"math"
	"regexp"
	"testing"
)

// TestTable: every limit below Count has a row, and the rows are
// consistent: unique lower_snake names (JSON fields, columns, flags),
// sane ranges and exact whole numbers, a reservation's ceiling a ceiling
// of the same budget, and a default within range wherever the server has
// a flag for it. A constant added without its row fails here.
func TestTable(t *testing.T) {
	name := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	seen := map[string]Limit{}
	for l := range Count {
		s := l.Spec()
		if !name.MatchString(s.Name) {
			t.Errorf("limit %d: name %q, want lower_snake_case (it is a JSON field, a column and a flag)", l, s.Name)
			continue
		}
		if prev, dup := seen[s.Name]; dup {
			t.Errorf("limits %d and %d are both named %s", prev, l, s.Name)
		}
		seen[s.Name] = l
		if l.String() != s.Name || l.Column() != s.Name {
			t.Errorf("%s: String %q, Column %q, want the name", s.Name, l, l.Column())
		}
		if s.Min < 0 {
			t.Errorf("%s: Min %v, want at least 0: every limit is", s.Name, s.Min)
		}
		if s.Budget == NoBudget && s.Max < s.Min {
			t.Errorf("%s: Max %v below Min %v", s.Name, s.Max, s.Min)
		}
		if s.Integer && s.Max > 1<<53 {
			t.Errorf("%s: Max %v: a whole number above 2^53 is not exact as a float64", s.Name, s.Max)
		}
		if s.Budget != NoBudget && s.Max != 0 {
			t.Errorf("%s: Max %v with a Budget, which bounds it instead", s.Name, s.Max)
		}
		switch ac := l.AdminColumn(); {
		case s.Reservation && ac != "":
			t.Errorf("%s: a reservation with the tenant-admin column %s", s.Name, ac)
		case !s.Reservation && ac != "admin_"+s.Name:
			t.Errorf("%s: AdminColumn %q, want admin_%s", s.Name, ac, s.Name)
		}
		if s.Reservation {
			c := s.Ceiling.Spec()
			if c.Reservation || c.Budget != s.Budget || s.Ceiling == l {
				t.Errorf("%s: Ceiling %s, want a ceiling (not a reservation) of the same budget", s.Name, s.Ceiling)
			}
		}
		if s.Share && (s.Budget == NoBudget || s.Reservation) {
			t.Errorf("%s: Share without a Budget, or of a reservation", s.Name)
		}
		switch {
		case s.FlagUsage != "":
			if s.Share || s.Budget != NoBudget {
				t.Errorf("%s: a server flag for a limit whose range or default follows a global budget", s.Name)
			}
			if s.Default < s.Min || s.Default > s.Max || s.Integer && s.Default != float64(int64(s.Default)) {
				t.Errorf("%s: Default %v out of its range %v to %v", s.Name, s.Default, s.Min, s.Max)
			}
			if l.Flag() == "" {
				t.Errorf("%s: FlagUsage without a Flag", s.Name)
			}
		case l.Flag() != "":
			t.Errorf("%s: Flag %q without FlagUsage", s.Name, l.Flag())
		case !s.Share && !s.Reservation:
			t.Errorf("%s: no server default: give it a flag (FlagUsage, Default), or Share of its budget", s.Name)
		case s.Default != 0:
			t.Errorf("%s: Default %v without a flag: only 0 (a reservation's) is meant", s.Name, s.Default)
		}
	}
	if len(seen) != int(Count) {
		t.Errorf("%d named limits, want Count = %d", len(seen), Count)
	}
}

// TestFlagNames: the flags keep the names they had before the table.
func TestFlagNames(t *testing.T) {
	want := map[Limit]string{RatePerSecond: "rate-per-second", Burst: "burst", MaxStreams: "max-streams",
		MaxLeases: "max-leases", MaxLeaseStreams: "max-lease-streams"}
	for l, f := range want {
		if l.Flag() != f {
			t.Errorf("%s: Flag %q, want %q", l, l.Flag(), f)
		}
	}
}

// TestBelow: 0 is no cap, above everything, for a ZeroUnbounded limit
// only.
func TestBelow(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		a, b float64
		want bool
	}{
		{MaxLeases, 5, 0, true}, {MaxLeases, 0, 5, false}, {MaxLeases, 0, 0, true}, {MaxLeases, 3, 5, true}, {MaxLeases, 6, 5, false},
		{MaxStreams, 0, 5, true}, {MaxStreams, 5, 0, false},
	} {
		if got := c.l.Below(c.a, c.b); got != c.want {
			t.Errorf("%s.Below(%v, %v) = %v, want %v", c.l, c.a, c.b, got, c.want)
		}
	}
}

// TestValues: Set replaces the pointer, so a copy keeps its values.
func TestValues(t *testing.T) {
	var v Values
	if _, ok := v.Get(Burst); ok {
		t.Fatal("zero Values has burst set")
	}
	v.Set(Burst, 5)
	c := v
	v.Set(Burst, 6)
	if x, ok := c.Get(Burst); !ok || x != 5 || v.Value(Burst) != 6 {
		t.Fatalf("copy = %v %v, original %v; want 5 and 6", x, ok, v.Value(Burst))
	}
	if got := Format(math.Copysign(0, -1)); got != "0" {
		t.Errorf("Format(-0) = %q, want 0", got)
	}
	if got := Format(1e9); got != "1000000000" {
		t.Errorf("Format(1e9) = %q, want 1000000000", got)
	}
}
