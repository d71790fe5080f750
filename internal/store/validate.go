package store

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/repool/repool/internal/limits"
)

// Field limits enforced by the Validate functions.
const (
	// MaxIDLen bounds tenant and key ids.
	MaxIDLen = 64
	// MaxRowIDLen bounds resource ids and cell contexts, in bytes.
	MaxRowIDLen = 256
	// MaxNameLen bounds tenant and key names and audit actor, action and
	// target, in bytes.
	MaxNameLen = 256
	// MaxPrefixLen bounds a key's display prefix, in bytes.
	MaxPrefixLen = 32
	// MaxDetailLen bounds an audit entry's detail, in bytes.
	MaxDetailLen = 4096
)

// ValidateTenantID reports whether id is a valid tenant id: 1..MaxIDLen
// characters, [a-z0-9] first, then [a-z0-9_-]. The error wraps ErrInvalid.
func ValidateTenantID(id string) error {
	if len(id) == 0 || len(id) > MaxIDLen {
		return fmt.Errorf("%w: tenant id %s: length %d, want 1..%d", ErrInvalid, quote(id), len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return fmt.Errorf("%w: tenant id %s: want [a-z0-9][a-z0-9_-]*", ErrInvalid, quote(id))
		}
	}
	return nil
}

// ValidateKeyID reports whether id is a valid API key id: 1..MaxIDLen
// characters from [A-Za-z0-9_-]. The error wraps ErrInvalid.
func ValidateKeyID(id string) error {
	if len(id) == 0 || len(id) > MaxIDLen {
		return fmt.Errorf("%w: key id %s: length %d, want 1..%d", ErrInvalid, quote(id), len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: key id %s: want [A-Za-z0-9_-]+", ErrInvalid, quote(id))
		}
	}
	return nil
}

// ValidateTransition reports whether a tenant may move from status from to
// status to with SetTenantStatus: only active→suspended and
// suspended→active. The error wraps ErrInvalid.
func ValidateTransition(from, to Status) error {
	if (from == StatusActive && to == StatusSuspended) || (from == StatusSuspended && to == StatusActive) {
		return nil
	}
	return fmt.Errorf("%w: tenant status %q → %q is not allowed", ErrInvalid, from, to)
}

// Validate checks the fields CreateTenant uses (ID and Name). The error
// wraps ErrInvalid.
func (t Tenant) Validate() error {
	if err := ValidateTenantID(t.ID); err != nil {
		return err
	}
	if t.Group != "" {
		if err := ValidateGroup(t.Group); err != nil {
			return err
		}
	}
	return checkText("tenant name", t.Name, MaxNameLen)
}

// DefaultGroup is the group of a server started without --group, and of
// every tenant that existed before groups: a deployment with one group
// works as one without groups.
const DefaultGroup = "default"

// MaxGroupLen bounds a group name.
const MaxGroupLen = 31

// ValidateGroup checks a group name: 1 to MaxGroupLen characters of
// [a-z0-9-], starting with a letter (it becomes part of an HAProxy backend
// name and a PostgreSQL counter's name). The error wraps ErrInvalid.
func ValidateGroup(g string) error {
	if len(g) == 0 || len(g) > MaxGroupLen {
		return fmt.Errorf("%w: group %s: length %d, want 1..%d", ErrInvalid, quote(g), len(g), MaxGroupLen)
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch {
		case c >= 'a' && c <= 'z':
		case (c >= '0' && c <= '9' || c == '-') && i > 0:
		default:
			return fmt.Errorf("%w: group %s: want a lowercase letter, then [a-z0-9-]", ErrInvalid, quote(g))
		}
	}
	return nil
}

// EpochCounter is the name of group's epoch counter: "epoch" for the
// default group (as before groups), "epoch:NAME" for the others.
func EpochCounter(group string) string {
	if group == "" || group == DefaultGroup {
		return "epoch"
	}
	return "epoch:" + group
}

// GroupOf returns the group an epoch counter named name belongs to, and
// whether name is an epoch counter at all.
func GroupOf(counter string) (string, bool) {
	if counter == "epoch" {
		return DefaultGroup, true
	}
	g, ok := strings.CutPrefix(counter, "epoch:")
	return g, ok && g != ""
}

