package control

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/statuspage"
	"github.com/repool/repool/internal/store"
)

// The status pages (docs/server.md#status-pages): read-only HTML on the
// server's HTTP port for a person with a control-plane token. GET /status
// shows this server, the groups and the tenants (operator); GET
// /status/tenants/{id} shows one tenant's pool, the worst resources first
// (operator, or the tenant's own admin or viewer).
//
// A browser cannot put a bearer header on a page load, so the page takes
// the token in a form (POST /status/login) and keeps it in a cookie that
// is HttpOnly (no script reads it), SameSite=Strict (no other site's page
// makes the browser send it), limited to /status (the JSON API never
// reads it) and Secure when the port serves TLS; it ends with the token.
// A client that can set headers sends Authorization: Bearer instead. The
// login refuses a form posted from another origin (Origin, Sec-Fetch-Site).

// Status page limits.
const (
	// pageScan bounds the resources a tenant page reads from the pool.
	pageScan = 10000
	// pageShown bounds the resources a tenant page lists, worst first.
	pageShown = 200
	// maxLoginBody bounds the login form.
	maxLoginBody = 16 << 10
	// statusCookie holds the page's token.
	statusCookie = "repool_status"
)

// StatusPages returns the handler of the status pages. It serves full paths
// (/status, /status/...), so the server mounts it on both.
func (a *API) StatusPages() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", a.overviewPage)
	mux.HandleFunc("GET /status/tenants/{id}", a.tenantPage)
	mux.HandleFunc("POST /status/login", a.login)
	mux.HandleFunc("POST /status/logout", a.logout)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.pageError(w, r, http.StatusNotFound, "There is no page at "+r.URL.Path+".")
	})
	return mux
}

