package abuse

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// TestAttacks runs every attack against binaries built once.
func TestAttacks(t *testing.T) {
	bins := build(t)
	for _, a := range []struct {
		name string
		run  func(*testing.T, binaries)
	}{
		{"a web page drives the sidecar", attackFromAWebPage},
		{"a tenant-admin takes what is not its own", attackGreedyTenantAdmin},
		{"one tenant at the defaults takes the whole budget", attackDefaultFairness},
		{"bad requests from one backend trip the breaker", attackBreakerWithBadRequests},
		{"hundreds of slow and idle connections", attackSlowConnections},
		{"connections beyond every listener's bound", attackConnectionFlood},
		{"a gRPC client that pings and opens streams without end", attackGRPCStreamsAndPings},
		{"an unauthenticated scraper on another host reads every tenant's metrics", attackMetricsFromAnotherHost},
		{"control-plane bodies that encoding/json lets through", attackControlPlaneBodies},
		{"a tenant hoards API keys", attackKeyHoarding},
		{"a tenant sends on Leases streams and never reads the answers", attackUnreadLeaseStreams},
		{"a tenant fills the connection bound with idle Leases streams", attackIdleLeaseStreamsFillConnections},
		{"a tenant registers resources with long ids and many labels", attackLongIdsAndLabels},
		{"a tenant sends a new affinity key with every acquire", attackAffinityKeys},
		{"a client without a valid credential holds requests half sent", attackUnauthenticatedRequests},
		{"a tenant holds requests half sent", attackTenantRequests},
		{"a tenant's Leases streams past its own cap", attackLeaseStreamsPerTenant},
		{"an operator's typo, a drained, retired and lost group", attackGroupsOfACarelessOperator},
		{"the store stops taking writes", attackStoreStopsTakingWrites},
	} {
		t.Run(a.name, func(t *testing.T) { a.run(t, bins) })
	}
}

// attackFromAWebPage: what any page open in a browser on the host can send
// to the sidecar without a CORS preflight (text/plain, form and multipart
// POSTs with its Origin, a no-cors GET), and the same page after DNS
// rebinding (its own host name in Host). Nothing reaches the server. A
// unix socket is the owner's alone.
func attackFromAWebPage(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	sc := startSidecar(t, bins, srv, "")
	port := sc.addr[strings.LastIndex(sc.addr, ":"):]
	register := `{"resources":[{"id":"planted","capacity":1000}]}`
	attacks := []struct {
		name, method, path, body string
		header                   map[string]string
		want                     int
	}{
		{"simple POST, text/plain", "POST", "/resources", register,
			map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, 403},
		{"simple POST without Origin (an old browser)", "POST", "/resources", register, map[string]string{"Content-Type": "text/plain"}, 415},
		{"form POST, hour-long lease", "POST", "/acquire", `{"context":"c","ttl_seconds":3600}`,
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}, 403},
		{"multipart POST, report BLOCKED", "POST", "/reports", `{"resource_id":"planted","context":"c","outcome":"BLOCKED"}`,
			map[string]string{"Content-Type": "multipart/form-data; boundary=x", "Origin": "null"}, 403},
		{"no-cors GET of an event stream", "GET", "/events", "", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, 403},
		{"DNS rebinding: POST as its own name", "POST", "/resources", register,
			map[string]string{"Host": "evil.example" + port, "Content-Type": "application/json", "Origin": "http://evil.example" + port}, 403},
		{"DNS rebinding: GET reads the breakers", "GET", "../../breakers", "", map[string]string{"Host": "evil.example" + port}, 403},
	}
	for _, a := range attacks {
		code, body := request(t, http.DefaultClient, a.method, sc.base+"/"+a.path, a.body, a.header)
		if code != a.want {
			t.Errorf("%s = got %d %s, want %d", a.name, code, body, a.want)
		}
		t.Logf("attack %q: %d %s", a.name, code, errorCode(body))
	}
	res, err := srv.pool(t).ListResources(withKey(srv.key), &repoolv1.ListResourcesRequest{})
	if err != nil || len(res.GetResources()) != 0 {
		t.Fatalf("the server's resources after the attacks = got %v, %v, want none", res.GetResources(), err)
	}
	if b := sc.breaker(t); b["state"] != "closed" || b["counts"].(map[string]any)["requests"] != 0.0 {
		t.Errorf("breaker after the attacks = got %v, want closed with nothing counted", b)
	}
	// A backend is served as before.
	if code, body := request(t, http.DefaultClient, "POST", sc.base+"/resources", `{"resources":[{"id":"proxy-1"}]}`, jsonHeader); code != 200 {
		t.Errorf("a backend's register = got %d %s, want 200", code, body)
	}

	// A unix socket: only its owner may connect.
	dir, err := os.MkdirTemp("", "abuse")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	startSidecar(t, bins, srv, "listen: unix:"+path+"\n")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the sidecar's unix socket = got %v, %v, want a socket of mode 0600", fi.Mode(), err)
	}
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	if code, body := request(t, unix, "POST", "http://localhost/v1/providers/default/acquire", `{"context":"c","ttl_seconds":30}`, jsonHeader); code != 200 {
		t.Errorf("acquire over the unix socket = got %d %s, want 200", code, body)
	}
}

