package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/store"
)

// A tenant's quarantine, decay and objective policy (docs/control-plane.md): the
// operator and the tenant's admin may set any field within its range; a
// field left at null is the server-wide default (LimitRules.Defaults.Policy,
// the flags --half-life, ...). The policy governs only how the tenant's own
// resources are judged, and costs nothing of the shared budgets, which is
// why a tenant-admin sets it as freely as the operator.

// policyField is one field of the policy: its JSON name, range and unit,
// and how to reach it in store.Policy.
type policyField struct {
	name     string
	min, max float64
	integer  bool
	// want describes the range for messages.
	want string
	ptr  func(*store.Policy) limitPtr
}

// limitPtr reaches one *int64 or *float64 field of store.Policy.
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

// policyFields lists the policy in the JSON order. The ranges are the
// pool package's, as the server's flags have them.
var policyFields = []policyField{
	{name: "half_life_seconds", min: pool.MinHalfLife.Seconds(), max: pool.MaxHalfLife.Seconds(), integer: true, want: "60 to 2592000 seconds (1 minute to 30 days)",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{i: &p.HalfLifeSeconds} }},
	{name: "quarantine_after", min: 1, max: pool.MaxFailuresToQuarantine, integer: true, want: "1 to 1000 consecutive failures",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{i: &p.QuarantineAfter} }},
	{name: "quarantine_whole_after", min: 1, max: pool.MaxFailuresToQuarantineWhole, integer: true, want: "1 to 100000 consecutive failures",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{i: &p.QuarantineWholeAfter} }},
	{name: "quarantine_below", min: -1, max: 1, want: "a success rate above 0 and below 1 (0.1 is 10%), or -1 to turn the rule off",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{f: &p.QuarantineBelow} }},
	{name: "quarantine_min_evidence", min: 1, max: pool.MaxQuarantineMinEvidence, want: "1 to 1000000 observations",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{f: &p.QuarantineMinEvidence} }},
	{name: "cooldown_base_seconds", min: pool.MinCooldown.Seconds(), max: pool.MaxCooldownBase.Seconds(), integer: true, want: "1 to 86400 seconds (24 hours)",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{i: &p.CooldownBaseSeconds} }},
	{name: "cooldown_max_seconds", min: pool.MinCooldown.Seconds(), max: pool.MaxCooldownMax.Seconds(), integer: true, want: "cooldown_base_seconds to 2592000 seconds (30 days)",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{i: &p.CooldownMaxSeconds} }},
	{name: "max_uses", min: 0, max: pool.MaxMaxUses, integer: true, want: "0 (no limit) to 1000000000 leases",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{i: &p.MaxUses} }},
	{name: "max_age_seconds", min: 0, max: pool.MaxMaxAge.Seconds(), integer: true, want: "0 (no limit) to 31536000 seconds (365 days)",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{i: &p.MaxAgeSeconds} }},
	{name: "max_quarantined_share", min: 0, max: 1, want: "a share above 0, at most 1 (0.5 is half the pool; 1: no cap)",
		ptr: func(p *store.Policy) limitPtr { return limitPtr{f: &p.MaxQuarantinedShare} }},
}

// check returns a 400 naming f unless v (shown as shown) is in its range.
func (f policyField) check(v float64, shown string) error {
	ok := !math.IsNaN(v) && v >= f.min && v <= f.max && (!f.integer || v == math.Trunc(v))
	switch f.name {
	case "quarantine_below":
		ok = v == -1 || (v > 0 && v < 1)
	case "max_quarantined_share":
		ok = v > 0 && v <= 1
	}
	if !ok {
		return invalidArgument("%s %s is out of range: want %s (or null for the server default)", f.name, shown, f.want)
	}
	return nil
}

// EffectivePolicy returns the policy in force for p: every field set, to
// the tenant's value or the server default.
func (r LimitRules) EffectivePolicy(p store.Policy) store.Policy {
	var out store.Policy
	d := r.Defaults.Policy
	for _, f := range policyFields {
		v, ok := f.ptr(&p).get()
		if !ok {
			v, _ = f.ptr(&d).get()
		}
		f.ptr(&out).set(&v)
	}
	out.Objective = p.Objective
	if out.Objective == nil {
		out.Objective = d.Objective
	}
	return out
}

// objectives are the values of the policy's objective (pool.Objective).
var objectives = []string{string(pool.ObjectiveSuccess), string(pool.ObjectiveSuccessPerTime)}

