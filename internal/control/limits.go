package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/tenants"
)

// Ranges of the limits, besides those of reservations and resource and
// cell ceilings, which the global budgets bound (LimitRules). Every limit
// is at least 0.
const (
	// MaxRatePerSecond bounds rate_per_second.
	MaxRatePerSecond = 1_000_000_000
	// MaxBurst bounds burst.
	MaxBurst = 1 << 30
	// MaxStreamsLimit bounds max_streams.
	MaxStreamsLimit = 1_000
	// MaxLeasesLimit bounds max_leases.
	MaxLeasesLimit = 10_000_000
	// MaxLeaseStreamsLimit bounds max_lease_streams.
	MaxLeaseStreamsLimit = 1_000
)

// LimitRules are the server's side of every tenant's limits: what a field
// left at null means (Defaults) and the global budgets that bound
// reservations and ceilings. The operator's values are the tenant's
// ceilings and reservations; a tenant-admin's own values (store.Limits.Admin)
// may only lower them; the limits in force are the smaller of the two
// (Effective).
type LimitRules struct {
	// Defaults gives the value of every field that is null: every field
	// must be set. Admin is ignored.
	Defaults store.Limits
	// GlobalResources and GlobalCells are the global budgets: the largest
	// reservation or ceiling of resources and cells.
	GlobalResources, GlobalCells int64
}

// limitField is one limit: its JSON name, its range and how to reach it in
// store.Limits. Rates are float64; every other limit an int64, carried as
// a float64 here (exactly: the ranges stay far below 2^53).
type limitField struct {
	name string
	// min and max bound the value; max < 0 means the global resources
	// (-1) or cells (-2) budget.
	min, max float64
	// reservation fields are the operator's alone and have no
	// tenant-admin value.
	reservation bool
	// zeroUnbounded: 0 means "no cap" (max_leases).
	zeroUnbounded bool
	integer       bool
	op            func(*store.Limits) limitPtr
	admin         func(*store.AdminLimits) limitPtr // nil for reservations
}

// limitPtr reaches one *int64 or *float64 field of store.Limits.
type limitPtr struct {
	f **float64
	i **int64
}

func (p limitPtr) get() (float64, bool) {
	switch {
	case p.f != nil && *p.f != nil:
		return **p.f, true
	case p.i != nil && *p.i != nil:
		return float64(**p.i), true
	}
	return 0, false
}

func (p limitPtr) set(v *float64) {
	switch {
	case p.f != nil:
		*p.f = v
	case v == nil:
		*p.i = nil
	default:
		n := int64(*v)
		*p.i = &n
	}
}

// Global budgets in limitField.max.
const (
	maxGlobalResources = -1
	maxGlobalCells     = -2
)

// limitFields lists the limits in the JSON order.
var limitFields = []limitField{
	{name: "rate_per_second", max: MaxRatePerSecond,
		op:    func(l *store.Limits) limitPtr { return limitPtr{f: &l.RatePerSecond} },
		admin: func(a *store.AdminLimits) limitPtr { return limitPtr{f: &a.RatePerSecond} }},
	{name: "burst", max: MaxBurst, integer: true,
		op:    func(l *store.Limits) limitPtr { return limitPtr{i: &l.Burst} },
		admin: func(a *store.AdminLimits) limitPtr { return limitPtr{i: &a.Burst} }},
	{name: "reserved_resources", max: maxGlobalResources, integer: true, reservation: true,
		op: func(l *store.Limits) limitPtr { return limitPtr{i: &l.ReservedResources} }},
	{name: "max_resources", min: 1, max: maxGlobalResources, integer: true,
		op:    func(l *store.Limits) limitPtr { return limitPtr{i: &l.MaxResources} },
		admin: func(a *store.AdminLimits) limitPtr { return limitPtr{i: &a.MaxResources} }},
	{name: "reserved_cells", max: maxGlobalCells, integer: true, reservation: true,
		op: func(l *store.Limits) limitPtr { return limitPtr{i: &l.ReservedCells} }},
	{name: "max_cells", min: 1, max: maxGlobalCells, integer: true,
		op:    func(l *store.Limits) limitPtr { return limitPtr{i: &l.MaxCells} },
		admin: func(a *store.AdminLimits) limitPtr { return limitPtr{i: &a.MaxCells} }},
	{name: "max_streams", max: MaxStreamsLimit, integer: true,
		op:    func(l *store.Limits) limitPtr { return limitPtr{i: &l.MaxStreams} },
		admin: func(a *store.AdminLimits) limitPtr { return limitPtr{i: &a.MaxStreams} }},
	{name: "max_leases", max: MaxLeasesLimit, integer: true, zeroUnbounded: true,
		op:    func(l *store.Limits) limitPtr { return limitPtr{i: &l.MaxLeases} },
		admin: func(a *store.AdminLimits) limitPtr { return limitPtr{i: &a.MaxLeases} }},
	{name: "max_lease_streams", max: MaxLeaseStreamsLimit, integer: true,
		op:    func(l *store.Limits) limitPtr { return limitPtr{i: &l.MaxLeaseStreams} },
		admin: func(a *store.AdminLimits) limitPtr { return limitPtr{i: &a.MaxLeaseStreams} }},
}

