// Package control serves repool's control plane: an HTTP/JSON API under
// /api/v1/ to create, list, suspend, reactivate and delete tenants, to set
// their limits and their quarantine and decay policy, to issue, list and revoke their API keys and to read their
// audit trails.
//
// Every request carries a control-plane bearer token (token.AudienceControl)
// with a role: RoleOperator acts on everything, RoleTenantAdmin manages one
// tenant, RoleTenantViewer reads one tenant. Scope is checked before
// existence and before the store is touched: a tenant-scoped token asking
// about another tenant gets 403 whether that tenant exists or not.
//
// Every mutation is recorded in the tenant's audit trail, and Hooks keep the
// server's in-memory state (pools, rate limits, budgets, credential caches)
// in step with the store. Those hooks change only this process, so a server
// that is not the active one (Config.Active) refuses mutations with 503 and
// keeps serving reads. Errors are always JSON {"error":{"code","message"}};
// a dependency's error text is logged, never sent to the client.
package control

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/token"
)

// DefaultRequestTimeout bounds the store calls of one request when
// Config.RequestTimeout is zero.
const DefaultRequestTimeout = 10 * time.Second

// DefaultMaxKeysPerTenant caps a tenant's API keys that are not revoked
// when Config.MaxKeysPerTenant is zero.
const DefaultMaxKeysPerTenant = 100

// Config configures an API. Store, Signer and Hooks are required; the other
// fields have working zero values.
type Config struct {
	// Store persists tenants, limits, keys and audit entries. Required.
	Store store.Store
	// Limits are the defaults and bounds of tenants' limits. Required:
	// every default must be set.
	Limits LimitRules
	// MaxKeysPerTenant caps a tenant's API keys that are not revoked.
	// Zero means DefaultMaxKeysPerTenant.
	MaxKeysPerTenant int
	// Signer verifies the bearer tokens of requests. Required.
	Signer *token.Signer
	// Hooks keep the server's in-memory state in step with changes.
	// Required: use NopHooks{} where there is no such state (tests).
	Hooks Hooks
	// Clock stamps audit entries. Nil means clock.Real{}.
	Clock clock.Clock
	// Log receives the errors clients see only as a generic message. It
	// never receives a token or an API key. Nil discards.
	Log *slog.Logger
	// RequestTimeout bounds the store calls of one request. Zero means
	// DefaultRequestTimeout; negative means only the client's context
	// bounds them.
	RequestTimeout time.Duration
	// Active reports whether this server may change state; it is called
	// once per mutating request (POST, PUT, PATCH, DELETE) after the
	// caller is authorized. When it returns an error the request is
	// answered 503 (code "unavailable") before the store or a hook is
	// touched; read-only requests are served either way. In an
	// active/standby group the hooks change only the answering process,
	// so changes must reach the active server. Nil means always active.
	// It must be safe for concurrent use and return quickly.
	Active func() error
	// Groups is the server's side of tenant-sharded groups; nil when the
	// server does not shard.
	Groups Groups
	// Self says what this server is now, in a word or a short phrase
	// ("active", "standby", "not ready"), for the status pages. Nil means
	// "serving".
	Self func() string
}

// Validate reports the first missing required field.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("control: Config.Store is nil")
	case c.Signer == nil:
		return errors.New("control: Config.Signer is nil")
	case c.Hooks == nil:
		return errors.New("control: Config.Hooks is nil (use control.NopHooks{})")
	case c.MaxKeysPerTenant < 0:
		return errors.New("control: Config.MaxKeysPerTenant is negative")
	}
	return c.Limits.validate()
}

// withDefaults returns c with every zero optional field set to its default.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxKeysPerTenant == 0 {
		c.MaxKeysPerTenant = DefaultMaxKeysPerTenant
	}
	return c
}

// API is the control plane. It is safe for concurrent use; it holds no
// goroutines or other resources, so it needs no cleanup.
type API struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler
	// lifecycle is a one-slot semaphore held across a store change and the
	// hook that follows it (status changes, deletes, limits), so that the
	// hooks of concurrent changes run in the order the store applied them.
	lifecycle chan struct{}
}

// New returns the control plane for cfg, or an error naming the missing
// field.
func New(cfg Config) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &API{
		cfg:       cfg,
		log:       cfg.Log.With("component", "control"),
		lifecycle: make(chan struct{}, 1),
	}
	a.handler = a.routes()
	return a, nil
}

// Handler returns the HTTP handler of the API. It serves full paths
// (/api/v1/...), so the server mounts it as mux.Handle("/api/v1/", h).
func (a *API) Handler() http.Handler { return a.handler }

// access is what a route demands of the caller's role and scope.
type access int

const (
	// operatorOnly routes manage the set of tenants.
	operatorOnly access = iota
	// tenantRead routes read one tenant: every role, within its scope.
	tenantRead
	// tenantWrite routes change one tenant: operator and tenant-admin.
	tenantWrite
)