var (
	loginPage = statuspage.New("login", `{{define "body"}}
<h1>repool server status</h1>
{{if .Message}}<p class="bad">{{.Message}}</p>{{end}}
<p>Sign in with a control-plane token of role operator, tenant-admin or tenant-viewer
(<code>server admin-token --role operator</code> prints one). The page keeps it in a cookie
for this path only, until the token expires or you sign out.</p>
<form method="post" action="/status/login">
<label>Token <input type="password" name="token" autocomplete="off" required></label>
<button type="submit">Sign in</button>
</form>{{end}}`, nil, nil)

	messagePage = statuspage.New("message", `{{define "body"}}
<h1>repool server status</h1>
<p class="bad">{{.Message}}</p>
<p><a href="/status">Back to the overview</a></p>
{{template "signout"}}{{end}}
{{define "signout"}}<form method="post" action="/status/logout"><button type="submit">Sign out</button></form>{{end}}`, nil, nil)

	overviewPage = statuspage.New("overview", `{{define "body"}}
<h1>repool server status</h1>
<p class="sub">This server: <strong>{{.Self}}</strong>{{if .Group}}, group <strong>{{.Group}}</strong>{{end}}. Signed in as {{.Actor}}.</p>
<h2>Groups</h2>
<table><tr><th>group</th><th>state</th><th>leader</th><th>epoch</th><th>tenants</th><th>this server's group</th></tr>
{{range .Groups}}<tr><td>{{.Name}}</td><td>{{.State}}</td>
<td class="{{if .ActiveServer}}good{{else}}bad{{end}}">{{if .ActiveServer}}a server holds the lock{{else}}no active server{{end}}</td>
<td class="num">{{.Epoch}}</td><td class="num">{{.Tenants}}</td>
<td>{{if .This}}yes{{with .Holds}}: holds {{.Tenants}} tenants, {{.Resources}} resources, {{.Cells}} cells{{end}}{{end}}</td></tr>
{{end}}</table>
<h2>Tenants</h2>
<table><tr><th>tenant</th><th>name</th><th>status</th><th>group</th><th>created</th></tr>
{{range .Tenants}}<tr><td><a href="{{.Link}}">{{.ID}}</a></td><td>{{.Name}}</td>
<td class="{{if eq .Status "active"}}good{{else}}warn{{end}}">{{.Status}}</td><td>{{.Group}}</td><td>{{when .CreatedAt}}</td></tr>
{{else}}<tr><td colspan="5" class="muted">no tenants</td></tr>{{end}}</table>
{{template "signout"}}{{end}}
{{define "signout"}}<form method="post" action="/status/logout"><button type="submit">Sign out</button></form>{{end}}`, nil, nil)

	tenantPageTmpl = statuspage.New("tenant", `{{define "body"}}
<nav>{{if .Operator}}<a href="/status">Overview</a>{{end}}</nav>
<h1>Tenant {{.Tenant.ID}}</h1>
<p class="sub">{{.Tenant.Name}} &middot; status {{.Tenant.Status}}{{if .Tenant.Group}} &middot; group {{.Tenant.Group}}{{end}} &middot; this server: {{.Self}} &middot; signed in as {{.Actor}}</p>
{{if .Elsewhere}}<p class="warn">{{.Elsewhere}}</p>
{{else if .NoPool}}<p class="muted">This server ({{.Self}}) holds no pool of this tenant: a tenant's pool is held by its group's active server, once the tenant has registered a resource.</p>
{{else}}
<table>
<tr><th>resources</th><td class="num">{{.Total}}</td></tr>
<tr><th>quarantined now</th><td class="num {{if .Quarantined}}bad{{end}}">{{.Quarantined}}</td></tr>
<tr><th>retired</th><td class="num">{{.Retired}}</td></tr>
<tr><th>leases held</th><td class="num">{{.Leases}}</td></tr>
</table>
{{if .Truncated}}<p class="warn">The pool holds more than {{.Scan}} resources: this page ranks the first {{.Scan}} by id.</p>{{end}}
<h2>Resources, worst first{{if .Cut}} (the worst {{len .Rows}}){{end}}</h2>
<p class="muted">Long-run: the decayed success probability the pool selects by (prior included). Recent: the latest outcomes, at most 63 per context, counted plainly.</p>
<table>
<tr><th>resource</th><th>state</th><th>quarantine</th><th>leases held</th><th>long-run success</th><th>recent success</th><th>per context</th></tr>
{{range .Rows}}<tr>
<td><code>{{.ID}}</code></td>
<td>{{.State}}{{if .RetiredReason}}: {{.RetiredReason}}{{end}}</td>
<td class="{{if .Quarantined}}bad{{end}}">{{.Quarantine}}</td>
<td class="num">{{.Leases}} / {{.Capacity}}</td>
<td class="num">{{pct .LongRun}}</td>
<td class="num">{{.Recent}}</td>
<td>{{if .Contexts}}<table>
<tr><th>context</th><th>long-run</th><th>recent</th><th>failures in a row</th><th>quarantine</th></tr>
{{range .Contexts}}<tr><td><code>{{.Name}}</code></td><td class="num">{{pct .LongRun}}</td><td class="num">{{.Recent}}</td>
<td class="num">{{.InARow}}</td><td class="{{if .Quarantined}}bad{{end}}">{{.Quarantine}}</td></tr>
{{end}}</table>{{else}}<span class="muted">no outcomes yet</span>{{end}}</td>
</tr>
{{else}}<tr><td colspan="7" class="muted">no resources</td></tr>{{end}}
</table>
{{end}}
<form method="post" action="/status/logout"><button type="submit">Sign out</button></form>{{end}}`, nil, nil)
)

// pageCaller authenticates a page request: its Authorization header if it
// has one, else the page's cookie.
func (a *API) pageCaller(r *http.Request) (caller, bool) {
	if r.Header.Get("Authorization") != "" {
		c, err := a.authenticate(r)
		return c, err == nil
	}
	ck, err := r.Cookie(statusCookie)
	if err != nil || ck.Value == "" {
		return caller{}, false
	}
	c, _, err := a.verify(r, ck.Value)
	return c, err == nil
}

