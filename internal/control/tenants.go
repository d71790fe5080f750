package control

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/repool/repool/internal/store"
)

// tenantJSON is a tenant in responses.
type tenantJSON struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	Status    store.Status `json:"status"`
	CreatedAt time.Time    `json:"created_at"`
	DeletedAt time.Time    `json:"deleted_at,omitzero"`
	// Group is the group of servers the tenant is placed on.
	Group string `json:"group,omitempty"`
}

func toTenantJSON(t store.Tenant) tenantJSON {
	return tenantJSON{t.ID, t.Name, t.Status, t.CreatedAt, t.DeletedAt, t.Group}
}

// createTenantRequest is the body of POST /api/v1/tenants.
type createTenantRequest struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Group places the tenant on a group of servers; empty: the group with
	// the fewest tenants.
	Group string `json:"group"`
}

// checkTenantID returns a 400 unless id is a valid tenant id.
func checkTenantID(id string) error {
	if store.ValidateTenantID(id) != nil {
		return invalidArgument("tenant id %s is invalid: want 1-%d characters, [a-z0-9] first, then [a-z0-9_-]", shortQuote(id), store.MaxIDLen)
	}
	return nil
}

// tenantID returns the {id} of the request's path, or a 400.
func tenantID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	return id, checkTenantID(id)
}

// checkName returns a 400 unless name can be stored as a name.
func checkName(what, name string) error {
	if err := (store.Tenant{ID: "x", Name: name}).Validate(); err != nil {
		return invalidArgument("%s: want valid UTF-8 without NUL, at most %d bytes", what, store.MaxNameLen)
	}
	return nil
}

// createTenant serves POST /api/v1/tenants.
func (a *API) createTenant(w http.ResponseWriter, r *http.Request, c caller) error {
	var req createTenantRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := checkTenantID(req.ID); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	if req.Group != "" && store.ValidateGroup(req.Group) != nil {
		return invalidArgument("group %s: want a lowercase letter, then up to %d of [a-z0-9-]", shortQuote(req.Group), store.MaxGroupLen-1)
	}
	if a.cfg.Groups == nil {
		// A server that does not shard has one group.
		if req.Group != "" && req.Group != store.DefaultGroup {
			return invalidArgument("group %s: this server does not shard tenants over groups (that needs servers started with --ha and --group on a PostgreSQL store)", shortQuote(req.Group))
		}
		req.Group = store.DefaultGroup
	}
	if a.cfg.Groups != nil && req.Group != "" {
		// The store refuses a group that is not known and active; a group
		// without an active server is refused here: its tenants would not
		// be served.
		if err := a.canTake(r.Context(), req.Group); err != nil {
			return err
		}
	}
	t, err := a.cfg.Store.CreateTenant(r.Context(), store.Tenant{ID: req.ID, Name: req.Name, Group: req.Group})
	if errors.As(err, new(*store.GroupUnavailableError)) {
		return a.groupRefused(r.Context(), err)
	}
	if errors.Is(err, store.ErrExists) {
		return &apiError{http.StatusConflict, codeAlreadyExists,
			fmt.Sprintf("tenant %q already exists (ids of deleted tenants are never reused)", req.ID)}
	}
	if err != nil {
		return err
	}
	a.audit(r.Context(), c, t.ID, actionTenantCreate, t.ID, "name="+strconv.Quote(t.Name)+" group="+strconv.Quote(t.Group))
	w.Header().Set("Location", "/api/v1/tenants/"+t.ID)
	writeJSON(w, http.StatusCreated, toTenantJSON(t))
	return nil
}

// listTenants serves GET /api/v1/tenants[?include_deleted=true][&group=G]:
// {"tenants":[...]} ordered by id; tombstones only when asked for; only
// the tenants placed on group G when it is given.
func (a *API) listTenants(w http.ResponseWriter, r *http.Request, _ caller) error {
	var f store.TenantFilter
	if s := r.URL.Query().Get("include_deleted"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return invalidArgument("include_deleted %s: want true or false", shortQuote(s))
		}
		f.IncludeDeleted = b
	}
	if g := r.URL.Query().Get("group"); g != "" {
		if store.ValidateGroup(g) != nil {
			return invalidArgument("group %s: want a lowercase letter, then up to %d of [a-z0-9-]", shortQuote(g), store.MaxGroupLen-1)
		}
		f.Group = g
	}
	ts, err := a.cfg.Store.ListTenants(r.Context(), f)
	if err != nil {
		return err
	}
	out := struct {
		Tenants []tenantJSON `json:"tenants"`
	}{make([]tenantJSON, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, toTenantJSON(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getTenant serves GET /api/v1/tenants/{id}. A deleted tenant is not found.
func (a *API) getTenant(w http.ResponseWriter, r *http.Request, _ caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	t, err := a.cfg.Store.GetTenant(r.Context(), id)
	if err == nil && t.Status == store.StatusDeleted {
		err = store.ErrNotFound
	}
	if err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	writeJSON(w, http.StatusOK, toTenantJSON(t))
	return nil
}

// deleteTenant serves DELETE /api/v1/tenants/{id}: the store deletes every
// row of the tenant, audit trail included, and keeps a tombstone; then
// Hooks.TenantDeleted runs. 204 on success.
func (a *API) deleteTenant(w http.ResponseWriter, r *http.Request, c caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	unlock, err := a.lock(r.Context())
	if err != nil {
		return err
	}
	defer unlock()
	if err := a.cfg.Store.DeleteTenant(r.Context(), id); err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	a.cfg.Hooks.TenantDeleted(id)
	// The trail went with the tenant: the log is the only record.
	a.log.InfoContext(r.Context(), "tenant deleted", "tenant", id, "actor", c.actor())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// suspendTenant serves POST /api/v1/tenants/{id}/suspend.
func (a *API) suspendTenant(w http.ResponseWriter, r *http.Request, c caller) error {
	return a.setStatus(w, r, c, store.StatusActive, store.StatusSuspended, actionTenantSuspend)
}

// reactivateTenant serves POST /api/v1/tenants/{id}/reactivate.
func (a *API) reactivateTenant(w http.ResponseWriter, r *http.Request, c caller) error {
	return a.setStatus(w, r, c, store.StatusSuspended, store.StatusActive, actionTenantReactivate)
}

// setStatus moves the tenant from one status to another, then calls
// Hooks.TenantStatusChanged and records action. A tenant not in status from
// is a 409; an unknown or deleted one a 404.
func (a *API) setStatus(w http.ResponseWriter, r *http.Request, c caller, from, to store.Status, action string) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	unlock, err := a.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	t, err := a.cfg.Store.SetTenantStatus(ctx, id, from, to)
	if errors.Is(err, store.ErrConflict) {
		// A live tenant not in status from is in status to: there are
		// only two live statuses (a deleted one is ErrNotFound).
		return conflict("tenant %q is %s, not %s", id, to, from)
	}
	if err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	a.cfg.Hooks.TenantStatusChanged(id, t.Status)
	a.audit(ctx, c, id, action, id, fmt.Sprintf("status %s -> %s", from, to))
	writeJSON(w, http.StatusOK, toTenantJSON(t))
	return nil
}

// shortQuote quotes a client-supplied value for an error message, cut to a
// readable length.
func shortQuote(s string) string {
	const show = 64
	if len(s) > show {
		return strconv.Quote(s[:show]) + "…"
	}
	return strconv.Quote(s)
}
