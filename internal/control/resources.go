package control

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/tenants"
)

// A resource of a tenant's pool (docs/control-plane.md): its view, and the
// quarantine an operator or the tenant's admin imposes or lifts. The pool
// is the tenant's active server's: the routes reach it through Hooks, on
// the server that serves the tenant (a change elsewhere is refused as for
// any change of the tenant).

// statsJSON is a resource's statistics over all contexts or in one.
type statsJSON struct {
	Context             string     `json:"context,omitempty"`
	SuccessRate         float64    `json:"success_rate"`
	Successes           float64    `json:"successes"`
	Failures            float64    `json:"failures"`
	RecentSuccesses     int        `json:"recent_successes"`
	RecentFailures      int        `json:"recent_failures"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	Quarantine          string     `json:"quarantine"`
	BlockedUntil        *time.Time `json:"blocked_until,omitempty"`
}

// resourceJSON is a resource in responses.
type resourceJSON struct {
	ID            string            `json:"id"`
	State         string            `json:"state"`
	RetiredReason string            `json:"retired_reason,omitempty"`
	Capacity      int               `json:"capacity"`
	Labels        map[string]string `json:"labels,omitempty"`
	ActiveLeases  int               `json:"active_leases"`
	Uses          int               `json:"uses"`
	MaxUses       int               `json:"max_uses"`
	MaxAgeSeconds int64             `json:"max_age_seconds"`
	RegisteredAt  time.Time         `json:"registered_at"`
	Quarantine    string            `json:"quarantine"`
	BlockedUntil  *time.Time        `json:"blocked_until,omitempty"`
	Aggregate     statsJSON         `json:"aggregate"`
	Contexts      []statsJSON       `json:"contexts"`
}

func toStatsJSON(s pool.ContextStats) statsJSON {
	out := statsJSON{Context: s.Context, SuccessRate: s.SuccessRate, Successes: s.Successes, Failures: s.Failures,
		RecentSuccesses: s.RecentSuccesses, RecentFailures: s.RecentFailures, ConsecutiveFailures: s.ConsecutiveFailures,
		Quarantine: s.Quarantine}
	if !s.BlockedUntil.IsZero() {
		t := s.BlockedUntil.UTC()
		out.BlockedUntil = &t
	}
	return out
}

func toResourceJSON(r pool.ResourceInfo) resourceJSON {
	out := resourceJSON{ID: r.ID, State: r.State, RetiredReason: r.RetiredReason, Capacity: r.Capacity, Labels: r.Labels,
		ActiveLeases: r.ActiveLeases, Uses: r.Uses, MaxUses: r.MaxUses, MaxAgeSeconds: int64(r.MaxAge / time.Second),
		RegisteredAt: r.RegisteredAt.UTC(), Quarantine: r.Quarantine, Aggregate: toStatsJSON(r.Aggregate),
		Contexts: make([]statsJSON, 0, len(r.Contexts))}
	if !r.BlockedUntil.IsZero() {
		t := r.BlockedUntil.UTC()
		out.BlockedUntil = &t
	}
	for _, c := range r.Contexts {
		out.Contexts = append(out.Contexts, toStatsJSON(c))
	}
	return out
}

// resourceID returns the {resource} of the path, or a 400.
func resourceID(r *http.Request) (string, error) {
	id := r.PathValue("resource")
	if id == "" || len(id) > pool.MaxIDLen {
		return "", invalidArgument("resource id %s: want 1 to %d bytes", shortQuote(id), pool.MaxIDLen)
	}
	return id, nil
}

// fromPool turns the pool's not-found and invalid-argument errors into
// client errors, and a change not yet durable into a 503.
func fromPool(err error) error {
	switch {
	case errors.Is(err, pool.ErrNotFound):
		return notFound("%v", err)
	case errors.Is(err, pool.ErrInvalidArgument):
		return invalidArgument("%v", err)
	case errors.Is(err, tenants.ErrNotDurable):
		return &apiError{http.StatusServiceUnavailable, codeUnavailable,
			"the change is made but not yet durable (the store did not take it); the next checkpoint writes it, or retry to confirm"}
	}
	return err
}

// getResource serves GET /api/v1/tenants/{id}/resources/{resource}.
func (a *API) getResource(w http.ResponseWriter, r *http.Request, _ caller) error {
	tenant, err := tenantID(r)
	if err != nil {
		return err
	}
	id, err := resourceID(r)
	if err != nil {
		return err
	}
	info, err := a.cfg.Hooks.Resource(tenant, id)
	if err != nil {
		return fromPool(err)
	}
	writeJSON(w, http.StatusOK, toResourceJSON(info))
	return nil
}

// quarantineRequest is the body of POST .../quarantine.
type quarantineRequest struct {
	// Seconds is the quarantine's length; left out, the tenant's
	// cooldown_max_seconds.
	Seconds *float64 `json:"seconds"`
	// Reason goes into the event and the audit trail.
	Reason string `json:"reason"`
}

// liftRequest is the body of POST .../lift.
type liftRequest struct {
	Reason string `json:"reason"`
}

// maxReason bounds a reason's bytes.
const maxReason = 256

// quarantineResource serves POST /api/v1/tenants/{id}/resources/{resource}/quarantine.
func (a *API) quarantineResource(w http.ResponseWriter, r *http.Request, c caller) error {
	var req quarantineRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	var d time.Duration
	if req.Seconds != nil {
		s := *req.Seconds
		if math.IsNaN(s) || s != math.Trunc(s) || s < 1 || s > pool.MaxCooldownMax.Seconds() {
			return invalidArgument("seconds %v: want a whole number of seconds from 1 to the tenant's cooldown_max_seconds (or leave it out for that maximum)", s)
		}
		d = time.Duration(s) * time.Second
	}
	return a.changeQuarantine(w, r, c, true, d, req.Reason)
}

// liftResource serves POST /api/v1/tenants/{id}/resources/{resource}/lift.
func (a *API) liftResource(w http.ResponseWriter, r *http.Request, c caller) error {
	var req liftRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	return a.changeQuarantine(w, r, c, false, 0, req.Reason)
}

// changeQuarantine imposes or lifts a quarantine through Hooks, audits
// it, and answers the resource's state.
func (a *API) changeQuarantine(w http.ResponseWriter, r *http.Request, c caller, impose bool, d time.Duration, reason string) error {
	tenant, err := tenantID(r)
	if err != nil {
		return err
	}
	id, err := resourceID(r)
	if err != nil {
		return err
	}
	if len(reason) > maxReason || !cleanReason(reason) {
		return invalidArgument("reason: want at most %d bytes of text without control characters", maxReason)
	}
	if _, err := a.cfg.Store.GetTenant(r.Context(), tenant); err != nil {
		return fromStore(err, fmt.Sprintf("tenant %q", tenant))
	}
	why := c.actor()
	if reason != "" {
		why += ": " + reason
	}
	info, err := a.cfg.Hooks.Quarantine(r.Context(), tenant, id, impose, d, why)
	if err != nil && !errors.Is(err, tenants.ErrNotDurable) {
		return fromPool(err)
	}
	action, detail := actionLift, "lifted"
	if impose {
		action, detail = actionQuarantine, "quarantined until "+info.BlockedUntil.UTC().Format(time.RFC3339)
	}
	if reason != "" {
		detail += "; " + reason
	}
	a.audit(r.Context(), c, tenant, action, id, detail)
	if err != nil {
		return fromPool(err)
	}
	writeJSON(w, http.StatusOK, toResourceJSON(info))
	return nil
}

// cleanReason reports whether s is valid UTF-8 without control characters.
func cleanReason(s string) bool {
	for _, r := range s {
		if r == 0xFFFD || r < 0x20 || r == 0x7F {
			return false
		}
	}
	return true
}