// checkObjective returns a 400 unless o is an objective.
func checkObjective(o string) error {
	if !slices.Contains(objectives, o) {
		return invalidArgument("objective %q is not one of %s (or null for the server default)", o, strings.Join(objectives, ", "))
	}
	return nil
}

// checkPolicy reports the first field of p that is out of range, or a
// cooldown maximum below the base in force.
func (r LimitRules) checkPolicy(p store.Policy) error {
	for _, f := range policyFields {
		if v, ok := f.ptr(&p).get(); ok {
			if err := f.check(v, num(v)); err != nil {
				return err
			}
		}
	}
	if p.Objective != nil {
		if err := checkObjective(*p.Objective); err != nil {
			return err
		}
	}
	eff := r.EffectivePolicy(p)
	if *eff.CooldownMaxSeconds < *eff.CooldownBaseSeconds {
		return invalidArgument("cooldown_max_seconds %d is below cooldown_base_seconds %d: the longest quarantine cannot be shorter than the first",
			*eff.CooldownMaxSeconds, *eff.CooldownBaseSeconds)
	}
	return nil
}

// validatePolicyDefaults reports the first field of the server's default
// policy that is unset or out of range.
func (r LimitRules) validatePolicyDefaults() error {
	d := r.Defaults.Policy
	for _, f := range policyFields {
		v, ok := f.ptr(&d).get()
		if !ok {
			return fmt.Errorf("control: Config.Limits.Defaults.Policy: %s is not set", f.name)
		}
		if err := f.check(v, num(v)); err != nil {
			return fmt.Errorf("control: Config.Limits.Defaults.Policy: %v", err)
		}
	}
	if *d.CooldownMaxSeconds < *d.CooldownBaseSeconds {
		return errors.New("control: Config.Limits.Defaults.Policy: cooldown_max_seconds is below cooldown_base_seconds")
	}
	if d.Objective == nil || !slices.Contains(objectives, *d.Objective) {
		return fmt.Errorf("control: Config.Limits.Defaults.Policy: objective is not set to one of %s", strings.Join(objectives, ", "))
	}
	return nil
}

// policyJSON is a tenant's policy in responses: its own values (null: the
// server default) and the policy in force.
type policyJSON struct {
	HalfLifeSeconds       *int64              `json:"half_life_seconds"`
	QuarantineAfter       *int64              `json:"quarantine_after"`
	QuarantineWholeAfter  *int64              `json:"quarantine_whole_after"`
	QuarantineBelow       *float64            `json:"quarantine_below"`
	QuarantineMinEvidence *float64            `json:"quarantine_min_evidence"`
	CooldownBaseSeconds   *int64              `json:"cooldown_base_seconds"`
	CooldownMaxSeconds    *int64              `json:"cooldown_max_seconds"`
	Objective             *string             `json:"objective"`
	MaxUses               *int64              `json:"max_uses"`
	MaxAgeSeconds         *int64              `json:"max_age_seconds"`
	MaxQuarantinedShare   *float64            `json:"max_quarantined_share"`
	Effective             effectivePolicyJSON `json:"effective"`
}

// effectivePolicyJSON is the policy in force, every field set.
type effectivePolicyJSON struct {
	HalfLifeSeconds       int64   `json:"half_life_seconds"`
	QuarantineAfter       int64   `json:"quarantine_after"`
	QuarantineWholeAfter  int64   `json:"quarantine_whole_after"`
	QuarantineBelow       float64 `json:"quarantine_below"`
	QuarantineMinEvidence float64 `json:"quarantine_min_evidence"`
	CooldownBaseSeconds   int64   `json:"cooldown_base_seconds"`
	CooldownMaxSeconds    int64   `json:"cooldown_max_seconds"`
	Objective             string  `json:"objective"`
	MaxUses               int64   `json:"max_uses"`
	MaxAgeSeconds         int64   `json:"max_age_seconds"`
	MaxQuarantinedShare   float64 `json:"max_quarantined_share"`
}

func (r LimitRules) policyToJSON(p store.Policy) policyJSON {
	e := r.EffectivePolicy(p)
	return policyJSON{
		p.HalfLifeSeconds, p.QuarantineAfter, p.QuarantineWholeAfter, p.QuarantineBelow,
		p.QuarantineMinEvidence, p.CooldownBaseSeconds, p.CooldownMaxSeconds, p.Objective,
		p.MaxUses, p.MaxAgeSeconds, p.MaxQuarantinedShare,
		effectivePolicyJSON{*e.HalfLifeSeconds, *e.QuarantineAfter, *e.QuarantineWholeAfter, *e.QuarantineBelow,
			*e.QuarantineMinEvidence, *e.CooldownBaseSeconds, *e.CooldownMaxSeconds, *e.Objective,
			*e.MaxUses, *e.MaxAgeSeconds, *e.MaxQuarantinedShare},
	}
}

