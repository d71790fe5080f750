package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/control"
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
