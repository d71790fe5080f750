package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/repool/repool/internal/store"
)

// limitsJSON is a tenant's limits in responses: every field, null meaning
// "server default".
type limitsJSON struct {
	RatePerSecond     *float64 `json:"rate_per_second"`
	Burst             *int64   `json:"burst"`
	ReservedResources *int64   `json:"reserved_resources"`
	MaxResources      *int64   `json:"max_resources"`
	ReservedCells     *int64   `json:"reserved_cells"`
	MaxCells          *int64   `json:"max_cells"`
	MaxStreams        *int64   `json:"max_streams"`
	MaxLeases         *int64   `json:"max_leases"`
}

func toLimitsJSON(l store.Limits) limitsJSON {
	return limitsJSON{l.RatePerSecond, l.Burst, l.ReservedResources, l.MaxResources,
		l.ReservedCells, l.MaxCells, l.MaxStreams, l.MaxLeases}
}

// limitsRequest is the body of PUT .../limits: any of the fields. A field
// that is left out keeps its value; null resets it to the server default.
type limitsRequest struct {
	RatePerSecond     optional[float64] `json:"rate_per_second"`
	Burst             optional[int64]   `json:"burst"`
	ReservedResources optional[int64]   `json:"reserved_resources"`
	MaxResources      optional[int64]   `json:"max_resources"`
	ReservedCells     optional[int64]   `json:"reserved_cells"`
	MaxCells          optional[int64]   `json:"max_cells"`
	MaxStreams        optional[int64]   `json:"max_streams"`
	MaxLeases         optional[int64]   `json:"max_leases"`
}

// optional is a request field that tells "absent" from null.
type optional[T int64 | float64] struct {
	set bool // the field was in the body
	v   *T   // nil for null
}

// UnmarshalJSON implements json.Unmarshaler; encoding/json calls it for
// null too, which is how null is told from absent. A value of the wrong
// type is a *json.UnmarshalTypeError, to which the decoder adds the field.
func (o *optional[T]) UnmarshalJSON(b []byte) error {
	o.set = true
	if string(b) == "null" {
		o.v = nil
		return nil
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	o.v = &v
	return nil
}

// limitField pairs a request field with the stored field it changes.
type limitField struct {
	name  string
	isSet bool
	apply func(*store.Limits)
	show  func(store.Limits) string
}

func intField(name string, o optional[int64], f func(*store.Limits) **int64) limitField {
	return limitField{
		name: name, isSet: o.set,
		apply: func(l *store.Limits) { *f(l) = o.v },
		show:  func(l store.Limits) string { return showLimit(*f(&l)) },
	}
}

// valid reports whether the field's new value is one the store accepts
// (store.Limits.Validate): null, or finite and >= 0.
func (f limitField) valid() bool {
	var l store.Limits
	f.apply(&l)
	return l.Validate() == nil
}

// fields lists the request's fields in the JSON order.
func (req *limitsRequest) fields() []limitField {
	rate := req.RatePerSecond
	return []limitField{
		{
			name: "rate_per_second", isSet: rate.set,
			apply: func(l *store.Limits) { l.RatePerSecond = rate.v },
			show:  func(l store.Limits) string { return showLimit(l.RatePerSecond) },
		},
		intField("burst", req.Burst, func(l *store.Limits) **int64 { return &l.Burst }),
		intField("reserved_resources", req.ReservedResources, func(l *store.Limits) **int64 { return &l.ReservedResources }),
		intField("max_resources", req.MaxResources, func(l *store.Limits) **int64 { return &l.MaxResources }),
		intField("reserved_cells", req.ReservedCells, func(l *store.Limits) **int64 { return &l.ReservedCells }),
		intField("max_cells", req.MaxCells, func(l *store.Limits) **int64 { return &l.MaxCells }),
		intField("max_streams", req.MaxStreams, func(l *store.Limits) **int64 { return &l.MaxStreams }),
		intField("max_leases", req.MaxLeases, func(l *store.Limits) **int64 { return &l.MaxLeases }),
	}
}

func showLimit[T int64 | float64](v *T) string {
	if v == nil {
		return "default"
	}
	return fmt.Sprint(*v)
}

// getLimits serves GET /api/v1/tenants/{id}/limits.
func (a *API) getLimits(w http.ResponseWriter, r *http.Request, _ caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	l, err := a.cfg.Store.GetLimits(r.Context(), id)
	if err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	writeJSON(w, http.StatusOK, toLimitsJSON(l))
	return nil
}

// putLimits serves PUT /api/v1/tenants/{id}/limits. It merges the request
// into the stored limits, has Hooks.ApplyLimits validate and apply the
// result live, then stores it; if storing fails it applies the previous
// limits again. It answers the full stored limits.
func (a *API) putLimits(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	var req limitsRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	fields := req.fields()
	var names []string
	for _, f := range fields {
		if !f.isSet {
			continue
		}
		names = append(names, f.name)
		if !f.valid() {
			return invalidArgument("%s must be a finite number >= 0 (or null for the server default)", f.name)
		}
	}
	if len(names) == 0 {
		return invalidArgument("no limits given; set any of rate_per_second, burst, reserved_resources, max_resources, reserved_cells, max_cells, max_streams, max_leases")
	}

	ctx := r.Context()
	unlock, err := a.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	prev, err := a.cfg.Store.GetLimits(ctx, id)
	if err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	merged := prev
	var changes []string
	for _, f := range fields {
		if f.isSet {
			f.apply(&merged)
			changes = append(changes, fmt.Sprintf("%s %s -> %s", f.name, f.show(prev), f.show(merged)))
		}
	}
	if err := checkReservations(merged); err != nil {
		return err
	}
	if err := a.cfg.Hooks.ApplyLimits(id, merged); err != nil {
		if errors.Is(err, ErrInvalidLimits) {
			return invalidArgument("%s", err.Error())
		}
		return fmt.Errorf("apply limits: %w", err)
	}
	if err := a.cfg.Store.PutLimits(ctx, id, merged); err != nil {
		if rerr := a.cfg.Hooks.ApplyLimits(id, prev); rerr != nil {
			a.log.ErrorContext(ctx, "limits applied live but not stored, and restoring the previous ones failed",
				"tenant", id, "err", rerr)
		}
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	a.audit(ctx, c, id, actionLimitsPut, id, strings.Join(changes, ", "))
	writeJSON(w, http.StatusOK, toLimitsJSON(merged))
	return nil
}

// checkReservations refuses a reservation above its own ceiling.
func checkReservations(l store.Limits) error {
	for _, p := range []struct {
		reserved, max *int64
		rname, mname  string
	}{
		{l.ReservedResources, l.MaxResources, "reserved_resources", "max_resources"},
		{l.ReservedCells, l.MaxCells, "reserved_cells", "max_cells"},
	} {
		if p.reserved != nil && p.max != nil && *p.reserved > *p.max {
			return invalidArgument("%s %d exceeds %s %d", p.rname, *p.reserved, p.mname, *p.max)
		}
	}
	return nil
}
