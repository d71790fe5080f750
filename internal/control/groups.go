package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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
	// SetState drains, retires or reopens a known group
	// (store.Groups.SetGroupState).
	SetState(ctx context.Context, group string, state store.GroupState) (store.GroupInfo, error)
	// RecoverTenant re-places a tenant stranded on a group that has no
	// active server onto group to (store.Groups.RecoverTenant).
	RecoverTenant(ctx context.Context, tenant, to string) (store.Recovered, error)
}

// Holdings is what an active server holds for its group.
type Holdings struct {
	Tenants   int   `json:"tenants"`
	Resources int64 `json:"resources"`
	Cells     int64 `json:"cells"`
}

const (
	actionTenantMove    = "tenant.move"
	actionTenantRecover = "tenant.recover"
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
	case errors.As(err, new(*store.GroupUnavailableError)):
		return a.groupRefused(r.Context(), err)
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
	Name string `json:"name"`
	// State: active (takes new tenants), draining (keeps its tenants,
	// takes no new one), retired (none).
	State store.GroupState `json:"state"`
	// ActiveServer: a server of the group holds its leader lock now.
	ActiveServer bool      `json:"active_server"`
	Epoch        uint32    `json:"epoch"`
	Tenants      int       `json:"tenants"`
	ChangedAt    time.Time `json:"state_changed_at,omitzero"`
	This         bool      `json:"this_server"`
	Holds        *Holdings `json:"holds,omitempty"`
}

func (a *API) toGroupJSON(g store.GroupInfo) groupJSON {
	j := groupJSON{Name: g.Name, State: g.State, ActiveServer: g.Live, Epoch: g.Epoch, Tenants: g.Tenants, ChangedAt: g.ChangedAt}
	if j.State == "" {
		j.State = "unregistered"
	}
	if a.cfg.Groups != nil && g.Name == a.cfg.Groups.Group() {
		h := a.cfg.Groups.Holds()
		j.This, j.Holds = true, &h
	}
	return j
}