// bounds returns f's range under r.
func (r LimitRules) bounds(f limitField) (lo, hi float64) {
	switch f.max {
	case maxGlobalResources:
		return f.min, float64(r.GlobalResources)
	case maxGlobalCells:
		return f.min, float64(r.GlobalCells)
	}
	return f.min, f.max
}

// rangeText describes f's range for messages.
func (r LimitRules) rangeText(f limitField) string {
	lo, hi := r.bounds(f)
	s := fmt.Sprintf("%s to %s", num(lo), num(hi))
	if f.zeroUnbounded {
		s += "; 0 means no cap"
	}
	return s
}

// check returns a 400 naming name unless v (shown as shown) is in f's
// range.
func (r LimitRules) check(f limitField, name string, v float64, shown string) error {
	lo, hi := r.bounds(f)
	switch {
	case f.integer && v != math.Trunc(v):
		return invalidArgument("%s %s is not a whole number: want %s (or null for the default)", name, shown, r.rangeText(f))
	case math.IsNaN(v) || v < lo || v > hi:
		return invalidArgument("%s %s is out of range: want %s (or null for the default)", name, shown, r.rangeText(f))
	}
	return nil
}

// checkAdmin is check for a tenant-admin's value: only its lower bound,
// so that the message tells nothing of the global budgets. Its ceiling,
// which is within the range, bounds it from above (checkCeilings).
func checkAdmin(f limitField, name string, v float64, shown string) error {
	switch {
	case f.integer && v != math.Trunc(v):
		return invalidArgument("%s %s is not a whole number", name, shown)
	case math.IsNaN(v) || v < f.min:
		return invalidArgument("%s %s is out of range: want at least %s, at most its ceiling (or null for the ceiling itself)", name, shown, num(f.min))
	}
	return nil
}

// validate reports the first field of the server's defaults that is unset or
// out of range.
func (r LimitRules) validate() error {
	if r.GlobalResources < 1 || r.GlobalCells < 1 {
		return errors.New("control: Config.Limits: GlobalResources and GlobalCells must be positive")
	}
	d := r.Defaults
	for _, f := range limitFields {
		v, ok := f.op(&d).get()
		if !ok {
			return fmt.Errorf("control: Config.Limits.Defaults: %s is not set", f.name)
		}
		if err := r.check(f, f.name, v, num(v)); err != nil {
			return fmt.Errorf("control: Config.Limits.Defaults: %v", err)
		}
	}
	return r.validatePolicyDefaults()
}

// ceiling returns the operator's value of f, or the default: the most a
// tenant-admin may set, and whether it is the default.
func (r LimitRules) ceiling(f limitField, l store.Limits) (v float64, isDefault bool) {
	if v, ok := f.op(&l).get(); ok {
		return v, false
	}
	d := r.Defaults
	v, _ = f.op(&d).get()
	return v, true
}