// limitsJSON is what the control plane answers about limits.
type limitsJSON struct {
	Effective map[string]float64 `json:"effective"`
}

// attackGreedyTenantAdmin: a tenant-admin reserves the global budget,
// raises its ceilings and rates; an operator sets absurd limits and
// reservations beyond the budget. Every one is refused, and a tenant-admin
// may still lower its own limits and raise them back to the ceiling.
func attackGreedyTenantAdmin(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "", "--global-resources", "10000", "--global-cells", "50000")
	srv.newTenant(t, "other")
	admin := srv.adminToken(t, "tenant-admin", "demo")
	const limits = "/api/v1/tenants/demo/limits"
	attacks := []struct {
		name, token, body string
		want              int
		says              string
	}{
		{"tenant-admin reserves nearly the whole budget", admin, `{"reserved_resources":9999}`, 403, "only the operator sets"},
		{"tenant-admin raises its resource ceiling", admin, `{"max_resources":10000}`, 403, "only the operator sets"},
		{"tenant-admin lifts its rate", admin, `{"rate_per_second":1000000,"burst":1000000}`, 403, "only the operator sets"},
		{"tenant-admin lifts its own streams past the ceiling", admin, `{"tenant_admin":{"max_streams":9}}`, 403, "tenant_admin.max_streams 9 is above its ceiling of 8"},
		{"tenant-admin lifts its own cells past the ceiling", admin, `{"tenant_admin":{"max_cells":12501}}`, 403, "above its ceiling of 12500"},
		{"tenant-admin asks for 2^62 of its own streams", admin, `{"tenant_admin":{"max_streams":4611686018427387904}}`, 403, "above its ceiling of 8"},
		{"operator sets 2^62 streams", srv.token, `{"max_streams":4611686018427387904}`, 400, "max_streams 4611686018427387904 is out of range: want 0 to 1000"},
		{"operator sets a negative rate", srv.token, `{"rate_per_second":-1}`, 400, "rate_per_second -1 is out of range"},
		{"operator sets a ceiling above the budget", srv.token, `{"max_resources":10001}`, 400, "max_resources 10001 is out of range: want 1 to 10000"},
	}
	for _, a := range attacks {
		code, body := srv.control(t, "PUT", limits, a.token, a.body)
		if code != a.want || !strings.Contains(body, a.says) {
			t.Errorf("%s = got %d %s, want %d saying %q", a.name, code, body, a.want, a.says)
		}
		for _, global := range []string{"10000", "50000"} {
			if a.token == admin && strings.Contains(body, global) && !strings.Contains(a.body, global) {
				t.Errorf("%s = got %s, which tells the tenant-admin the global budget %s", a.name, body, global)
			}
		}
		t.Logf("attack %q: %d", a.name, code)
	}
	// Reservations never sum above the global budget.
	if code, body := srv.control(t, "PUT", limits, srv.token, `{"reserved_resources":6000,"max_resources":6000}`); code != 200 {
		t.Fatalf("operator reserving 6000 for demo = got %d %s, want 200", code, body)
	}
	if code, body := srv.control(t, "PUT", "/api/v1/tenants/other/limits", srv.token, `{"reserved_resources":4001,"max_resources":5000}`); code != 400 || !strings.Contains(body, "reservations would total 10001") {
		t.Errorf("operator reserving 4001 more for other = got %d %s, want 400: the sum would exceed the budget", code, body)
	}
	// What a tenant-admin may do: lower its own limits, raise them back.
	for _, step := range []struct {
		body    string
		streams float64
	}{{`{"tenant_admin":{"max_streams":2}}`, 2}, {`{"tenant_admin":{"max_streams":8}}`, 8}, {`{"tenant_admin":{"max_streams":null}}`, 8}} {
		code, body := srv.control(t, "PUT", limits, admin, step.body)
		var l limitsJSON
		if code != 200 || json.Unmarshal([]byte(body), &l) != nil || l.Effective["max_streams"] != step.streams {
			t.Errorf("tenant-admin PUT %s = got %d %s, want 200 with %v streams in force", step.body, code, body, step.streams)
		}
	}
}

// fill registers resources for key, 100 a call, until the server refuses,
// and returns how many it took and the refusal.
func fill(t *testing.T, pool repoolv1.PoolServiceClient, key, prefix string) (int, error) {
	t.Helper()
	n := 0
	for i := 0; ; i++ {
		req := &repoolv1.RegisterRequest{}
		for j := range 100 {
			req.Resources = append(req.Resources, &repoolv1.Resource{Id: fmt.Sprintf("%s-%d-%d", prefix, i, j)})
		}
		if _, err := pool.Register(withKey(key), req); err != nil {
			return n, err
		}
		n += 100
	}
}