// listGroups serves GET /api/v1/groups: every known group with its state,
// whether it has an active server, its epoch and number of tenants, and
// for this server's own group what it holds in memory. A server that does
// not shard lists the default group alone.
func (a *API) listGroups(w http.ResponseWriter, r *http.Request, _ caller) error {
	out := struct {
		Groups []groupJSON `json:"groups"`
	}{[]groupJSON{}}
	if a.cfg.Groups == nil {
		ts, err := a.cfg.Store.ListTenants(r.Context(), store.TenantFilter{})
		if err != nil {
			return err
		}
		out.Groups = append(out.Groups, groupJSON{Name: store.DefaultGroup, State: store.GroupActive, ActiveServer: true, Tenants: len(ts), This: true})
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	gs, err := a.cfg.Groups.List(r.Context())
	if err != nil {
		return err
	}
	for _, g := range gs {
		out.Groups = append(out.Groups, a.toGroupJSON(g))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// notSharding refuses a group route on a server that does not shard.
func notSharding() error {
	return invalidArgument("this server does not shard tenants over groups: groups need servers started with --ha (and --group) on a PostgreSQL store")
}

// groupName returns the {name} of the request's path, or a 400.
func groupName(r *http.Request) (string, error) {
	g := r.PathValue("name")
	if store.ValidateGroup(g) != nil {
		return "", invalidArgument("group %s: want a lowercase letter, then up to %d of [a-z0-9-]", shortQuote(g), store.MaxGroupLen-1)
	}
	return g, nil
}

// knownGroups describes every known group for an error message, e.g.
// `b (draining, active server, 2 tenants), default (active, active server,
// 5 tenants)`; "none" if the list cannot be read.
func (a *API) knownGroups(ctx context.Context) string {
	if a.cfg.Groups == nil {
		return store.DefaultGroup
	}
	gs, err := a.cfg.Groups.List(ctx)
	if err != nil || len(gs) == 0 {
		return "(the list could not be read)"
	}
	var b strings.Builder
	for i, g := range gs {
		if i > 0 {
			b.WriteString(", ")
		}
		state, server := string(g.State), "active server"
		if state == "" {
			state = "unregistered"
		}
		if !g.Live {
			server = "no active server"
		}
		fmt.Fprintf(&b, "%s (%s, %s, %s)", g.Name, state, server, tenantsCount(g.Tenants))
	}
	return b.String()
}

// tenantsCount is "1 tenant", "n tenants".
func tenantsCount(n int) string {
	if n == 1 {
		return "1 tenant"
	}
	return strconv.Itoa(n) + " tenants"
}

// groupRefused answers a *store.GroupUnavailableError: why the group
// cannot take a tenant, and the known groups. Nothing was changed.
func (a *API) groupRefused(ctx context.Context, err error) error {
	var ge *store.GroupUnavailableError
	if !errors.As(err, &ge) {
		return err
	}
	known := a.knownGroups(ctx)
	switch ge.Reason {
	case store.GroupUnknown:
		return invalidArgument("group %q is not a known group (a group becomes known when one of its servers first becomes active); nothing was changed; known groups: %s", ge.Group, known)
	case string(store.GroupDraining), string(store.GroupRetired):
		return conflict("group %q is %s: it takes no new tenants (PUT /api/v1/groups/%s {\"state\":\"active\"} reopens it); nothing was changed; known groups: %s", ge.Group, ge.Reason, ge.Group, known)
	case store.GroupNoServer:
		return conflict("group %q has no active server now: a tenant placed there would not be served; nothing was changed; known groups: %s", ge.Group, known)
	}
	if ge.Group == "" {
		return conflict("no known group can take a new tenant (each is draining, retired or without an active server); nothing was changed; name a group, or reopen one; known groups: %s", known)
	}
	return conflict("group %q cannot take tenants (%s); nothing was changed; known groups: %s", ge.Group, ge.Reason, known)
}

// canTake refuses (groupRefused) a group that is not known, active and
// with an active server now.
func (a *API) canTake(ctx context.Context, group string) error {
	gs, err := a.cfg.Groups.List(ctx)
	if err != nil {
		return err
	}
	reason := store.GroupUnknown
	for _, g := range gs {
		switch {
		case g.Name != group || g.State == "":
		case g.State != store.GroupActive:
			reason = string(g.State)
		case !g.Live:
			reason = store.GroupNoServer
		default:
			return nil
		}
	}
	return a.groupRefused(ctx, &store.GroupUnavailableError{Group: group, Reason: reason})
}

// setGroupRequest is the body of PUT /api/v1/groups/{name}.
type setGroupRequest struct {
	State store.GroupState `json:"state"`
}

// setGroup serves PUT /api/v1/groups/{name} {"state": "..."}: drain
// (draining: the group keeps its tenants and takes no new one), retire
// (retired: only once no tenant is placed on it) or reopen (active) a
// known group. Any active server does it; it is logged, with the actor.
func (a *API) setGroup(w http.ResponseWriter, r *http.Request, c caller) error {
	name, err := groupName(r)
	if err != nil {
		return err
	}
	var req setGroupRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if !store.ValidGroupState(req.State) {
		return invalidArgument("state %s: want active, draining or retired", shortQuote(string(req.State)))
	}
	if a.cfg.Groups == nil {
		return notSharding()
	}
	if req.State == store.GroupRetired && name == store.DefaultGroup {
		return invalidArgument("the default group cannot be retired: the front end sends every request without a tenant to it")
	}
	g, err := a.cfg.Groups.SetState(r.Context(), name, req.State)
	switch {
	case errors.As(err, new(*store.GroupUnavailableError)):
		return notFound("group %q is not a known group; known groups: %s", name, a.knownGroups(r.Context()))
	case errors.Is(err, store.ErrConflict):
		n := 0
		if ts, lerr := a.cfg.Store.ListTenants(r.Context(), store.TenantFilter{Group: name}); lerr == nil {
			n = len(ts)
		}
		return conflict("group %q still has %s placed on it: drain it, move them away (GET /api/v1/tenants?group=%s lists them), then retire it", name, tenantsCount(n), name)
	case err != nil:
		return err
	}
	a.log.Info("group state set", "group", name, "state", req.State, "actor", c.actor())
	writeJSON(w, http.StatusOK, a.toGroupJSON(g))
	return nil
}

// recoverRequest is the body of POST /api/v1/groups/{name}/recover.
type recoverRequest struct {
	Tenant string `json:"tenant"`
}

// recoverTenant serves POST /api/v1/groups/{name}/recover {"tenant":
// "..."}: re-place a tenant stranded on a group that has no active server
// onto group {name}, which must be active with an active server. Any
// active server does it (the path names no tenant, so the front end sends
// it to the default group). The stranded group's epoch is raised (a server
// of it still running on its old epoch can write nothing more); the
// target's active server restores the tenant from the store, every
// journaled lease included. Audited as tenant.recover.
func (a *API) recoverTenant(w http.ResponseWriter, r *http.Request, c caller) error {
	to, err := groupName(r)
	if err != nil {
		return err
	}
	var req recoverRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := checkTenantID(req.Tenant); err != nil {
		return err
	}
	if a.cfg.Groups == nil {
		return notSharding()
	}
	rec, err := a.cfg.Groups.RecoverTenant(r.Context(), req.Tenant, to)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("tenant %q not found", req.Tenant)
	case errors.As(err, new(*store.GroupUnavailableError)):
		return a.groupRefused(r.Context(), err)
	case errors.Is(err, store.ErrInvalid):
		return invalidArgument("tenant %q is already on group %q", req.Tenant, to)
	case errors.Is(err, store.ErrConflict):
		from := "its group"
		if t, gerr := a.cfg.Store.GetTenant(r.Context(), req.Tenant); gerr == nil {
			from = strconv.Quote(t.Group)
		}
		return conflict("tenant %q was not recovered: group %s has an active server, which serves it; move it instead (POST /api/v1/tenants/%s/move, sent to that server)", req.Tenant, from, req.Tenant)
	case errors.Is(err, store.ErrFenced):
		return conflict("tenant %q was not recovered: this server is no longer the active server of its group; send the request again", req.Tenant)
	case err != nil:
		return err
	}
	a.audit(r.Context(), c, req.Tenant, actionTenantRecover, req.Tenant,
		fmt.Sprintf("from=%s to=%s fenced_epoch=%d", strconv.Quote(rec.From), strconv.Quote(to), rec.FencedEpoch))
	t, err := a.cfg.Store.GetTenant(r.Context(), req.Tenant)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Tenant      tenantJSON `json:"tenant"`
		From        string     `json:"from"`
		FencedEpoch uint32     `json:"fenced_epoch"`
	}{toTenantJSON(t), rec.From, rec.FencedEpoch})
	return nil
}
