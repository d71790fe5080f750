package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/token"
)

// The tenant Bootstrap creates.
const (
	DemoTenantID   = "demo"
	DemoTenantName = "Demo tenant"
)

// Bootstrapped is what Bootstrap made on a server's first start. Key and
// OperatorToken are secrets, shown to the user once: print them, never log
// them.
type Bootstrapped struct {
	// Tenant is the demo tenant.
	Tenant store.Tenant
	// KeyID and KeyPrefix identify the demo tenant's API key; Key is the
	// plain key.
	KeyID, KeyPrefix, Key string
	// OperatorToken is a control-plane token with RoleOperator, valid until
	// OperatorTokenExpiresAt.
	OperatorToken          string
	OperatorTokenExpiresAt time.Time
}

// Bootstrap prepares an empty store on a server's first start: if the store
// holds no tenant at all (tombstones count), it creates tenant DemoTenantID,
// an API key for it (both recorded in its audit trail, actor "bootstrap")
// and an operator token valid for ttl, and returns them with created true.
// Otherwise it changes nothing and returns created false. Call it last in a
// server's start, once its listeners are bound and nothing else can fail:
// the secrets are shown once, and a start that fails after it has spent
// them.
//
// Servers starting together on one store are safe: only the one whose
// CreateTenant succeeds returns created true. If a later step fails (the
// key or its audit entries cannot be stored), the error is returned and
// later starts do not retry, since the store is no longer empty: `server
// admin-token` and the control plane can issue a key instead.
func Bootstrap(ctx context.Context, st store.Store, signer *token.Signer, ttl time.Duration) (Bootstrapped, bool, error) {
	if st == nil || signer == nil {
		return Bootstrapped{}, false, errors.New("control: bootstrap: nil store or signer")
	}
	ts, err := st.ListTenants(ctx, store.TenantFilter{IncludeDeleted: true})
	if err != nil {
		return Bootstrapped{}, false, fmt.Errorf("control: bootstrap: %w", err)
	}
	if len(ts) > 0 {
		return Bootstrapped{}, false, nil
	}
	// Mint first: it is the step that fails on bad arguments, and nothing
	// is written yet.
	tok, exp, err := MintToken(signer, RoleOperator, "", ttl)
	if err != nil {
		return Bootstrapped{}, false, fmt.Errorf("control: bootstrap: %w", err)
	}
	t, err := st.CreateTenant(ctx, store.Tenant{ID: DemoTenantID, Name: DemoTenantName})
	if errors.Is(err, store.ErrExists) {
		return Bootstrapped{}, false, nil // another server got there first
	}
	if err != nil {
		return Bootstrapped{}, false, fmt.Errorf("control: bootstrap: create tenant %q: %w", DemoTenantID, err)
	}
	k, plain, err := issueKey(ctx, st, t.ID, "demo key")
	if err != nil {
		return Bootstrapped{}, false, fmt.Errorf("control: bootstrap: issue the demo key: %w", err)
	}
	for _, e := range []store.AuditEntry{
		{TenantID: t.ID, Actor: actorBootstrap, Action: actionTenantCreate, Target: t.ID, Detail: fmt.Sprintf("name=%q", t.Name)},
		{TenantID: t.ID, Actor: actorBootstrap, Action: actionKeyCreate, Target: k.ID, Detail: keyDetail(k)},
	} {
		if _, err := st.AppendAudit(ctx, e); err != nil {
			return Bootstrapped{}, false, fmt.Errorf("control: bootstrap: record %s: %w", e.Action, err)
		}
	}
	return Bootstrapped{
		Tenant: t, KeyID: k.ID, KeyPrefix: k.Prefix, Key: plain,
		OperatorToken: tok, OperatorTokenExpiresAt: exp,
	}, true, nil
}