// attackDefaultFairness measures what two tenants left at the default
// limits get when the first registers all it can: with the default share
// (25%), and with a share of 100% (what every tenant had before).
func attackDefaultFairness(t *testing.T, bins binaries) {
	for _, tt := range []struct {
		share          string
		greedy, second int
	}{{"25", 2500, 2500}, {"100", 10000, 0}} {
		srv := startServer(t, bins, "", "--global-resources", "10000", "--default-tenant-share", tt.share,
			"--rate-per-second", "100000", "--burst", "100000")
		secondKey := srv.newTenant(t, "second")
		pool := srv.pool(t)
		greedy, gerr := fill(t, pool, srv.key, "g")
		second, serr := fill(t, pool, secondKey, "s")
		t.Logf("fairness, global budget 10000 resources, --default-tenant-share %s%%: greedy tenant took %d, then the second tenant got %d", tt.share, greedy, second)
		if greedy != tt.greedy || second != tt.second {
			t.Errorf("share %s%%: greedy took %d, second got %d; want %d and %d", tt.share, greedy, second, tt.greedy, tt.second)
		}
		for _, err := range []error{gerr, serr} {
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("share %s%%: refusal = got %v, want RESOURCE_EXHAUSTED", tt.share, err)
			}
		}
		// A refusal tells the tenant its own usage and ceiling, never the
		// global budget (which the 100% share makes every tenant's ceiling)
		// nor what others hold.
		if msg := status.Convert(serr).Message(); tt.share == "25" && (strings.Contains(msg, "10000") || strings.Contains(msg, "7500") || !strings.Contains(msg, "ceiling of 2500")) {
			t.Errorf("share 25%%: the second tenant's refusal = got %q, want its own ceiling of 2500 and nothing of the budget or the others", msg)
		}
		if msg := status.Convert(serr).Message(); tt.share == "100" && (!strings.Contains(msg, "holds 0,") || strings.Contains(msg, "in use")) {
			t.Errorf("share 100%%: the second tenant's refusal = got %q, want no shared capacity with its own holdings, not what others hold", msg)
		}
	}
}

// attackBreakerWithBadRequests: one backend floods the sidecar with
// requests the sidecar refuses or cannot encode. The provider's breaker
// counts none of them and stays closed; another backend is served.
func attackBreakerWithBadRequests(t *testing.T, bins binaries) {
	srv := startServer(t, bins, "")
	sc := startSidecar(t, bins, srv, "")
	if code, body := request(t, http.DefaultClient, "POST", sc.base+"/resources", `{"resources":[{"id":"proxy-1"}]}`, jsonHeader); code != 200 {
		t.Fatalf("register = got %d %s, want 200", code, body)
	}
	bad := []struct {
		method, path, body string
		header             map[string]string
	}{
		{"DELETE", "/resources/%FF%FE", "", nil},
		{"POST", "/leases/%C3%28/renew", `{"fencing_token":"1","ttl_seconds":30}`, jsonHeader},
		{"POST", "/leases/%80/release", `{"fencing_token":"1"}`, jsonHeader},
		{"POST", "/acquire", "{\"context\":\"\xff\",\"ttl_seconds\":30}", jsonHeader},
		{"POST", "/acquire", `{"context":"\ud800"}`, jsonHeader},
		{"POST", "/acquire", `{"context":`, jsonHeader},
		{"POST", "/acquire", `{"context":"c","ttl_seconds":30,"tenant":"other"}`, jsonHeader},
		{"POST", "/acquire", `{"context":"c","ttl_seconds":30}`, map[string]string{"Content-Type": "text/plain"}},
		{"POST", "/reports", `{"resource_id":"proxy-1","context":"c","outcome":"MAYBE"}`, jsonHeader},
	}
	statuses := map[int]int{}
	for range 40 {
		for _, b := range bad {
			code, _ := request(t, http.DefaultClient, b.method, sc.base+b.path, b.body, b.header)
			statuses[code]++
		}
	}
	t.Logf("%d bad requests answered: %v (status: count)", 40*len(bad), statuses)
	for code := range statuses {
		if code < 400 || code >= 500 {
			t.Errorf("a bad request was answered %d, want a 4xx", code)
		}
	}
	b := sc.breaker(t)
	if c := b["counts"].(map[string]any); b["state"] != "closed" || c["failures"] != 0.0 {
		t.Fatalf("breaker after %d bad requests = got %v, want closed without failures", 40*len(bad), b)
	}
	if code, body := request(t, http.DefaultClient, "POST", sc.base+"/acquire", `{"context":"c","ttl_seconds":30}`, jsonHeader); code != 200 {
		t.Errorf("another backend's acquire = got %d %s, want 200", code, body)
	}
}