// Validate checks that every limit that is set is not negative, the
// rates finite and the others whole numbers that a 64-bit column holds,
// that no reservation has a tenant-admin value, and that the policy's
// fields are what a column holds and the pool reads. The ranges are the
// control plane's. The error wraps ErrInvalid and names the field.
func (l Limits) Validate() error {
	for lim := range limits.Count {
		if err := checkLimit(lim, false, l.Values[lim]); err != nil {
			return err
		}
		if err := checkLimit(lim, true, l.Admin[lim]); err != nil {
			return err
		}
	}
	// The policy's ranges are the control plane's; the store keeps only
	// what a column can hold and the pool can read: finite numbers, and
	// whole numbers of at least 1.
	for _, r := range []struct {
		name string
		v    *float64
	}{{"policy.quarantine_below", l.Policy.QuarantineBelow}, {"policy.quarantine_min_evidence", l.Policy.QuarantineMinEvidence},
		{"policy.max_quarantined_share", l.Policy.MaxQuarantinedShare}} {
		if r.v != nil && (math.IsNaN(*r.v) || math.IsInf(*r.v, 0)) {
			return fmt.Errorf("%w: limits: %s %v, want a finite number", ErrInvalid, r.name, *r.v)
		}
	}
	p := l.Policy
	if p.Objective != nil && *p.Objective != "success" && *p.Objective != "success_per_time" {
		return fmt.Errorf("%w: limits: policy.objective %q, want success or success_per_time", ErrInvalid, *p.Objective)
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{
		{"policy.half_life_seconds", p.HalfLifeSeconds},
		{"policy.quarantine_after", p.QuarantineAfter},
		{"policy.quarantine_whole_after", p.QuarantineWholeAfter},
		{"policy.cooldown_base_seconds", p.CooldownBaseSeconds},
		{"policy.cooldown_max_seconds", p.CooldownMaxSeconds},
	} {
		if f.v != nil && *f.v < 1 {
			return fmt.Errorf("%w: limits: %s %d, want >= 1", ErrInvalid, f.name, *f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"policy.max_uses", p.MaxUses}, {"policy.max_age_seconds", p.MaxAgeSeconds}} {
		if f.v != nil && *f.v < 0 {
			return fmt.Errorf("%w: limits: %s %d, want >= 0", ErrInvalid, f.name, *f.v)
		}
	}
	return nil
}

// checkLimit checks v, the operator's or (admin) the tenant-admin's value
// of lim, nil for none: not negative, and finite for a rate, a whole
// number below 2^63 for the others. A tenant-admin's value of a
// reservation is refused.
func checkLimit(lim limits.Limit, admin bool, v *float64) error {
	s, name := lim.Spec(), lim.String()
	if admin {
		name = "admin." + name
	}
	switch {
	case v == nil:
		return nil
	case s.Reservation && admin:
		return fmt.Errorf("%w: limits: %s: a reservation has no tenant-admin value", ErrInvalid, name)
	case !s.Integer && (math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0):
		return fmt.Errorf("%w: limits: %s %v, want finite and >= 0", ErrInvalid, name, *v)
	case s.Integer && (math.IsNaN(*v) || *v < 0):
		return fmt.Errorf("%w: limits: %s %v, want >= 0", ErrInvalid, name, *v)
	case s.Integer && (*v != math.Trunc(*v) || *v >= 1<<63):
		return fmt.Errorf("%w: limits: %s %v, want a whole number below 2^63", ErrInvalid, name, *v)
	}
	return nil
}

// Validate checks the fields CreateKey uses. The error wraps ErrInvalid.
func (k Key) Validate() error {
	if err := ValidateKeyID(k.ID); err != nil {
		return err
	}
	if err := ValidateTenantID(k.TenantID); err != nil {
		return err
	}
	if err := checkText("key name", k.Name, MaxNameLen); err != nil {
		return err
	}
	if err := checkText("key prefix", k.Prefix, MaxPrefixLen); err != nil {
		return err
	}
	if len(k.Digest) != DigestLen {
		return fmt.Errorf("%w: key %q: digest is %d bytes, want %d", ErrInvalid, k.ID, len(k.Digest), DigestLen)
	}
	return nil
}

// Validate checks the fields AppendAudit uses. The error wraps ErrInvalid.
func (e AuditEntry) Validate() error {
	if err := ValidateTenantID(e.TenantID); err != nil {
		return err
	}
	if e.Action == "" {
		return fmt.Errorf("%w: audit entry: empty action", ErrInvalid)
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"audit actor", e.Actor, MaxNameLen},
		{"audit action", e.Action, MaxNameLen},
		{"audit target", e.Target, MaxNameLen},
		{"audit detail", e.Detail, MaxDetailLen},
	} {
		if err := checkText(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks one resource row: a valid id, capacity >= 1, finite
// non-negative alpha and beta, labels without NUL or invalid UTF-8. The
// error wraps ErrInvalid and names the row.
func (r ResourceRow) Validate() error {
	return invalid(resourceProblem(r))
}

// Validate checks one cell row: valid resource id and context, finite
// non-negative alpha and beta. The error wraps ErrInvalid and names the row.
func (c CellRow) Validate() error {
	return invalid(cellProblem(c))
}

// Validate checks a checkpoint before it is written: every row, unique
// resource ids and cell keys, FencingHWM <= MaxFencingHWM, valid Removed
// ids, and for a Full checkpoint that every cell's resource is in Resources
// (an incremental checkpoint's references are checked by the store against
// the stored rows). The error wraps ErrInvalid and names the first bad row.
func (cp Checkpoint) Validate() error {
	if cp.FencingHWM > MaxFencingHWM {
		return fmt.Errorf("%w: fencing high-water mark %d exceeds %d", ErrInvalid, cp.FencingHWM, uint64(MaxFencingHWM))
	}
	if !cp.Full {
		for _, id := range cp.Removed {
			if err := rowIDProblem("removed resource id", id); err != nil {
				return invalid(err)
			}
		}
	}
	if err := rowsProblem(cp.Resources, cp.Cells, cp.Full); err != nil {
		return invalid(err)
	}
	return invalid(bindingsProblem(cp.Bindings, cp.Unbound))
}

// Validate checks a loaded pool state the way Checkpoint.Validate checks a
// Full checkpoint: every row, unique ids, every cell's resource present.
// The error wraps ErrCorrupt and names the first bad row.
func (p PoolState) Validate() error {
	if p.FencingHWM > MaxFencingHWM {
		return fmt.Errorf("%w: fencing high-water mark %d exceeds %d", ErrCorrupt, p.FencingHWM, uint64(MaxFencingHWM))
	}
	if err := rowsProblem(p.Resources, p.Cells, true); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if err := bindingsProblem(p.Bindings, nil); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return nil
}

// invalid wraps a problem description in ErrInvalid; nil stays nil.
func invalid(problem error) error {
	if problem == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", ErrInvalid, problem)
}

func resourceProblem(r ResourceRow) error {
	if err := rowIDProblem("resource id", r.ID); err != nil {
		return err
	}
	if r.Capacity < 1 {
		return fmt.Errorf("resource %s: capacity %d, want >= 1", quote(r.ID), r.Capacity)
	}
	if err := countProblem(r.Alpha, r.Beta); err != nil {
		return fmt.Errorf("resource %s: %v", quote(r.ID), err)
	}
	for k, v := range r.Labels {
		if !cleanText(k) || !cleanText(v) {
			return fmt.Errorf("resource %s: label %s has invalid UTF-8 or NUL", quote(r.ID), quote(k))
		}
	}
	if r.Uses < 0 || r.MaxUses < 0 || r.MaxAge < 0 || r.RegisteredAt < 0 {
		return fmt.Errorf("resource %s: negative registered_at, uses, max_uses or max_age", quote(r.ID))
	}
	if len(r.Retired) > MaxRowIDLen || !cleanText(r.Retired) {
		return fmt.Errorf("resource %s: retired reason is longer than %d bytes, or has invalid UTF-8 or NUL", quote(r.ID), MaxRowIDLen)
	}
	return nil
}

func cellProblem(c CellRow) error {
	if err := rowIDProblem("cell resource id", c.ResourceID); err != nil {
		return err
	}
	if err := rowIDProblem("cell context", c.Context); err != nil {
		return fmt.Errorf("cell of resource %s: %v", quote(c.ResourceID), err)
	}
	if err := countProblem(c.Alpha, c.Beta); err != nil {
		return fmt.Errorf("cell %s/%s: %v", quote(c.ResourceID), quote(c.Context), err)
	}
	return nil
}

// rowsProblem describes the first bad row, duplicate, or (with checkRefs)
// cell whose resource is not among resources; nil if there is none. Input
// sorted the way LoadCheckpoint returns it (resources by id, cells by
// resource then context) is checked without building maps.
func rowsProblem(resources []ResourceRow, cells []CellRow, checkRefs bool) error {
	for _, r := range resources {
		if err := resourceProblem(r); err != nil {
			return err
		}
	}
	for _, c := range cells {
		if err := cellProblem(c); err != nil {
			return err
		}
	}
	var ids map[string]struct{} // built only for unsorted input
	resSorted := true
	for i := 1; i < len(resources) && resSorted; i++ {
		resSorted = resources[i-1].ID < resources[i].ID
	}
	if !resSorted {
		ids = make(map[string]struct{}, len(resources))
		for _, r := range resources {
			if _, dup := ids[r.ID]; dup {
				return fmt.Errorf("resource %s appears twice", quote(r.ID))
			}
			ids[r.ID] = struct{}{}
		}
	}
	cellsSorted := true
	for i := 1; i < len(cells) && cellsSorted; i++ {
		a, b := cells[i-1], cells[i]
		cellsSorted = a.ResourceID < b.ResourceID || (a.ResourceID == b.ResourceID && a.Context < b.Context)
	}
	if !cellsSorted {
		type cellKey struct{ res, ctx string }
		seen := make(map[cellKey]struct{}, len(cells))
		for _, c := range cells {
			k := cellKey{c.ResourceID, c.Context}
			if _, dup := seen[k]; dup {
				return fmt.Errorf("cell %s/%s appears twice", quote(c.ResourceID), quote(c.Context))
			}
			seen[k] = struct{}{}
		}
	}
	if !checkRefs {
		return nil
	}
	if resSorted && cellsSorted {
		j := 0
		for _, c := range cells {
			for j < len(resources) && resources[j].ID < c.ResourceID {
				j++
			}
			if j == len(resources) || resources[j].ID != c.ResourceID {
				return fmt.Errorf("cell %s/%s: resource does not exist", quote(c.ResourceID), quote(c.Context))
			}
		}
		return nil
	}
	if ids == nil {
		ids = make(map[string]struct{}, len(resources))
		for _, r := range resources {
			ids[r.ID] = struct{}{}
		}
	}
	for _, c := range cells {
		if _, ok := ids[c.ResourceID]; !ok {
			return fmt.Errorf("cell %s/%s: resource does not exist", quote(c.ResourceID), quote(c.Context))
		}
	}
	return nil
}

func rowIDProblem(what, id string) error {
	if len(id) == 0 || len(id) > MaxRowIDLen {
		return fmt.Errorf("%s %s: length %d, want 1..%d bytes", what, quote(id), len(id), MaxRowIDLen)
	}
	if !cleanText(id) {
		return fmt.Errorf("%s %s: invalid UTF-8 or NUL", what, quote(id))
	}
	return nil
}

func countProblem(alpha, beta float64) error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"alpha", alpha}, {"beta", beta}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("%s %v, want finite and >= 0", f.name, f.v)
		}
	}
	return nil
}

