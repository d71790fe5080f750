package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/tenants"
)

// LimitRules are the server's side of every tenant's limits (the
// internal/limits table): what a field left at null means (Defaults) and
// the global budgets that bound reservations and ceilings. The operator's
// values are the tenant's ceilings and reservations; a tenant-admin's own
// values (store.Limits.Admin) may only lower them; the limits in force are
// the smaller of the two (Effective).
type LimitRules struct {
	// Defaults gives the value of every limit that is null: every limit
	// must be set. Admin is ignored.
	Defaults store.Limits
	// GlobalResources and GlobalCells are the global budgets: the largest
	// reservation or ceiling of resources and cells.
	GlobalResources, GlobalCells int64
}

// bounds returns l's range under r.
func (r LimitRules) bounds(l limits.Limit) (lo, hi float64) {
	return l.Bounds(r.GlobalResources, r.GlobalCells)
}

// rangeText describes l's range for messages.
func (r LimitRules) rangeText(l limits.Limit) string {
	lo, hi := r.bounds(l)
	s := fmt.Sprintf("%s to %s", num(lo), num(hi))
	if l.Spec().ZeroUnbounded {
		s += "; 0 means no cap"
	}
	return s
}

// check returns a 400 naming name unless v (shown as shown) is in l's
// range.
func (r LimitRules) check(l limits.Limit, name string, v float64, shown string) error {
	lo, hi := r.bounds(l)
	switch {
	case l.Spec().Integer && v != math.Trunc(v):
		return invalidArgument("%s %s is not a whole number: want %s (or null for the default)", name, shown, r.rangeText(l))
	case math.IsNaN(v) || v < lo || v > hi:
		return invalidArgument("%s %s is out of range: want %s (or null for the default)", name, shown, r.rangeText(l))
	}
	return nil
}

// checkAdmin is check for a tenant-admin's value: only its lower bound,
// so that the message tells nothing of the global budgets. Its ceiling,
// which is within the range, bounds it from above (checkCeilings).
func checkAdmin(l limits.Limit, name string, v float64, shown string) error {
	s := l.Spec()
	switch {
	case s.Integer && v != math.Trunc(v):
		return invalidArgument("%s %s is not a whole number", name, shown)
	case math.IsNaN(v) || v < s.Min:
		return invalidArgument("%s %s is out of range: want at least %s, at most its ceiling (or null for the ceiling itself)", name, shown, num(s.Min))
	}
	return nil
}

// validate reports the first limit of the server's defaults that is unset
// or out of range.
func (r LimitRules) validate() error {
	if r.GlobalResources < 1 || r.GlobalCells < 1 {
		return errors.New("control: Config.Limits: GlobalResources and GlobalCells must be positive")
	}
	for l := range limits.Count {
		v, ok := r.Defaults.Values.Get(l)
		if !ok {
			return fmt.Errorf("control: Config.Limits.Defaults: %s is not set", l)
		}
		if err := r.check(l, l.String(), v, num(v)); err != nil {
			return fmt.Errorf("control: Config.Limits.Defaults: %v", err)
		}
	}
	return r.validatePolicyDefaults()
}

// ceiling returns the operator's value of l in stored, or the default: the
// most a tenant-admin may set, and whether it is the default.
func (r LimitRules) ceiling(l limits.Limit, stored store.Limits) (v float64, isDefault bool) {
	if v, ok := stored.Values.Get(l); ok {
		return v, false
	}
	return r.Defaults.Values.Value(l), true
}

// Effective returns the limits in force for stored: every limit set, to
// the operator's value (or the default) lowered to the tenant-admin's
// value where that is lower. Admin and Policy of the result are empty.
func (r LimitRules) Effective(stored store.Limits) store.Limits {
	var out store.Limits
	for l := range limits.Count {
		v, _ := r.ceiling(l, stored)
		if a, ok := stored.Admin.Get(l); ok && !l.Spec().Reservation && l.Below(a, v) {
			v = a
		}
		out.Values.Set(l, v)
	}
	return out
}

