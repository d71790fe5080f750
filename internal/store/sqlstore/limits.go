package sqlstore

import (
	"fmt"
	"strings"

	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/store"
)

// limitsColumn is one column of tenant_limits: its name, the statement
// argument that writes it and the scan destination that reads it.
type limitsColumn struct {
	name      string
	arg, dest any
}

// limitsColumns returns the columns of tenant_limits that hold l, in the
// order of the limits table (each limit's column, then its tenant-admin's
// where it has one), then the policy's. Their arguments are l's values and
// their destinations write into l.
func limitsColumns(l *store.Limits) []limitsColumn {
	var cols []limitsColumn
	for lim := range limits.Count {
		cols = append(cols, limitColumn(lim.Column(), lim, &l.Values[lim]))
		if c := lim.AdminColumn(); c != "" {
			cols = append(cols, limitColumn(c, lim, &l.Admin[lim]))
		}
	}
	p := &l.Policy
	return append(cols,
		policyColumn("policy_half_life_seconds", &p.HalfLifeSeconds),
		policyColumn("policy_quarantine_after", &p.QuarantineAfter),
		policyColumn("policy_quarantine_whole_after", &p.QuarantineWholeAfter),
		policyColumn("policy_quarantine_below", &p.QuarantineBelow),
		policyColumn("policy_quarantine_min_evidence", &p.QuarantineMinEvidence),
		policyColumn("policy_cooldown_base_seconds", &p.CooldownBaseSeconds),
		policyColumn("policy_cooldown_max_seconds", &p.CooldownMaxSeconds),
		policyColumn("policy_objective", &p.Objective),
		policyColumn("policy_max_uses", &p.MaxUses),
		policyColumn("policy_max_age_seconds", &p.MaxAgeSeconds),
		policyColumn("policy_max_quarantined_share", &p.MaxQuarantinedShare),
	)
}

// policyColumn is the column name holding *p.
func policyColumn[T any](name string, p **T) limitsColumn {
	return limitsColumn{name: name, arg: *p, dest: p}
}

// limitColumn is the column name holding *v, a value of lim: an int64 for
// an integer limit, a float64 for a rate, NULL for nil.
func limitColumn(name string, lim limits.Limit, v **float64) limitsColumn {
	var arg any
	switch {
	case *v == nil:
	case lim.Spec().Integer:
		arg = int64(**v)
	default:
		arg = **v
	}
	return limitsColumn{name: name, arg: arg, dest: limitDest{v}}
}

// limitDest reads a limit's column (an integer or a float, or NULL) into
// a *float64.
type limitDest struct{ v **float64 }

// Scan implements sql.Scanner (both drivers use it).
func (d limitDest) Scan(src any) error {
	switch x := src.(type) {
	case nil:
		*d.v = nil
	case int64:
		f := float64(x)
		*d.v = &f
	case float64:
		*d.v = &x
	default:
		return fmt.Errorf("limit column: got %T, want a number", src)
	}
	return nil
}

// columnNames returns the names of cols, each after prefix,
// comma-separated.
func columnNames(cols []limitsColumn, prefix string) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = prefix + c.name
	}
	return strings.Join(names, ", ")
}