func checkText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s: %d bytes, want at most %d", ErrInvalid, what, len(s), max)
	}
	if !cleanText(s) {
		return fmt.Errorf("%w: %s: invalid UTF-8 or NUL", ErrInvalid, what)
	}
	return nil
}

// cleanText reports whether s can be stored as text by every backend: valid
// UTF-8 without NUL (PostgreSQL rejects both).
func cleanText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// quote quotes an id for an error message, shortening very long ones.
func quote(s string) string {
	const show = 64
	if len(s) > show {
		return fmt.Sprintf("%q…(%d bytes)", s[:show], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// ValidatePruneLimit checks the batch of a retention statement
// (PruneAudit, PruneRevokedKeys). The error wraps ErrInvalid.
func ValidatePruneLimit(limit int) error {
	if limit < 1 || limit > MaxPruneBatch {
		return fmt.Errorf("%w: prune limit %d: want 1 to %d rows", ErrInvalid, limit, MaxPruneBatch)
	}
	return nil
}

// Validate checks p's Limit and that its ThroughID is not negative. The
// error wraps ErrInvalid.
func (p AuditPrune) Validate() error {
	if p.ThroughID < 0 {
		return fmt.Errorf("%w: audit prune: through id %d is negative", ErrInvalid, p.ThroughID)
	}
	return ValidatePruneLimit(p.Limit)
}