// Check reports, as an error wrapping tenants.ErrInvalidLimits, the first
// limit of stored that is out of range, a reservation above the ceiling in
// force, or a policy field out of range. The server checks stored limits
// with it at start-up.
func (r LimitRules) Check(stored store.Limits) error {
	for l := range limits.Count {
		if v, ok := stored.Values.Get(l); ok {
			if err := r.check(l, l.String(), v, num(v)); err != nil {
				return fmt.Errorf("%w: %s", tenants.ErrInvalidLimits, err.(*apiError).msg)
			}
		}
		if v, ok := stored.Admin.Get(l); ok && !l.Spec().Reservation {
			if err := r.check(l, "tenant_admin."+l.String(), v, num(v)); err != nil {
				return fmt.Errorf("%w: %s", tenants.ErrInvalidLimits, err.(*apiError).msg)
			}
		}
	}
	if err := r.checkReservations(stored); err != nil {
		return fmt.Errorf("%w: %s", tenants.ErrInvalidLimits, err.(*apiError).msg)
	}
	if err := r.checkPolicy(stored.Policy); err != nil {
		return fmt.Errorf("%w: policy: %s", tenants.ErrInvalidLimits, err.(*apiError).msg)
	}
	return nil
}

// checkReservations refuses a reservation above its ceiling in force.
func (r LimitRules) checkReservations(stored store.Limits) error {
	eff := r.Effective(stored)
	for l := range limits.Count {
		s := l.Spec()
		if !s.Reservation {
			continue
		}
		res, ceil := eff.Values.Value(l), eff.Values.Value(s.Ceiling)
		if s.Ceiling.Below(res, ceil) {
			continue
		}
		if a, ok := stored.Admin.Get(s.Ceiling); ok && a == ceil {
			return invalidArgument("%s %s exceeds tenant_admin.%s %s: a tenant-admin may not lower its ceiling below its reservation",
				l, num(res), s.Ceiling, num(ceil))
		}
		return invalidArgument("%s %s exceeds %s %s", l, num(res), s.Ceiling, num(ceil))
	}
	return nil
}

// num formats a limit or a policy value for messages (limits.Format).
func num(v float64) string { return limits.Format(v) }

// limitsJSON is a tenant's limits in responses: the operator's values
// (null: the server default), under tenant_admin the tenant-admin's own
// values (null: none; reservations have none), and under effective the
// limits in force, every one a number. Each is an object of the limits in
// the order of the table.
type limitsJSON struct {
	operator, tenantAdmin, effective limits.Values
}

// MarshalJSON implements json.Marshaler.
func (j limitsJSON) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	b = appendLimits(b, j.operator, false)
	b = append(b, `,"tenant_admin":{`...)
	b = appendLimits(b, j.tenantAdmin, true)
	b = append(b, `},"effective":{`...)
	b = appendLimits(b, j.effective, false)
	return append(b, "}}"...), nil
}

// appendLimits appends the members of a JSON object of v to b: every
// limit (for a tenant-admin's, every one but the reservations) in the
// order of the table, null where v has none, a whole number as an
// integer.
func appendLimits(b []byte, v limits.Values, admin bool) []byte {
	first := true
	for l := range limits.Count {
		if admin && l.Spec().Reservation {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, l.String()...) // names are [a-z_]: nothing to escape
		b = append(b, '"', ':')
		var x any // null
		if f, ok := v.Get(l); ok && l.Spec().Integer {
			x = int64(f)
		} else if ok {
			x = f
		}
		n, _ := json.Marshal(x) // a finite number or null
		b = append(b, n...)
	}
	return b
}

// toJSON is the answer about stored limits l.
func (r LimitRules) toJSON(l store.Limits) limitsJSON {
	return limitsJSON{operator: l.Values, tenantAdmin: l.Admin, effective: r.Effective(l).Values}
}

// limitsRequest is the body of PUT .../limits: any of the operator's
// limits and any of the tenant-admin's (under tenant_admin), by
// limits.Limit. A limit that is left out keeps its value; null resets an
// operator's limit to the server default and removes a tenant-admin's
// value.
type limitsRequest struct {
	operator, admin [limits.Count]optional
}