// handlerFunc serves one authorized request. It writes the response on
// success and returns an error otherwise; writeError answers it.
type handlerFunc func(w http.ResponseWriter, r *http.Request, c caller) error

// route is one entry of the route table.
type route struct {
	method, path string
	access       access
	serve        handlerFunc
}

// routes builds the mux: the routes of docs/control-plane.md, a 405 with an
// Allow header for other methods on those paths, and a JSON 404 elsewhere.
func (a *API) routes() http.Handler {
	const tenant = "/api/v1/tenants/{id}"
	table := []route{
		{http.MethodPost, "/api/v1/tenants", operatorOnly, a.createTenant},
		{http.MethodGet, "/api/v1/tenants", operatorOnly, a.listTenants},
		{http.MethodGet, tenant, tenantRead, a.getTenant},
		{http.MethodDelete, tenant, operatorOnly, a.deleteTenant},
		{http.MethodPost, tenant + "/suspend", operatorOnly, a.suspendTenant},
		{http.MethodPost, tenant + "/reactivate", operatorOnly, a.reactivateTenant},
		{http.MethodGet, tenant + "/limits", tenantRead, a.getLimits},
		{http.MethodPut, tenant + "/limits", tenantWrite, a.putLimits},
		{http.MethodGet, tenant + "/policy", tenantRead, a.getPolicy},
		{http.MethodPut, tenant + "/policy", tenantWrite, a.putPolicy},
		{http.MethodPost, tenant + "/keys", tenantWrite, a.createKey},
		{http.MethodGet, tenant + "/keys", tenantRead, a.listKeys},
		{http.MethodDelete, tenant + "/keys/{keyID}", tenantWrite, a.revokeKey},
		{http.MethodGet, tenant + "/audit", tenantRead, a.listAudit},
		{http.MethodPost, tenant + "/move", operatorOnly, a.moveTenant},
		{http.MethodGet, tenant + "/resources/{resource}", tenantRead, a.getResource},
		{http.MethodPost, tenant + "/resources/{resource}/quarantine", tenantWrite, a.quarantineResource},
		{http.MethodPost, tenant + "/resources/{resource}/lift", tenantWrite, a.liftResource},
		{http.MethodGet, "/api/v1/groups", operatorOnly, a.listGroups},
		{http.MethodPut, "/api/v1/groups/{name}", operatorOnly, a.setGroup},
		{http.MethodPost, "/api/v1/groups/{name}/recover", operatorOnly, a.recoverTenant},
	}
	mux := http.NewServeMux()
	allowed := map[string][]string{}
	var paths []string
	for _, rt := range table {
		mux.Handle(rt.method+" "+rt.path, a.endpoint(rt.access, rt.serve))
		if allowed[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		if rt.method == http.MethodGet {
			allowed[rt.path] = append(allowed[rt.path], http.MethodHead)
		}
	}
	// A pattern without a method is less specific than one with a method,
	// so these catch only the methods a path does not serve.
	for _, p := range paths {
		mux.Handle(p, methodNotAllowed(strings.Join(allowed[p], ", ")))
	}
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, &apiError{http.StatusNotFound, codeNotFound, "no such endpoint: " + r.URL.Path})
	}))
	return mux
}

// endpoint wraps a handler: it bounds the request's context, authenticates
// the bearer token, authorizes the role and the tenant scope from the path
// (before any store access), refuses a mutation on a server that is not
// active, runs the handler and answers its error.
func (a *API) endpoint(acc access, serve handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.cfg.RequestTimeout > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), a.cfg.RequestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		c, err := a.authenticate(r)
		if err == nil {
			err = authorize(c, acc, r.PathValue("id"))
		}
		if err == nil && mutating(r.Method) {
			err = a.checkActive()
		}
		if err == nil && mutating(r.Method) {
			err = a.checkServed(r.Context(), r.PathValue("id"))
		}
		if err == nil {
			err = serve(w, r, c)
		}
		if err != nil {
			a.writeError(w, r, c, err)
		}
	})
}

// mutating reports whether a request with method may change state.
func mutating(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// checkActive returns a 503 unless Config.Active allows changes. The
// reason Active gives is not sent: the client needs only where to go.
func (a *API) checkActive() error {
	if a.cfg.Active == nil || a.cfg.Active() == nil {
		return nil
	}
	return &apiError{http.StatusServiceUnavailable, codeUnavailable,
		"not the active server; send control-plane changes to the active server"}
}

// methodNotAllowed answers 405 with the path's methods in Allow.
func methodNotAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeAPIError(w, &apiError{http.StatusMethodNotAllowed, codeMethodNotAllowed,
			"method " + r.Method + " is not allowed here; allowed: " + allow})
	})
}

// lock takes the lifecycle semaphore, or fails when ctx ends first.
func (a *API) lock(ctx context.Context) (unlock func(), err error) {
	select {
	case a.lifecycle <- struct{}{}:
		return func() { <-a.lifecycle }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
