package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/store"
)

// fill registers resources for key, batch at a time, until the server
// refuses, and returns how many it took and the refusal.
func fill(t *testing.T, r *running, key, prefix string, batch int) (int, error) {
	t.Helper()
	n := 0
	for i := 0; ; i++ {
		req := &repoolv1.RegisterRequest{}
		for j := range batch {
			req.Resources = append(req.Resources, &repoolv1.Resource{Id: fmt.Sprintf("%s-%d-%d", prefix, i, j)})
		}
		if _, err := r.pool.Register(withKey(key), req); err != nil {
			return n, err
		}
		n += batch
	}
}

// TestDefaultShareKeepsRoomForOthers is the default fairness: a tenant at
// the defaults that registers all it can takes its share (25% of 1,000),
// and a second tenant still gets its share afterwards.
func TestDefaultShareKeepsRoomForOthers(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t), GlobalResources: 1000, Limits: requestLimit(1e6, 1e6)})
	if code := r.api(t, "POST", "/api/v1/tenants", r.op, `{"id":"second","name":"Second"}`, nil); code != 201 {
		t.Fatalf("create tenant = got %d, want 201", code)
	}
	var key struct{ Key string }
	if code := r.api(t, "POST", "/api/v1/tenants/second/keys", r.op, `{"name":"k"}`, &key); code != 201 {
		t.Fatalf("create key = got %d, want 201", code)
	}
	greedy, err := fill(t, r, r.key, "g", 10)
	if greedy != 250 || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("greedy tenant registered %d, then %v; want 250 then RESOURCE_EXHAUSTED", greedy, err)
	}
	msg := status.Convert(err).Message()
	if !strings.Contains(msg, "tenant ceiling of 250 reached") || strings.Contains(msg, "1000") {
		t.Errorf("refusal = got %q, want the tenant's own ceiling of 250 and nothing of the global 1000", msg)
	}
	second, err := fill(t, r, key.Key, "s", 10)
	if second != 250 || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second tenant registered %d after the greedy one, then %v; want 250", second, err)
	}
}

// TestTenantAdminLimitsApplyLive: a tenant-admin's own lower value applies
// to the data plane at once, and raising it back to the ceiling too.
func TestTenantAdminLimitsApplyLive(t *testing.T) {
	r := start(t, Config{Store: sqliteStore(t), GlobalResources: 1000, Limits: requestLimit(1e6, 1e6)})
	admin, _, err := control.MintToken(r.s.signer, control.RoleTenantAdmin, "demo", time.Hour)
	if err != nil {
		t.Fatalf("MintToken() = got error %v, want nil", err)
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/demo/limits", admin, `{"tenant_admin":{"max_resources":20}}`, nil); code != 200 {
		t.Fatalf("tenant-admin lowering max_resources = got %d, want 200", code)
	}
	if n, err := fill(t, r, r.key, "a", 10); n != 20 || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("registered %d under the tenant-admin's ceiling of 20, then %v; want 20", n, err)
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/demo/limits", admin, `{"tenant_admin":{"max_resources":251}}`, nil); code != 403 {
		t.Fatalf("tenant-admin raising max_resources past the default share = got %d, want 403", code)
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/demo/limits", admin, `{"max_resources":1000}`, nil); code != 403 {
		t.Fatalf("tenant-admin setting the operator's max_resources = got %d, want 403", code)
	}
	if code := r.api(t, "PUT", "/api/v1/tenants/demo/limits", admin, `{"tenant_admin":{"max_resources":null}}`, nil); code != 200 {
		t.Fatalf("tenant-admin back to the ceiling = got %d, want 200", code)
	}
	if n, _ := fill(t, r, r.key, "b", 10); n != 230 {
		t.Fatalf("registered %d more back at the default ceiling of 250, want 230", n)
	}
}

// TestLimitRulesSetEveryLimit: the server's defaults set every limit of
// the table (internal/limits), within its range: a flag's default, no
// reservation, DefaultTenantShare percent of a budget for its ceiling. A
// default in Config.Limits for a limit without a flag is refused.
func TestLimitRulesSetEveryLimit(t *testing.T) {
	c := Config{GlobalResources: 1000, GlobalCells: 8000, DefaultTenantShare: 10}
	rules := c.LimitRules()
	for l := range limits.Count {
		s := l.Spec()
		want := s.Default
		switch {
		case s.Share && s.Budget == limits.ResourceBudget:
			want = 100
		case s.Share && s.Budget == limits.CellBudget:
			want = 800
		}
		if v, ok := rules.Defaults.Values.Get(l); !ok || v != want {
			t.Errorf("default %s = %v (set %v), want %v", l, v, ok, want)
		}
		if l.Flag() == "" {
			bad := c
			bad.Limits.Set(l, 1)
			if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), l.String()) {
				t.Errorf("Validate(Limits[%s] 1) = %v, want an error naming it: it has no flag", l, err)
			}
		}
	}
	if err := rules.Check(store.Limits{Values: rules.Defaults.Values}); err != nil {
		t.Errorf("the defaults as a tenant's own limits = %v, want them in range", err)
	}
}

// TestZeroStreamDefaults: a server default of 0 is 0, not "unset": with
// --max-streams 0 and --max-lease-streams 0 (-h: "0: none allowed") a
// tenant given no value of its own may open neither an event stream nor a
// Leases stream, while its unary calls are served.
func TestZeroStreamDefaults(t *testing.T) {
	cfg := Config{Store: sqliteStore(t), Limits: requestLimit(1e6, 1e6).With(limits.MaxStreams, 0).With(limits.MaxLeaseStreams, 0)}
	r := start(t, cfg)
	ctx, cancel := context.WithTimeout(withKey(r.key), 10*time.Second)
	defer cancel()
	if _, err := r.pool.ListResources(ctx, &repoolv1.ListResourcesRequest{}); err != nil {
		t.Fatalf("ListResources() = %v, want it served", err)
	}
	events, err := r.pool.SubscribeEvents(ctx, &repoolv1.SubscribeEventsRequest{})
	if err == nil {
		_, err = events.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("SubscribeEvents() with max_streams 0 = %v, want RESOURCE_EXHAUSTED", err)
	}
	leases, err := r.pool.Leases(ctx)
	if err == nil {
		_, err = leases.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Leases() with max_lease_streams 0 = %v, want RESOURCE_EXHAUSTED", err)
	}
}
