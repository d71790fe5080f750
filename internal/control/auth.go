package control

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/token"
)

// Control-plane roles, carried in the Role claim of a control token.
const (
	// RoleOperator acts on every tenant, including the tenant lifecycle
	// (create, list, suspend, reactivate, delete). Its token names no
	// tenant.
	RoleOperator = "operator"
	// RoleTenantAdmin manages its own tenant: reads it, issues, lists and
	// revokes its keys, reads and sets its limits, reads its audit trail.
	RoleTenantAdmin = "tenant-admin"
	// RoleTenantViewer reads its own tenant: the tenant, its keys, limits
	// and audit trail.
	RoleTenantViewer = "tenant-viewer"
	// RoleMetrics reads the server's metrics, per-tenant series included
	// (GET /metrics), and nothing of the control plane. Its token names no
	// tenant. It is what a Prometheus scraping from another host holds.
	RoleMetrics = "metrics"
)

// ErrInvalidRole is returned by MintToken (wrapped) for an unknown role, a
// tenant role without a valid tenant, or an operator with a tenant.
var ErrInvalidRole = errors.New("control: invalid role or tenant")

// validateRole checks that role is known and that tenant fits it.
func validateRole(role, tenant string) error {
	switch role {
	case RoleOperator, RoleMetrics:
		if tenant != "" {
			return fmt.Errorf("%w: role %s is global and names no tenant, got tenant %q", ErrInvalidRole, role, tenant)
		}
		return nil
	case RoleTenantAdmin, RoleTenantViewer:
		if tenant == "" {
			return fmt.Errorf("%w: role %s needs a tenant", ErrInvalidRole, role)
		}
		if store.ValidateTenantID(tenant) != nil {
			return fmt.Errorf("%w: tenant id %q: want 1-%d characters, [a-z0-9] first, then [a-z0-9_-]", ErrInvalidRole, tenant, store.MaxIDLen)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown role %q, want %s, %s, %s or %s", ErrInvalidRole, role, RoleOperator, RoleTenantAdmin, RoleTenantViewer, RoleMetrics)
}

// MintToken signs a control-plane token for role (and tenant, which tenant
// roles need and the operator must not have) that expires ttl from now, and
// returns it with its expiry (whole seconds, as the token states it). It is
// what `server admin-token` prints.
//
// The expiry is computed from the signer's clock (signer.Now), the clock
// that verification checks it against. Errors: ErrInvalidRole (wrapped) for
// a bad role or tenant; a plain error for a nil signer or a ttl <= 0.
func MintToken(signer *token.Signer, role, tenant string, ttl time.Duration) (string, time.Time, error) {
	if signer == nil {
		return "", time.Time{}, errors.New("control: mint token: nil signer")
	}
	if err := validateRole(role, tenant); err != nil {
		return "", time.Time{}, err
	}
	if ttl <= 0 {
		return "", time.Time{}, fmt.Errorf("control: mint token: ttl %v, want > 0", ttl)
	}
	// JWT expiry is whole seconds.
	exp := signer.Now().Add(ttl).Truncate(time.Second).UTC()
	tok, err := signer.Sign(token.Claims{Audience: token.AudienceControl, Role: role, Tenant: tenant, ExpiresAt: exp})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("control: mint token: %w", err)
	}
	return tok, exp, nil
}

// caller is who a request acts for, from its verified token.
type caller struct {
	role   string
	tenant string // empty for RoleOperator
}

// actor names the caller in audit entries and logs: "operator" or
// "<role>:<tenant>". The zero caller (not authenticated) is "anonymous".
func (c caller) actor() string {
	switch {
	case c.role == "":
		return "anonymous"
	case c.tenant == "":
		return c.role
	}
	return c.role + ":" + c.tenant
}

// authenticate verifies the request's bearer token. Every failure is 401:
// missing, malformed, badly signed, expired, for another audience, or with
// claims that do not make a valid role.
func (a *API) authenticate(r *http.Request) (caller, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return caller{}, &apiError{http.StatusUnauthorized, codeUnauthenticated, "missing bearer token"}
	}
	invalid := &apiError{http.StatusUnauthorized, codeUnauthenticated, "invalid or expired bearer token"}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return caller{}, invalid
	}
	c, _, err := a.verify(r, tok)
	return c, err
}

// verify checks a control-plane token and returns its caller and expiry;
// every failure is the same 401.
func (a *API) verify(r *http.Request, tok string) (caller, time.Time, error) {
	invalid := &apiError{http.StatusUnauthorized, codeUnauthenticated, "invalid or expired bearer token"}
	claims, err := a.cfg.Signer.Verify(tok, token.AudienceControl)
	if err != nil {
		return caller{}, time.Time{}, invalid
	}
	if err := validateRole(claims.Role, claims.Tenant); err != nil {
		// Correctly signed but meaningless: our own signer made it.
		a.log.WarnContext(r.Context(), "control token with invalid claims", "role", claims.Role, "tenant", claims.Tenant)
		return caller{}, time.Time{}, invalid
	}
	return caller{role: claims.Role, tenant: claims.Tenant}, claims.ExpiresAt, nil
}

// ReadsTenantMetrics reports whether r carries a valid control-plane token
// of role operator or metrics: the callers that may read per-tenant metric
// series from another host.
func (a *API) ReadsTenantMetrics(r *http.Request) bool {
	c, err := a.authenticate(r)
	return err == nil && (c.role == RoleOperator || c.role == RoleMetrics)
}

// authorize checks the caller's role and scope against the route and the
// tenant id in the path, without touching the store, so that a token
// outside its tenant learns nothing about whether a tenant exists.
func authorize(c caller, acc access, tenant string) error {
	switch c.role {
	case RoleOperator:
		return nil
	case RoleMetrics:
		return permissionDenied("role metrics reads /metrics only")
	}
	if acc == operatorOnly {
		return permissionDenied("this operation needs the operator role")
	}
	if tenant != c.tenant {
		return permissionDenied("the token is not scoped to this tenant")
	}
	if acc == tenantWrite && c.role != RoleTenantAdmin {
		return permissionDenied("role " + c.role + " is read-only")
	}
	return nil
}

// StatusHandler serves a server's status (GET /status): what status
// returns, as JSON, to a caller with a valid control-plane token of role
// operator or metrics, the roles that read the whole server and no
// tenant's data. Without a valid token it answers 401, to a tenant's token
// 403, as every control-plane route does.
func (a *API) StatusHandler(status func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := a.authenticate(r)
		if err == nil && c.role != RoleOperator && c.role != RoleMetrics {
			err = permissionDenied("the status needs the operator or the metrics role")
		}
		if err != nil {
			a.writeError(w, r, c, err)
			return
		}
		writeJSON(w, http.StatusOK, status())
	})
}