// below reports whether a is at most b, where 0 is no cap for f.
func (f limitField) below(a, b float64) bool {
	if f.zeroUnbounded {
		switch {
		case b == 0:
			return true
		case a == 0:
			return false
		}
	}
	return a <= b
}

// Effective returns the limits in force for l: every field set, to the
// operator's value (or the default) lowered to the tenant-admin's value
// where that is lower. Admin of the result is empty.
func (r LimitRules) Effective(l store.Limits) store.Limits {
	var out store.Limits
	for _, f := range limitFields {
		v, _ := r.ceiling(f, l)
		if f.admin != nil {
			if a, ok := f.admin(&l.Admin).get(); ok && f.below(a, v) {
				v = a
			}
		}
		f.op(&out).set(&v)
	}
	return out
}

// Check reports, as an error wrapping tenants.ErrInvalidLimits, the first field of
// stored limits l that is out of range, a reservation above the ceiling
// in force, or a policy field out of range. The server checks stored limits with it at start-up.
func (r LimitRules) Check(l store.Limits) error {
	for _, f := range limitFields {
		if v, ok := f.op(&l).get(); ok {
			if err := r.check(f, f.name, v, num(v)); err != nil {
				return fmt.Errorf("%w: %s", tenants.ErrInvalidLimits, err.(*apiError).msg)
			}
		}
		if f.admin != nil {
			if v, ok := f.admin(&l.Admin).get(); ok {
				if err := r.check(f, "tenant_admin."+f.name, v, num(v)); err != nil {
					return fmt.Errorf("%w: %s", tenants.ErrInvalidLimits, err.(*apiError).msg)
				}
			}
		}
	}
	if err := r.checkReservations(l); err != nil {
		return fmt.Errorf("%w: %s", tenants.ErrInvalidLimits, err.(*apiError).msg)
	}
	if err := r.checkPolicy(l.Policy); err != nil {
		return fmt.Errorf("%w: policy: %s", tenants.ErrInvalidLimits, err.(*apiError).msg)
	}
	return nil
}

// checkReservations refuses a reservation above the ceiling in force.
func (r LimitRules) checkReservations(l store.Limits) error {
	eff := r.Effective(l)
	for _, p := range []struct {
		rname, mname string
		res, max     *int64
		admin        *int64
	}{
		{"reserved_resources", "max_resources", eff.ReservedResources, eff.MaxResources, l.Admin.MaxResources},
		{"reserved_cells", "max_cells", eff.ReservedCells, eff.MaxCells, l.Admin.MaxCells},
	} {
		if *p.res <= *p.max {
			continue
		}
		if p.admin != nil && *p.admin == *p.max {
			return invalidArgument("%s %d exceeds tenant_admin.%s %d: a tenant-admin may not lower its ceiling below its reservation",
				p.rname, *p.res, p.mname, *p.max)
		}
		return invalidArgument("%s %d exceeds %s %d", p.rname, *p.res, p.mname, *p.max)
	}
	return nil
}

