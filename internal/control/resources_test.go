package control

import (
	"fmt"
	"strings"
	"testing"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/tenants"
)

func TestQuarantineRoutes(t *testing.T) {
	h := newHarness(t, openSQLite)
	h.createTenant("a")
	withResource(h, "a")
	p := h.hooks.pools["a"]
	op, admin, viewer := h.token(RoleOperator, ""), h.token(RoleTenantAdmin, "a"), h.token(RoleTenantViewer, "a")
	h.hooks.Calls()

	var got resourceJSON
	h.mustDo("POST", "/api/v1/tenants/a/resources/r1/quarantine", admin, `{"seconds":600,"reason":"sold out"}`, 200, &got)
	if got.Quarantine != pool.QuarantineBlocked || got.BlockedUntil == nil || got.State != pool.StateActive {
		t.Fatalf("quarantine answer = %+v, want blocked", got)
	}
	if calls := h.hooks.Calls(); len(calls) != 1 || !strings.HasPrefix(calls[0], "Quarantine(a, r1, true, 10m0s, ") || !strings.HasSuffix(calls[0], ": sold out)") {
		t.Fatalf("hooks = %v", calls)
	}
	if info, _ := p.Get("r1"); info.Quarantine != pool.QuarantineBlocked {
		t.Fatalf("pool after quarantine: %+v", info)
	}
	h.mustDo("GET", "/api/v1/tenants/a/resources/r1", viewer, "", 200, &got)
	if got.Quarantine != pool.QuarantineBlocked || got.Aggregate.RecentSuccesses != 0 {
		t.Fatalf("GET = %+v", got)
	}
	h.mustDo("POST", "/api/v1/tenants/a/resources/r1/lift", op, `{"reason":"fixed"}`, 200, &got)
	if got.Quarantine != pool.QuarantineNone {
		t.Fatalf("lift answer = %+v", got)
	}
	entries, err := h.real.ListAudit(t.Context(), "a", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range entries {
		actions = append(actions, fmt.Sprintf("%s %s %s", e.Action, e.Target, e.Detail))
	}
	joined := strings.Join(actions, "\n")
	if !strings.Contains(joined, "resource.lift r1 lifted; fixed") || !strings.Contains(joined, "resource.quarantine r1 quarantined until") || !strings.Contains(joined, "sold out") {
		t.Fatalf("audit trail:\n%s\nwant the quarantine and the lift", joined)
	}

	// Bad input changes nothing and is answered in our words.
	h.hooks.Calls()
	for _, body := range []string{`{"seconds":0}`, `{"seconds":1.5}`, `{"seconds":99999999999}`, `{"reason":"` + strings.Repeat("x", 300) + `"}`, `{"duration":3}`} {
		r := h.do("POST", "/api/v1/tenants/a/resources/r1/quarantine", op, body)
		if r.status != 400 {
			t.Errorf("quarantine %s = %d %s, want 400", body, r.status, r.body)
		}
	}
	if calls := h.hooks.Calls(); len(calls) != 0 {
		t.Fatalf("bad requests reached the pool: %v", calls)
	}
	if r := h.do("POST", "/api/v1/tenants/a/resources/zz/quarantine", op, `{}`); r.status != 404 {
		t.Fatalf("quarantine of an unknown resource = %d %s, want 404", r.status, r.body)
	}
	// A change the store could not make durable is a 503, and audited.
	h.hooks.quarantine = func() error { return fmt.Errorf("%w: store down", tenants.ErrNotDurable) }
	r := h.do("POST", "/api/v1/tenants/a/resources/r1/lift", op, `{}`)
	if r.status != 503 {
		t.Fatalf("lift not durable = %d %s, want 503", r.status, r.body)
	}
}