// limitsRequestType is the Go type that decodeBody decodes the body of PUT
// .../limits into, built from the limits table: a field of type optional
// per limit, named in JSON as the limit, and tenant_admin, a pointer to a
// struct of the same for the limits a tenant-admin has. It is a struct
// like every request type, so that decodeBody checks it as it checks
// them: exact names (with a hint for another letter case), no key twice,
// type errors naming the field.
func limitsRequestType() reflect.Type {
	var op, admin []reflect.StructField
	for l := range limits.Count {
		f := reflect.StructField{Name: requestField(l), Type: reflect.TypeFor[optional](),
			Tag: reflect.StructTag(`json:"` + l.String() + `"`)}
		op = append(op, f)
		if !l.Spec().Reservation {
			admin = append(admin, f)
		}
	}
	return reflect.StructOf(append(op, reflect.StructField{
		Name: "TenantAdmin", Type: reflect.PointerTo(reflect.StructOf(admin)), Tag: `json:"tenant_admin"`}))
}

// requestField is the Go name of l's field in limitsRequestType.
func requestField(l limits.Limit) string { return "L" + strconv.Itoa(int(l)) }

// decodeLimitsRequest reads the body of PUT .../limits (decodeBody).
func decodeLimitsRequest(w http.ResponseWriter, r *http.Request) (limitsRequest, error) {
	body := reflect.New(limitsRequestType())
	if err := decodeBody(w, r, body.Interface()); err != nil {
		return limitsRequest{}, err
	}
	var req limitsRequest
	op := body.Elem()
	admin := op.FieldByName("TenantAdmin")
	for l := range limits.Count {
		req.operator[l] = op.FieldByName(requestField(l)).Interface().(optional)
		if !admin.IsNil() && !l.Spec().Reservation {
			req.admin[l] = admin.Elem().FieldByName(requestField(l)).Interface().(optional)
		}
	}
	return req, nil
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

// change is one limit a request changes.
type change struct {
	lim   limits.Limit
	name  string // as in the request: "burst" or "tenant_admin.burst"
	admin bool
	v     *float64
	raw   string // v as sent
}

// values returns the values of l that c changes: the operator's or the
// tenant-admin's.
func (c change) values(l *store.Limits) *limits.Values {
	if c.admin {
		return &l.Admin
	}
	return &l.Values
}

// changes returns the limits the request sets. A tenant-admin may set only
// its own values (tenant_admin): every operator limit is a 403.
func (req *limitsRequest) changes(c caller) ([]change, error) {
	var out []change
	for l := range limits.Count {
		if o := req.operator[l]; o.set {
			if c.role != RoleOperator {
				if l.Spec().Reservation {
					return nil, permissionDenied(l.String() + " is a reservation of the shared budget, which only the operator sets")
				}
				return nil, permissionDenied(fmt.Sprintf("%s is a ceiling that only the operator sets; a tenant-admin sets its own value, at most the ceiling, as tenant_admin.%s", l, l))
			}
			out = append(out, change{lim: l, name: l.String(), v: o.v, raw: o.raw})
		}
	}
	for l := range limits.Count {
		if o := req.admin[l]; o.set {
			out = append(out, change{lim: l, name: "tenant_admin." + l.String(), admin: true, v: o.v, raw: o.raw})
		}
	}
	if len(out) == 0 {
		var op, admin []string
		for l := range limits.Count {
			op = append(op, l.String())
			if !l.Spec().Reservation {
				admin = append(admin, l.String())
			}
		}
		return nil, invalidArgument("no limits given; set any of %s (operator), or tenant_admin.{%s}", strings.Join(op, ", "), strings.Join(admin, ", "))
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
	req, err := decodeLimitsRequest(w, r)
	if err != nil {
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
			check = func(l limits.Limit, name string, v float64, shown string) error { return checkAdmin(l, name, v, shown) }
		}
		if err := check(ch.lim, ch.name, *ch.v, ch.raw); err != nil {
			return err
		}
	}

	merged, err := a.updateLimits(r.Context(), c, id, "limits", actionLimitsPut, func(prev store.Limits) (store.Limits, []string, error) {
		merged := prev // the pointers are replaced, never written through
		var shown []string
		for _, ch := range changes {
			old, had := ch.values(&prev).Get(ch.lim)
			ch.values(&merged)[ch.lim] = ch.v
			nv, has := ch.values(&merged).Get(ch.lim)
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
		ceil, isDefault := a.cfg.Limits.ceiling(ch.lim, merged)
		if ch.lim.Below(*ch.v, ceil) {
			continue
		}
		whose := "set by the operator"
		if isDefault {
			whose = "the server default; the operator set none"
		}
		v := ch.raw
		if ch.lim.Spec().ZeroUnbounded && *ch.v == 0 {
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