// render writes a page and logs a template failure.
func (a *API) render(w http.ResponseWriter, r *http.Request, p *statuspage.Page, code int, title string, data any) {
	if err := p.Render(w, code, title, data); err != nil {
		a.log.ErrorContext(r.Context(), "status page not rendered", "path", r.URL.Path, "err", err)
	}
}

// pageError answers a refusal or a failure as a page.
func (a *API) pageError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	a.render(w, r, messagePage, code, "repool: "+http.StatusText(code), struct{ Message string }{msg})
}

// signIn answers the login form, 401: no token, or one not accepted.
func (a *API) signIn(w http.ResponseWriter, r *http.Request, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="repool"`)
	a.render(w, r, loginPage, http.StatusUnauthorized, "repool: sign in", struct{ Message string }{msg})
}

// pageAuth authenticates and checks that the role may read pages; it
// answers the refusal itself.
func (a *API) pageAuth(w http.ResponseWriter, r *http.Request) (caller, bool) {
	c, ok := a.pageCaller(r)
	if !ok {
		msg := ""
		if r.Header.Get("Authorization") != "" || hasCookie(r) {
			msg = "The token is invalid or has expired: sign in again."
		}
		a.signIn(w, r, msg)
		return c, false
	}
	if c.role == RoleMetrics {
		a.pageError(w, r, http.StatusForbidden, "A token of role metrics reads /metrics only; sign in with an operator or tenant token.")
		return c, false
	}
	return c, true
}

func hasCookie(r *http.Request) bool {
	ck, err := r.Cookie(statusCookie)
	return err == nil && ck.Value != ""
}

// sameOrigin reports whether a form post comes from this server's own
// pages: the Origin a browser sends on every POST names this host, and
// Sec-Fetch-Site, when sent, says same-origin. A client that sends
// neither (curl) is not a browser another site could drive.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// login serves POST /status/login: a form with the token; on success it
// sets the page's cookie and sends the browser to its page.
func (a *API) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		a.pageError(w, r, http.StatusForbidden, "The sign-in form was posted from another site; open /status on this server and sign in there.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		a.pageError(w, r, http.StatusBadRequest, "The sign-in form could not be read: want a form with one field, token, under 16 KiB.")
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	c, exp, err := a.verify(r, tok)
	if tok == "" || err != nil {
		a.signIn(w, r, "The token is not accepted: it is not a control-plane token of this server's store, or it has expired.")
		return
	}
	if c.role == RoleMetrics {
		a.pageError(w, r, http.StatusForbidden, "A token of role metrics reads /metrics only; sign in with an operator or tenant token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: statusCookie, Value: tok, Path: "/status", Expires: exp,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	statuspage.SetHeaders(w.Header())
	http.Redirect(w, r, home(c), http.StatusSeeOther)
}

// logout serves POST /status/logout: it clears the page's cookie.
func (a *API) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		a.pageError(w, r, http.StatusForbidden, "The sign-out form was posted from another site.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: statusCookie, Value: "", Path: "/status", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	statuspage.SetHeaders(w.Header())
	http.Redirect(w, r, "/status", http.StatusSeeOther)
}

// home is a caller's first page: the overview for the operator, its
// tenant's page for a tenant role.
func home(c caller) string {
	if c.role == RoleOperator {
		return "/status"
	}
	return "/status/tenants/" + url.PathEscape(c.tenant)
}

// self describes this server for the pages.
func (a *API) self() (role, group string) {
	role = "serving"
	if a.cfg.Self != nil {
		role = a.cfg.Self()
	}
	if a.cfg.Groups != nil {
		group = a.cfg.Groups.Group()
	}
	return role, group
}

// tenantRow is a tenant on the overview.
type tenantRow struct {
	tenantJSON
	Link string
}

// overviewPage serves GET /status: this server, the groups with whether
// each has an active server, and the tenants (operator only; a tenant's
// token is sent to its tenant's page).
func (a *API) overviewPage(w http.ResponseWriter, r *http.Request) {
	c, ok := a.pageAuth(w, r)
	if !ok {
		return
	}
	if c.role != RoleOperator {
		statuspage.SetHeaders(w.Header())
		http.Redirect(w, r, home(c), http.StatusSeeOther)
		return
	}
	ctx, cancel := a.pageContext(r)
	defer cancel()
	ts, err := a.cfg.Store.ListTenants(ctx, store.TenantFilter{})
	if err != nil {
		a.pageFailed(w, r, err)
		return
	}
	var groups []groupJSON
	if a.cfg.Groups == nil {
		groups = []groupJSON{{Name: store.DefaultGroup, State: store.GroupActive, ActiveServer: true, Tenants: len(ts), This: true}}
	} else {
		gs, err := a.cfg.Groups.List(ctx)
		if err != nil {
			a.pageFailed(w, r, err)
			return
		}
		for _, g := range gs {
			groups = append(groups, a.toGroupJSON(g))
		}
	}
	rows := make([]tenantRow, 0, len(ts))
	for _, t := range ts {
		rows = append(rows, tenantRow{toTenantJSON(t), "/status/tenants/" + url.PathEscape(t.ID)})
	}
	role, group := a.self()
	a.render(w, r, overviewPage, http.StatusOK, "repool server status", struct {
		Self, Group, Actor string
		Groups             []groupJSON
		Tenants            []tenantRow
	}{role, group, c.actor(), groups, rows})
}

// pageContext bounds a page's store calls as the API's requests are.
func (a *API) pageContext(r *http.Request) (context.Context, context.CancelFunc) {
	if a.cfg.RequestTimeout > 0 {
		return context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
	}
	return context.WithCancel(r.Context())
}

// pageFailed answers a failure of the store, logged with its text.
func (a *API) pageFailed(w http.ResponseWriter, r *http.Request, err error) {
	a.log.ErrorContext(r.Context(), "status page failed", "path", r.URL.Path, "err", err)
	a.pageError(w, r, http.StatusServiceUnavailable, "The page could not be made: the store did not answer. The server's log says why; reload to try again.")
}

// contextRow is one context of a resource on the tenant page.
type contextRow struct {
	Name, Recent, Quarantine string
	LongRun                  float64
	InARow                   int
	Quarantined              bool
}

// resourceRow is one resource on the tenant page.
type resourceRow struct {
	ID, State, RetiredReason, Quarantine, Recent string
	Quarantined                                  bool
	Leases, Capacity                             int
	LongRun                                      float64
	Contexts                                     []contextRow
}

// quarantineText says a quarantine state in words, with its end.
func quarantineText(state string, until time.Time) string {
	switch state {
	case pool.QuarantineNone, "":
		return "none"
	case pool.QuarantineBlocked:
		return "quarantined until " + statuspage.When(until)
	case pool.QuarantineAwaitingProbe:
		return "quarantined: cooldown over, awaiting a probe lease"
	case pool.QuarantineProbing:
		return "quarantined: a probe lease is out"
	}
	return "quarantined: " + state
}

// recentText is the plain success ratio of the latest outcomes.
func recentText(s, f int) string {
	if s+f == 0 {
		return "-"
	}
	return statuspage.Percent(float64(s)/float64(s+f)) + " of " + strconv.Itoa(s+f)
}

// toResourceRow makes a resource's row; a resource whose whole or any
// context's quarantine is on counts as quarantined.
func toResourceRow(info pool.ResourceInfo) resourceRow {
	row := resourceRow{ID: info.ID, State: info.State, RetiredReason: info.RetiredReason, Leases: info.ActiveLeases,
		Capacity: info.Capacity, LongRun: info.Aggregate.SuccessRate,
		Recent: recentText(info.Aggregate.RecentSuccesses, info.Aggregate.RecentFailures)}
	var parts []string
	if info.Quarantine != pool.QuarantineNone && info.Quarantine != "" {
		row.Quarantined = true
		parts = append(parts, quarantineText(info.Quarantine, info.BlockedUntil))
	}
	for _, s := range info.Contexts {
		cr := contextRow{Name: s.Context, LongRun: s.SuccessRate, InARow: s.ConsecutiveFailures,
			Recent: recentText(s.RecentSuccesses, s.RecentFailures), Quarantine: quarantineText(s.Quarantine, s.BlockedUntil)}
		if s.Quarantine != pool.QuarantineNone && s.Quarantine != "" {
			cr.Quarantined = true
			if !row.Quarantined || len(parts) == 0 {
				parts = append(parts, "in context "+s.Context+": "+cr.Quarantine)
			}
			row.Quarantined = true
		}
		row.Contexts = append(row.Contexts, cr)
	}
	row.Quarantine = "none"
	if len(parts) > 0 {
		row.Quarantine = strings.Join(parts, "; ")
	}
	return row
}

// worstFirst orders rows: quarantined first, then by long-run success
// rate, lowest first, then by id.
func worstFirst(a, b resourceRow) int {
	if a.Quarantined != b.Quarantined {
		if a.Quarantined {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.LongRun, b.LongRun); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// tenantPage serves GET /status/tenants/{id}: the tenant's pool on this
// server, its counts and its resources worst first.
func (a *API) tenantPage(w http.ResponseWriter, r *http.Request) {
	c, ok := a.pageAuth(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if err := authorize(c, tenantRead, id); err != nil {
		a.pageError(w, r, http.StatusForbidden, "This token may not read tenant "+shortQuote(id)+": it is scoped to another tenant.")
		return
	}
	ctx, cancel := a.pageContext(r)
	defer cancel()
	t, err := a.cfg.Store.GetTenant(ctx, id)
	if err == nil && t.Status == store.StatusDeleted {
		err = store.ErrNotFound
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.pageError(w, r, http.StatusNotFound, "There is no tenant "+shortQuote(id)+".")
		return
	case err != nil:
		a.pageFailed(w, r, err)
		return
	}
	role, _ := a.self()
	data := struct {
		Tenant                                    tenantJSON
		Self, Actor, Elsewhere                    string
		Operator, NoPool, Truncated, Cut          bool
		Total, Quarantined, Retired, Leases, Scan int
		Rows                                      []resourceRow
	}{Tenant: toTenantJSON(t), Self: role, Actor: c.actor(), Operator: c.role == RoleOperator, Scan: pageScan}
	if a.cfg.Groups != nil && t.Group != "" && t.Group != a.cfg.Groups.Group() {
		data.Elsewhere = "Group " + t.Group + " serves this tenant, not this server's group (" + a.cfg.Groups.Group() +
			"): open this page on that group's active server."
	} else {
		var rows []resourceRow
		after := ""
		for len(rows) < pageScan {
			infos, more, err := a.cfg.Hooks.Resources(id, after, min(1000, pageScan-len(rows)))
			if errors.Is(err, pool.ErrNotFound) {
				data.NoPool = true
				break
			}
			if err != nil {
				a.pageFailed(w, r, err)
				return
			}
			for _, info := range infos {
				row := toResourceRow(info)
				rows = append(rows, row)
				data.Leases += row.Leases
				if row.Quarantined {
					data.Quarantined++
				}
				if info.State == pool.StateRetired {
					data.Retired++
				}
			}
			if !more || len(infos) == 0 {
				break
			}
			after = infos[len(infos)-1].ID
			data.Truncated = len(rows) >= pageScan // and more follow
		}
		data.Total = len(rows)
		slices.SortFunc(rows, worstFirst)
		if len(rows) > pageShown {
			rows, data.Cut = rows[:pageShown], true
		}
		data.Rows = rows
	}
	a.render(w, r, tenantPageTmpl, http.StatusOK, "repool: tenant "+id, data)
}
