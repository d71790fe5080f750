package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/tenants"
)

// Groups is the server's side of tenant-sharded groups. Nil in Config
// means the server does not shard (SQLite, or a server without --ha):
// every tenant is served here, and a move is refused.
type Groups interface {
	// Group names this server's group.
	Group() string
	// List returns every group the store knows, with its epoch and its
	// number of tenants.
	List(ctx context.Context) ([]store.GroupInfo, error)
	// Holds returns what this server holds in memory for its group.
	Holds() Holdings
	// MoveTenant moves tenant from this server's group to group to: stop
	// serving it, make its state durable, hand it over in one fenced
	// transaction and let go of it. It returns how long the tenant's calls
	// were refused here. Errors: *tenants.ElsewhereError if this group
	// does not serve the tenant, store.ErrNotFound, store.ErrInvalid (a
	// bad or the same group), store.ErrFenced (this server was deposed).
	MoveTenant(ctx context.Context, tenant, to string) (refused time.Duration, err error)
}

// Holdings is what an active server holds for its group.
type Holdings struct {
	Tenants   int   `json:"tenants"`
	Resources int64 `json:"resources"`
	Cells     int64 `json:"cells"`
}

const (
	actionTenantMove = "tenant.move"
	// codeTenantElsewhere: the tenant is served by another group of
	// servers; send the request to that group's active server.
	codeTenantElsewhere = "tenant_elsewhere"
)

// checkServed refuses a change of a tenant that another group serves: its
// in-memory state (pool, limits in force, cached credentials) lives on
// that group's active server, which the change must reach. Unknown and
// deleted tenants pass, for the route to answer them.
func (a *API) checkServed(ctx context.Context, tenant string) error {
	if a.cfg.Groups == nil || tenant == "" {
		return nil
	}
	t, err := a.cfg.Store.GetTenant(ctx, tenant)
	if err != nil || t.Status == store.StatusDeleted {
		return nil
	}
	if g := a.cfg.Groups.Group(); t.Group != g {
		return elsewhere(tenant, t.Group, g)
	}
	return nil
}

// elsewhere is the refusal of a change of a tenant this server does not
// serve: placed on another group, or on this server's own group but not
// taken in here yet (a move to it not picked up by the placement check),
// or on a group not known.
func elsewhere(tenant, placed, here string) *apiError {
	var msg string
	switch placed {
	case here:
		msg = fmt.Sprintf("tenant %q is placed on this server's group %q but this server does not serve it yet: it takes the tenants placed on its group in at its next placement check (--placement-interval); retry shortly", tenant, here)
	case "":
		msg = fmt.Sprintf("tenant %q is not served by this server's group %q: send the request through the front end, which routes it to the tenant's group", tenant, here)
	default:
		msg = fmt.Sprintf("tenant %q is served by group %q, not by this server's group %q: send the request to that group's active server", tenant, placed, here)
	}
	return &apiError{http.StatusConflict, codeTenantElsewhere, msg}
}

// moveRequest is the body of POST /api/v1/tenants/{id}/move.
type moveRequest struct {
	Group string `json:"group"`
}

// moveTenant serves POST /api/v1/tenants/{id}/move {"group": "..."}: the
// live move of a tenant to another group, answered once the handover
// committed with the tenant as it is now placed, the group it left and how
// long its calls were refused here.
func (a *API) moveTenant(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	var req moveRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := store.ValidateGroup(req.Group); err != nil {
		return invalidArgument("group %s: want a lowercase letter, then up to %d of [a-z0-9-]", shortQuote(req.Group), store.MaxGroupLen-1)
	}
	if a.cfg.Groups == nil {
		return invalidArgument("this server does not shard tenants over groups: moves need servers started with --ha (and --group) on a PostgreSQL store")
	}
	from := a.cfg.Groups.Group()
	refused, err := a.cfg.Groups.MoveTenant(r.Context(), id, req.Group)
	var ee *tenants.ElsewhereError
	switch {
	case errors.As(err, &ee):
		return elsewhere(id, ee.Group, from)
	case errors.Is(err, store.ErrNotFound):
		return &apiError{http.StatusNotFound, codeNotFound, fmt.Sprintf("tenant %q not found", id)}
	case errors.Is(err, store.ErrInvalid):
		return invalidArgument("tenant %q is already on group %q", id, req.Group)
	case errors.Is(err, store.ErrFenced):
		return &apiError{http.StatusConflict, codeConflict,
			fmt.Sprintf("tenant %q was not moved: this server is no longer the active server of group %q, or the tenant left it meanwhile", id, from)}
	case err != nil:
		return err
	}
	a.audit(r.Context(), c, id, actionTenantMove, id,
		fmt.Sprintf("from=%s to=%s refused_ms=%d", strconv.Quote(from), strconv.Quote(req.Group), refused.Milliseconds()))
	t, err := a.cfg.Store.GetTenant(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Tenant    tenantJSON `json:"tenant"`
		From      string     `json:"from"`
		RefusedMS int64      `json:"refused_ms"`
	}{toTenantJSON(t), from, refused.Milliseconds()})
	return nil
}

// groupJSON is one group in GET /api/v1/groups.
type groupJSON struct {
	Name    string    `json:"name"`
	Epoch   uint32    `json:"epoch"`
	Tenants int       `json:"tenants"`
	This    bool      `json:"this_server"`
	Holds   *Holdings `json:"holds,omitempty"`
}

// listGroups serves GET /api/v1/groups: every group with its epoch and
// number of tenants, and for this server's own group what it holds in
// memory. A server that does not shard lists the default group alone.
func (a *API) listGroups(w http.ResponseWriter, r *http.Request, _ caller) error {
	out := struct {
		Groups []groupJSON `json:"groups"`
	}{[]groupJSON{}}
	if a.cfg.Groups == nil {
		ts, err := a.cfg.Store.ListTenants(r.Context(), store.TenantFilter{})
		if err != nil {
			return err
		}
		out.Groups = append(out.Groups, groupJSON{Name: store.DefaultGroup, Tenants: len(ts), This: true})
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	gs, err := a.cfg.Groups.List(r.Context())
	if err != nil {
		return err
	}
	for _, g := range gs {
		j := groupJSON{Name: g.Name, Epoch: g.Epoch, Tenants: g.Tenants}
		if g.Name == a.cfg.Groups.Group() {
			h := a.cfg.Groups.Holds()
			j.This, j.Holds = true, &h
		}
		out.Groups = append(out.Groups, j)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
