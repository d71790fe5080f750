package control

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/repool/repool/internal/store"
)

// Audit actions.
const (
	actionTenantCreate     = "tenant.create"
	actionTenantSuspend    = "tenant.suspend"
	actionTenantReactivate = "tenant.reactivate"
	actionKeyCreate        = "key.create"
	actionKeyRevoke        = "key.revoke"
	actionLimitsPut        = "limits.put"
	actionPolicyPut        = "policy.put"
	actionQuarantine       = "resource.quarantine"
	actionLift             = "resource.lift"
)

// actorBootstrap is the audit actor of what Bootstrap creates.
const actorBootstrap = "bootstrap"

// audit records an action of c on tenant, stamped by the API's clock,
// after the action committed. The store cannot put both in one
// transaction, so a failure here cannot undo the action (and must not hide
// it: a created key would be lost). It is logged at error level with the
// whole entry, which never holds a secret, so the trail can be repaired
// from the log.
func (a *API) audit(ctx context.Context, c caller, tenant, action, target, detail string) {
	e := store.AuditEntry{
		TenantID: tenant, At: a.cfg.Clock.Now(), Actor: c.actor(),
		Action: action, Target: target, Detail: detail,
	}
	if _, err := a.cfg.Store.AppendAudit(ctx, e); err != nil {
		a.log.ErrorContext(ctx, "audit entry lost: the change was made but not recorded",
			"tenant", e.TenantID, "actor", e.Actor, "action", e.Action, "target", e.Target, "detail", e.Detail, "err", err)
	}
}

// keyDetail is the audit detail of a key: its name and display prefix,
// never the key.
func keyDetail(k store.Key) string {
	return fmt.Sprintf("name=%q prefix=%q", k.Name, k.Prefix)
}

// auditJSON is one audit entry in responses.
type auditJSON struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Target string    `json:"target"`
	Detail string    `json:"detail"`
}

// auditPage is the answer of GET .../audit. NextBefore, when present, is
// the before= value of the next (older) page.
type auditPage struct {
	Entries    []auditJSON `json:"entries"`
	NextBefore int64       `json:"next_before,omitzero"`
}

// listAudit serves GET /api/v1/tenants/{id}/audit?limit=&before=: the
// tenant's entries, newest first. limit is 1..store.MaxAuditLimit (default
// store.DefaultAuditLimit); before is an entry id (only older entries).
func (a *API) listAudit(w http.ResponseWriter, r *http.Request, _ caller) error {
	id, err := tenantID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit := store.DefaultAuditLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > store.MaxAuditLimit {
			return invalidArgument("limit %q: want an integer from 1 to %d", s, store.MaxAuditLimit)
		}
		limit = n
	}
	var before int64
	if s := q.Get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return invalidArgument("before %q: want a positive audit entry id", s)
		}
		before = n
	}
	entries, err := a.cfg.Store.ListAudit(r.Context(), id, limit, before)
	if err != nil {
		return fromStore(err, "tenant "+strconv.Quote(id))
	}
	page := auditPage{Entries: make([]auditJSON, 0, len(entries))}
	for _, e := range entries {
		page.Entries = append(page.Entries, auditJSON{e.ID, e.At, e.Actor, e.Action, e.Target, e.Detail})
	}
	if len(entries) == limit {
		page.NextBefore = entries[len(entries)-1].ID
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
