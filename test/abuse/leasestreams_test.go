package abuse

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// attackLeaseStreamsPerTenant: the cap on Leases streams is each tenant's
// own limit, set like the cap on event streams. The operator caps one
// tenant at 2 (the default is 32); that tenant's third stream is refused,
// another tenant at the default opens its own, and the capped tenant's
// admin cannot raise its own cap past the operator's.
func attackLeaseStreamsPerTenant(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	capped, free := srv.newTenant(t, "capped"), srv.newTenant(t, "free")
	code, body := srv.control(t, "PUT", "/api/v1/tenants/capped/limits", srv.token, `{"max_lease_streams":2}`)
	if code != 200 || !strings.Contains(body[max(strings.Index(body, `"effective"`), 0):], `"max_lease_streams":2`) {
		t.Fatalf("the operator setting capped's max_lease_streams to 2 = got %d %s, want 200 with 2 in force", code, body)
	}
	if code, body := srv.control(t, "GET", "/api/v1/tenants/free/limits", srv.token, ""); code != 200 || !strings.Contains(body[max(strings.Index(body, `"effective"`), 0):], `"max_lease_streams":32`) {
		t.Fatalf("free's limits = got %d %s, want the default 32 in force", code, body)
	}
	admin := srv.adminToken(t, "tenant-admin", "capped")
	if code, body := srv.control(t, "PUT", "/api/v1/tenants/capped/limits", admin, `{"tenant_admin":{"max_lease_streams":3}}`); code != 403 {
		t.Fatalf("capped's admin raising its own Leases streams to 3 = got %d %s, want 403", code, body)
	}
	// open opens Leases streams until n are open or one is refused. A
	// stream is open once its first answer came back on it; one that
	// ended before (a call's UNAVAILABLE ends its stream: a loaded run saw
	// one) holds no slot and is not counted; its error is logged.
	open := func(key string, n int) (opened int, refusal error) {
		pc := srv.pool(t)
		ctx, cancel := context.WithCancel(withKey(key))
		t.Cleanup(cancel)
		for tries := 0; opened < n && tries < 3*n; tries++ {
			st, err := pc.Leases(ctx)
			if err == nil {
				if err = st.Send(&repoolv1.LeaseCall{Call: &repoolv1.LeaseCall_Acquire{Acquire: &repoolv1.AcquireRequest{Context: "c", TtlSeconds: 5}}}); err == nil {
					_, err = st.Recv()
				}
			}
			switch {
			case err == nil:
				opened++
			case status.Code(err) == codes.ResourceExhausted:
				return opened, err
			default:
				t.Logf("a Leases stream of %s ended before its first answer (it holds no slot): %v", key, err)
			}
		}
		return opened, nil
	}
	if n, err := open(capped, 3); n != 2 || err == nil || !strings.Contains(err.Error(), "limit of 2 Leases streams") {
		t.Errorf("capped opening 3 Leases streams = got %d open and %v, want 2 and RESOURCE_EXHAUSTED naming its limit of 2", n, err)
	}
	if n, err := open(free, 3); n != 3 || err != nil {
		t.Errorf("free opening 3 Leases streams = got %d open and %v, want 3", n, err)
	}
	if got := srv.metric(t, `repool_lease_streams{tenant="capped"}`); got != 2 {
		t.Errorf("repool_lease_streams of capped = got %d, want 2", got)
	}
}