// policyRequest is the body of PUT .../policy: any of the fields. A field
// that is left out keeps its value; null resets it to the server default.
type policyRequest struct {
	HalfLifeSeconds       optional       `json:"half_life_seconds"`
	QuarantineAfter       optional       `json:"quarantine_after"`
	QuarantineWholeAfter  optional       `json:"quarantine_whole_after"`
	QuarantineBelow       optional       `json:"quarantine_below"`
	QuarantineMinEvidence optional       `json:"quarantine_min_evidence"`
	CooldownBaseSeconds   optional       `json:"cooldown_base_seconds"`
	CooldownMaxSeconds    optional       `json:"cooldown_max_seconds"`
	Objective             optionalString `json:"objective"`
	MaxUses               optional       `json:"max_uses"`
	MaxAgeSeconds         optional       `json:"max_age_seconds"`
	MaxQuarantinedShare   optional       `json:"max_quarantined_share"`
}

// optionalString is a string field of a request that null resets and
// absence leaves alone.
type optionalString struct {
	set bool
	v   *string // nil for null
}

// UnmarshalJSON implements json.Unmarshaler, as optional's does.
func (o *optionalString) UnmarshalJSON(b []byte) error {
	o.set = true
	if string(b) == "null" {
		o.v = nil
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	o.v = &v
	return nil
}

// fields returns the request's fields in policyFields order.
func (req *policyRequest) fields() []optional {
	return []optional{req.HalfLifeSeconds, req.QuarantineAfter, req.QuarantineWholeAfter, req.QuarantineBelow,
		req.QuarantineMinEvidence, req.CooldownBaseSeconds, req.CooldownMaxSeconds,
		req.MaxUses, req.MaxAgeSeconds, req.MaxQuarantinedShare}
}

// showPolicy shows a value in the audit trail.
func showPolicy(v float64, ok bool) string {
	if ok {
		return num(v)
	}
	return "default"
}

// showObjective shows an objective in the audit trail.
func showObjective(o *string) string {
	if o == nil {
		return "default"
	}
	return *o
}

// getPolicy serves GET /api/v1/tenants/{id}/policy.
func (a *API) getPolicy(w http.ResponseWriter, r *http.Request, _ caller) error {
	l, err := a.storedLimits(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.cfg.Limits.policyToJSON(l.Policy))
	return nil
}

// putPolicy serves PUT /api/v1/tenants/{id}/policy. It checks each
// value's range, merges the request into the stored policy (kept beside
// the limits), has Hooks.ApplyLimits apply the result live to the tenant's
// pool, then stores it; if storing fails it applies the previous policy
// again. It answers the stored policy and the policy in force.
func (a *API) putPolicy(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	var req policyRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	given := req.Objective.set
	if req.Objective.v != nil {
		if err := checkObjective(*req.Objective.v); err != nil {
			return err
		}
	}
	for i, o := range req.fields() {
		if !o.set {
			continue
		}
		given = true
		if o.v != nil {
			if err := policyFields[i].check(*o.v, o.raw); err != nil {
				return err
			}
		}
	}
	if !given {
		return invalidArgument("no policy given; set any of half_life_seconds, quarantine_after, quarantine_whole_after, quarantine_below, quarantine_min_evidence, cooldown_base_seconds, cooldown_max_seconds, objective, max_uses, max_age_seconds, max_quarantined_share (null: the server default)")
	}

	merged, err := a.updateLimits(r.Context(), c, id, "policy", actionPolicyPut, func(prev store.Limits) (store.Limits, []string, error) {
		merged := prev // the pointers are replaced, never written through
		var shown []string
		for i, o := range req.fields() {
			if !o.set {
				continue
			}
			f := policyFields[i]
			old, had := f.ptr(&prev.Policy).get()
			f.ptr(&merged.Policy).set(o.v)
			nv, has := f.ptr(&merged.Policy).get()
			shown = append(shown, fmt.Sprintf("%s %s -> %s", f.name, showPolicy(old, had), showPolicy(nv, has)))
		}
		if req.Objective.set {
			merged.Policy.Objective = req.Objective.v
			shown = append(shown, fmt.Sprintf("objective %s -> %s", showObjective(prev.Policy.Objective), showObjective(req.Objective.v)))
		}
		return merged, shown, a.cfg.Limits.checkPolicy(merged.Policy)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.cfg.Limits.policyToJSON(merged.Policy))
	return nil
}