// num formats a limit for messages: integers without a fraction, and zero
// as 0 whatever its sign (-0 is a float's, not a limit's).
func num(v float64) string {
	if v == 0 {
		v = 0 // -0 == 0: this drops the sign
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// limitsJSON is a tenant's limits in responses: the operator's values
// (null: the server default), the tenant-admin's own values (null: none)
// and the limits in force.
type limitsJSON struct {
	RatePerSecond     *float64        `json:"rate_per_second"`
	Burst             *int64          `json:"burst"`
	ReservedResources *int64          `json:"reserved_resources"`
	MaxResources      *int64          `json:"max_resources"`
	ReservedCells     *int64          `json:"reserved_cells"`
	MaxCells          *int64          `json:"max_cells"`
	MaxStreams        *int64          `json:"max_streams"`
	MaxLeases         *int64          `json:"max_leases"`
	MaxLeaseStreams   *int64          `json:"max_lease_streams"`
	TenantAdmin       adminLimitsJSON `json:"tenant_admin"`
	Effective         effectiveJSON   `json:"effective"`
}

// adminLimitsJSON is the tenant-admin's own values.
type adminLimitsJSON struct {
	RatePerSecond   *float64 `json:"rate_per_second"`
	Burst           *int64   `json:"burst"`
	MaxResources    *int64   `json:"max_resources"`
	MaxCells        *int64   `json:"max_cells"`
	MaxStreams      *int64   `json:"max_streams"`
	MaxLeases       *int64   `json:"max_leases"`
	MaxLeaseStreams *int64   `json:"max_lease_streams"`
}

// effectiveJSON is the limits in force, every one a number.
type effectiveJSON struct {
	RatePerSecond     float64 `json:"rate_per_second"`
	Burst             int64   `json:"burst"`
	ReservedResources int64   `json:"reserved_resources"`
	MaxResources      int64   `json:"max_resources"`
	ReservedCells     int64   `json:"reserved_cells"`
	MaxCells          int64   `json:"max_cells"`
	MaxStreams        int64   `json:"max_streams"`
	MaxLeases         int64   `json:"max_leases"`
	MaxLeaseStreams   int64   `json:"max_lease_streams"`
}

func (r LimitRules) toJSON(l store.Limits) limitsJSON {
	e := r.Effective(l)
	a := l.Admin
	return limitsJSON{
		l.RatePerSecond, l.Burst, l.ReservedResources, l.MaxResources,
		l.ReservedCells, l.MaxCells, l.MaxStreams, l.MaxLeases, l.MaxLeaseStreams,
		adminLimitsJSON{a.RatePerSecond, a.Burst, a.MaxResources, a.MaxCells, a.MaxStreams, a.MaxLeases, a.MaxLeaseStreams},
		effectiveJSON{*e.RatePerSecond, *e.Burst, *e.ReservedResources, *e.MaxResources,
			*e.ReservedCells, *e.MaxCells, *e.MaxStreams, *e.MaxLeases, *e.MaxLeaseStreams},
	}
}

// limitsRequest is the body of PUT .../limits: any of the operator's
// fields and any of the tenant-admin's (under tenant_admin). A field that
// is left out keeps its value; null resets an operator's field to the
// server default and removes a tenant-admin's value.
type limitsRequest struct {
	RatePerSecond     optional `json:"rate_per_second"`
	Burst             optional `json:"burst"`
	ReservedResources optional `json:"reserved_resources"`
	MaxResources      optional `json:"max_resources"`
	ReservedCells     optional `json:"reserved_cells"`
	MaxCells          optional `json:"max_cells"`
	MaxStreams        optional `json:"max_streams"`
	MaxLeases         optional `json:"max_leases"`
	MaxLeaseStreams   optional `json:"max_lease_streams"`
	TenantAdmin       *struct {
		RatePerSecond   optional `json:"rate_per_second"`
		Burst           optional `json:"burst"`
		MaxResources    optional `json:"max_resources"`
		MaxCells        optional `json:"max_cells"`
		MaxStreams      optional `json:"max_streams"`
		MaxLeases       optional `json:"max_leases"`
		MaxLeaseStreams optional `json:"max_lease_streams"`
	} `json:"tenant_admin"`
}

// operator returns the request's operator fields in limitFields order.
func (req *limitsRequest) operator() []optional {
	return []optional{req.RatePerSecond, req.Burst, req.ReservedResources, req.MaxResources,
		req.ReservedCells, req.MaxCells, req.MaxStreams, req.MaxLeases, req.MaxLeaseStreams}
}

// admin returns the request's tenant-admin fields in limitFields order,
// with a zero optional for the reservations, which have none.
func (req *limitsRequest) admin() []optional {
	a := req.TenantAdmin
	if a == nil {
		return make([]optional, len(limitFields))
	}
	return []optional{a.RatePerSecond, a.Burst, {}, a.MaxResources, {}, a.MaxCells, a.MaxStreams, a.MaxLeases, a.MaxLeaseStreams}
}

// optional is a request field that tells "absent" from null. Its value is
// any JSON number, checked against the field's range later.
type optional struct {
	set bool     // the field was in the body
	v   *float64 // nil for null
	raw string   // the number as sent, for messages
}

// UnmarshalJSON implements json.Unmarshaler; encoding/json calls it for
// null too, which is how null is told from absent. A value of the wrong
// type is a *json.UnmarshalTypeError, to which the decoder adds the field.
func (o *optional) UnmarshalJSON(b []byte) error {
	o.set = true
	if string(b) == "null" {
		o.v = nil
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v == 0 {
		v = 0 // -0 is stored, answered and audited as 0; raw keeps what was sent
	}
	o.v, o.raw = &v, string(b)
	return nil
}

// change is one field a request changes.
type change struct {
	f     limitField
	name  string // as in the request: "burst" or "tenant_admin.burst"
	admin bool
	v     *float64
	raw   string // v as sent
}

func (c change) ptr(l *store.Limits) limitPtr {
	if c.admin {
		return c.f.admin(&l.Admin)
	}
	return c.f.op(l)
}

// changes returns the fields the request sets. A tenant-admin may set only
// its own values (tenant_admin): every operator field is a 403.
func (req *limitsRequest) changes(c caller) ([]change, error) {
	var out []change
	op, admin := req.operator(), req.admin()
	for i, f := range limitFields {
		if o := op[i]; o.set {
			if c.role != RoleOperator {
				if f.reservation {
					return nil, permissionDenied(f.name + " is a reservation of the shared budget, which only the operator sets")
				}
				return nil, permissionDenied(fmt.Sprintf("%s is a ceiling that only the operator sets; a tenant-admin sets its own value, at most the ceiling, as tenant_admin.%s", f.name, f.name))
			}
			out = append(out, change{f: f, name: f.name, v: o.v, raw: o.raw})
		}
	}
	for i, f := range limitFields {
		if o := admin[i]; o.set {
			out = append(out, change{f: f, name: "tenant_admin." + f.name, admin: true, v: o.v, raw: o.raw})
		}
	}
	if len(out) == 0 {
		return nil, invalidArgument("no limits given; set any of rate_per_second, burst, reserved_resources, max_resources, reserved_cells, max_cells, max_streams, max_leases, max_lease_streams (operator), or tenant_admin.{rate_per_second, burst, max_resources, max_cells, max_streams, max_leases, max_lease_streams}")
	}
	return out, nil
}

// showLimit shows a value in the audit trail: an operator's unset field is
// the default, a tenant-admin's is none.
func showLimit(v float64, ok, admin bool) string {
	switch {
	case ok:
		return num(v)
	case admin:
		return "none"
	}
	return "default"
}

// getLimits serves GET /api/v1/tenants/{id}/limits.
func (a *API) getLimits(w http.ResponseWriter, r *http.Request, _ caller) error {
	l, err := a.storedLimits(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.cfg.Limits.toJSON(l))
	return nil
}

// storedLimits reads the stored limits (and policy) of the request's tenant.
func (a *API) storedLimits(r *http.Request) (store.Limits, error) {
	id, err := tenantID(r)
	if err != nil {
		return store.Limits{}, err
	}
	l, err := a.cfg.Store.GetLimits(r.Context(), id)
	if err != nil {
		return store.Limits{}, fromStore(err, "tenant "+strconv.Quote(id))
	}
	return l, nil
}

// updateLimits changes a tenant's stored limits (and policy) as one
// request: under the control plane's lock it reads them, has edit merge
// the request into them (returning the audit's "field old -> new" parts),
// has Hooks.ApplyLimits validate and apply the result live, then stores
// it; if storing fails it applies the previous limits again. what names
// the change in errors and logs. It returns the merged limits.
func (a *API) updateLimits(ctx context.Context, c caller, id, what, action string,
	edit func(prev store.Limits) (merged store.Limits, shown []string, err error)) (store.Limits, error) {
	unlock, err := a.lock(ctx)
	if err != nil {
		return store.Limits{}, err
	}
	defer unlock()
	prev, err := a.cfg.Store.GetLimits(ctx, id)
	if err != nil {
		return store.Limits{}, fromStore(err, "tenant "+strconv.Quote(id))
	}
	merged, shown, err := edit(prev)
	if err != nil {
		return store.Limits{}, err
	}
	if err := a.cfg.Hooks.ApplyLimits(id, merged); err != nil {
		if errors.Is(err, tenants.ErrInvalidLimits) {
			return store.Limits{}, invalidArgument("%s", strings.TrimPrefix(err.Error(), tenants.ErrInvalidLimits.Error()+": "))
		}
		return store.Limits{}, fmt.Errorf("apply %s: %w", what, err)
	}
	if err := a.cfg.Store.PutLimits(ctx, id, merged); err != nil {
		if rerr := a.cfg.Hooks.ApplyLimits(id, prev); rerr != nil {
			a.log.ErrorContext(ctx, what+" applied live but not stored, and restoring the previous one failed",
				"tenant", id, "err", rerr)
		}
		return store.Limits{}, fromStore(err, "tenant "+strconv.Quote(id))
	}
	a.audit(ctx, c, id, action, id, strings.Join(shown, ", "))
	return merged, nil
}

// putLimits serves PUT /api/v1/tenants/{id}/limits. It checks who may set
// each field and each value's range, merges the request into the stored
// limits, checks a tenant-admin's values against the operator's ceilings,
// has Hooks.ApplyLimits validate and apply the result live, then stores it;
// if storing fails it applies the previous limits again. It answers the
// full stored limits and those in force.
func (a *API) putLimits(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	var req limitsRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	changes, err := req.changes(c)
	if err != nil {
		return err
	}
	rules := a.cfg.Limits
	for _, ch := range changes {
		if ch.v == nil {
			continue
		}
		check := rules.check
		if ch.admin {
			check = func(f limitField, name string, v float64, shown string) error { return checkAdmin(f, name, v, shown) }
		}
		if err := check(ch.f, ch.name, *ch.v, ch.raw); err != nil {
			return err
		}
	}

	merged, err := a.updateLimits(r.Context(), c, id, "limits", actionLimitsPut, func(prev store.Limits) (store.Limits, []string, error) {
		merged := prev // the pointers are replaced, never written through
		var shown []string
		for _, ch := range changes {
			old, had := ch.ptr(&prev).get()
			ch.ptr(&merged).set(ch.v)
			nv, has := ch.ptr(&merged).get()
			shown = append(shown, fmt.Sprintf("%s %s -> %s", ch.name, showLimit(old, had, ch.admin), showLimit(nv, has, ch.admin)))
		}
		if err := a.checkCeilings(c, changes, merged); err != nil {
			return merged, nil, err
		}
		return merged, shown, rules.checkReservations(merged)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rules.toJSON(merged))
	return nil
}

// checkCeilings refuses a tenant-admin value above the operator's value of
// the same field (or the default, when the operator set none): 403 for a
// tenant-admin, who may only lower its limits or raise them back up to the
// ceiling; 400 for an operator, whose request contradicts itself.
func (a *API) checkCeilings(c caller, changes []change, merged store.Limits) error {
	for _, ch := range changes {
		if !ch.admin || ch.v == nil {
			continue
		}
		ceil, isDefault := a.cfg.Limits.ceiling(ch.f, merged)
		if ch.f.below(*ch.v, ceil) {
			continue
		}
		whose := "set by the operator"
		if isDefault {
			whose = "the server default; the operator set none"
		}
		v := ch.raw
		if ch.f.zeroUnbounded && *ch.v == 0 {
			v += " (no cap)"
		}
		msg := fmt.Sprintf("%s %s is above its ceiling of %s (%s); a tenant-admin may lower its limits, or raise them up to the ceiling",
			ch.name, v, num(ceil), whose)
		if c.role == RoleOperator {
			return invalidArgument("%s", msg)
		}
		return permissionDenied(msg)
	}
	return nil
}
