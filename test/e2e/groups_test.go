package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// groupOf places the servers of TestGroups: two groups of two.
var groupOf = map[string]string{"s1": "default", "s2": "default", "s3": "b", "s4": "b"}

// TestGroups runs the load of TestFailover (acquire → report → release
// and registrations, through the sidecar and the VIP) against two groups
// of two servers behind HAProxy, whose map routes the demo tenant to its
// group, while it
//
//	(a) moves the tenant from the default group to group b;
//	(b) kills -9 group b's active server: b's standby takes over, with
//	    the tenant;
//	(c) moves it back to the default group;
//	(d) kills -9 the default group's active server;
//	(e) moves it to b and back again;
//	(f) creates a tenant on group b, its key and its limits, and starts a
//	    sidecar of its own for it, which registers, acquires and renews
//	    its tokens.
//
// Every control-plane request goes through the front end (the VIP's
// control port), never to a server picked by the test. The servers issue
// tokens of 1 min, which the sidecars use for 30 s and renew every few
// seconds: after each move the test waits until the sidecar has renewed
// its token twice in the tenant's new group.
//
// It asserts that no backend call failed, no acknowledged registration was
// lost, no capacity-1 resource was held twice at once and no fencing token
// went backwards, and prints the move windows and failover times as
// "measure: name=value" lines.
func TestGroups(t *testing.T) {
	began := time.Now()
	c := claimRun(t)
	c.groups = groupOf
	c.build()
	network(t)
	if useTLS() {
		c.setupTLS()
	}
	c.postgres()

	s1 := c.startServer(hostS1)
	c.waitDemoKey(s1)
	if c.opToken == "" {
		t.Fatal("the first server printed no operator token")
	}
	testenv.Eventually(t, 30*time.Second, "s1 to be active", func() bool { return s1.readyActive() == http.StatusOK })
	for _, h := range []host{hostS2, hostS3, hostS4} {
		c.startServer(h)
	}
	active := func(group string) *server { return c.groupActive(t, group, nil) }
	defActive, bActive := active("default"), active("b")
	t.Logf("active servers: %s (default), %s (b)", defActive.host.name, bActive.host.name)

	b := c.frontEndAndClient(defActive.host.name + " " + bActive.host.name)
	t.Logf("cluster up in %v", time.Since(began).Round(time.Millisecond))

	endLoad := startLoad(t, b)
	mark := func(name string) {
		t.Logf("---- %s %s (sidecar so far: %s)", time.Now().Format("15:04:05.000"), name, sidecarCounters())
	}
	mark("warm-up")
	time.Sleep(2 * time.Second) // steady load on the real cluster before the first step
	if calls, _ := b.snapshot(); count(calls, func(c call) bool { return c.op == "acquire" && c.outcome == ok }) == 0 {
		t.Fatalf("no acquire succeeded in the warm-up; calls: %v", calls)
	}

	probe := c.vipProbe(t)
	defer probe.close()
	var windows, failovers []time.Duration
	move := func(to string) {
		t.Helper()
		from := "default"
		if to == "default" {
			from = "b"
		}
		src := active(from)
		mark("move the tenant from " + from + " (" + src.host.name + ") to " + to)
		t0 := time.Now()
		refused := c.moveTenant(t, "demo", to)
		// The window: until a call through the VIP is served again.
		probe.waitServed(t, 20*time.Second)
		w := time.Since(t0)
		windows = append(windows, w)
		t.Logf("moved to %s: calls served again through the VIP %v after the move began (the source refused them for %v)",
			to, w.Round(time.Millisecond), refused.Round(time.Millisecond))
		// Load on the tenant's new group until the sidecar has renewed its
		// token there twice (every 1.5 to 3 s).
		waitRenewed(t, sidecarPort, 2, "after the move to "+to)
	}
	kill := func(group string) {
		t.Helper()
		old := active(group)
		mark("kill -9 " + group + "'s active server " + old.host.name)
		t0 := time.Now()
		old.p.kill9()
		next := c.groupActive(t, group, old)
		probe.waitServed(t, 20*time.Second)
		failovers = append(failovers, time.Since(t0))
		t.Logf("%s active %v after the kill; calls served through the VIP %v after it", next.host.name,
			time.Since(t0).Round(time.Millisecond), failovers[len(failovers)-1].Round(time.Millisecond))
		c.startStandbys(old.host)
		time.Sleep(time.Second) // load on the restored group before the next step
	}
	move("b")
	kill("b")
	move("default")
	kill("default")
	move("b")
	move("default")
	c.freshTenant(t, "fresh", "b")
	mark("end")
	endLoad()

	calls, leases := b.snapshot()
	t.Logf("load: %d calls, %d leases, %d iterations dropped (more than %d in flight)", len(calls), len(leases), b.dropped.Load(), maxInFlight)
	b.mu.Lock()
	for _, a := range b.anomalies {
		t.Errorf("sidecar answer: %s", a)
	}
	b.mu.Unlock()
	failedCalls := 0
	for _, cl := range calls {
		if cl.outcome == failed || cl.late {
			failedCalls++
			t.Errorf("failed backend call: %v", cl)
		}
	}
	doubleGrants, regressions := 0, 0
	for _, v := range capacityViolations(leases) {
		t.Errorf("capacity violation: %v", v)
		if v.why == "both valid at once" {
			doubleGrants++
		} else {
			regressions++
		}
	}
	lost := c.lostRegistrations(t, b.registeredIDs())
	for _, id := range lost {
		t.Errorf("registration of %s was acknowledged but the resource is gone", id)
	}
	longest := func(ds []time.Duration) time.Duration {
		var m time.Duration
		for _, d := range ds {
			m = max(m, d)
		}
		return m
	}
	fmt.Printf("measure: move_window_s=%.3f\n", longest(windows).Seconds())
	fmt.Printf("measure: failover_s=%.3f\n", longest(failovers).Seconds())
	fmt.Printf("measure: failed_backend_calls=%d\n", failedCalls)
	fmt.Printf("measure: lost_registrations=%d\n", len(lost))
	fmt.Printf("measure: double_grants=%d\n", doubleGrants)
	fmt.Printf("measure: token_regressions=%d\n", regressions)
	t.Logf("move windows %v; failovers %v; whole test %v", windows, failovers, time.Since(began).Round(time.Millisecond))
}

// groupActive waits until exactly one server of group other than except
// is active, and returns it.
func (c *cluster) groupActive(tb testing.TB, group string, except *server) *server {
	tb.Helper()
	var got *server
	testenv.Eventually(tb, 30*time.Second, "one active server in group "+group, func() bool {
		var act []*server
		for name, g := range c.groups {
			if s := c.servers[name]; g == group && s != nil && s != except && !s.p.exited() && s.readyActive() == http.StatusOK {
				act = append(act, s)
			}
		}
		if len(act) == 1 {
			got = act[0]
			return true
		}
		return false
	})
	return got
}

// controlPort is the VIP's control-plane frontend (the inventory's
// default vip.control_port).
const controlPort = 8081

// control sends a control-plane request through the front end, as an
// operator does: to the VIP's control port, which HAProxy routes to the
// active server of the tenant's group. A 409 tenant_elsewhere (HAProxy's
// map not yet in step with a placement that just changed) is sent again
// until it is not. It fails the test unless the answer is want, and
// returns the body.
func (c *cluster) control(tb testing.TB, method, path, body string, want int) []byte {
	tb.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: probe.Transport}
	url := fmt.Sprintf("%s://%s:%d%s", serverScheme, vipAddr, controlPort, path)
	var (
		code int
		raw  []byte
		err  error
	)
	testenv.Eventually(tb, 10*time.Second, method+" "+path+" through the front end to reach the tenant's group", func() bool {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+c.opToken)
		req.Header.Set("Content-Type", "application/json")
		var resp *http.Response
		if resp, err = client.Do(req); err != nil {
			return true
		}
		defer resp.Body.Close()
		raw, _ = io.ReadAll(resp.Body)
		code = resp.StatusCode
		return code != http.StatusConflict || !strings.Contains(string(raw), "tenant_elsewhere")
	})
	if err != nil || code != want {
		tb.Fatalf("%s %s through the front end = %d %s (%v), want %d", method, url, code, raw, err, want)
	}
	return raw
}

// moveTenant moves tenant to group through the front end and returns how
// long the source refused its calls.
func (c *cluster) moveTenant(tb testing.TB, tenant, to string) time.Duration {
	tb.Helper()
	raw := c.control(tb, http.MethodPost, "/api/v1/tenants/"+tenant+"/move", `{"group":"`+to+`"}`, http.StatusOK)
	var out struct {
		RefusedMS int64 `json:"refused_ms"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		tb.Fatalf("move of %s to %s answered %s: %v", tenant, to, raw, err)
	}
	return time.Duration(out.RefusedMS) * time.Millisecond
}

// freshTenant creates tenant on group, its API key and its limits through
// the front end, starts a sidecar of its own for it (none of its calls has
// ever named the tenant), and checks that the sidecar registers and
// acquires through the VIP and renews its token on the tenant's group.
func (c *cluster) freshTenant(t *testing.T, tenant, group string) {
	t.Helper()
	t.Logf("---- %s a new tenant %s on group %s, with a sidecar of its own", time.Now().Format("15:04:05.000"), tenant, group)
	c.control(t, http.MethodPost, "/api/v1/tenants", `{"id":"`+tenant+`","name":"Fresh","group":"`+group+`"}`, http.StatusCreated)
	var key struct {
		Key string `json:"key"`
	}
	if raw := c.control(t, http.MethodPost, "/api/v1/tenants/"+tenant+"/keys", `{"name":"e2e"}`, http.StatusCreated); json.Unmarshal(raw, &key) != nil || key.Key == "" {
		t.Fatalf("key of %s answered %s, want a key", tenant, raw)
	}
	c.control(t, http.MethodPut, "/api/v1/tenants/"+tenant+"/limits", `{"rate_per_second":1000,"burst":1000}`, http.StatusOK)
	var got struct {
		Group string `json:"group"`
	}
	if raw := c.control(t, http.MethodGet, "/api/v1/tenants/"+tenant, "", http.StatusOK); json.Unmarshal(raw, &got) != nil || got.Group != group {
		t.Fatalf("GET tenant %s answered %s, want it on group %s", tenant, raw, group)
	}

	port := sidecarPort + 1
	c.startSidecarFor(tenant+"-sidecar", port, key.Key)
	client := &http.Client{Timeout: 15 * time.Second}
	post := func(path, body string) {
		t.Helper()
		resp, err := client.Post(sidecarAt(port, "/v1/providers/"+provider+path), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s to %s's sidecar = %v", path, tenant, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s to %s's sidecar = %d %s, want 200: a tenant created on group %s must be served through the front end", path, tenant, resp.StatusCode, raw, group)
		}
	}
	began := time.Now()
	post("/resources", `{"resources":[{"id":"f-1","capacity":1000}]}`)
	t.Logf("%s's first call (a registration) served %v after its sidecar started", tenant, time.Since(began).Round(time.Millisecond))
	post("/acquire", `{"context":"c","ttl_seconds":30}`)
	n := sidecarTokensIssued(port)
	testenv.Eventually(t, 20*time.Second, tenant+"'s sidecar to renew its token twice on group "+group, func() bool {
		post("/acquire", `{"context":"c","ttl_seconds":30}`)
		return sidecarTokensIssued(port) >= n+2
	})
}

// sidecarTokensIssued returns how many tokens the sidecar on port has had
// issued (repool_sidecar_token_issuances_total, code OK), -1 if unknown.
func sidecarTokensIssued(port int) float64 {
	resp, err := probe.Get(sidecarAt(port, "/metrics"))
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "repool_sidecar_token_issuances_total{") && strings.Contains(line, `code="OK"`) {
			if f := strings.Fields(line); len(f) == 2 {
				v, err := strconv.ParseFloat(f[1], 64)
				if err == nil {
					return v
				}
			}
		}
	}
	return -1
}

// waitRenewed waits until the sidecar on port has had n more tokens
// issued: with the tenant just moved, issued by its new group.
func waitRenewed(tb testing.TB, port int, n float64, when string) {
	tb.Helper()
	from := sidecarTokensIssued(port)
	testenv.Eventually(tb, 20*time.Second, fmt.Sprintf("the sidecar to renew its token %v times %s", n, when), func() bool {
		return from >= 0 && sidecarTokensIssued(port) >= from+n
	})
}

// vipProbe calls GetResource through the VIP as a client behind the front
// end does: with the API key and the tenant's route entry.
type vipProber struct {
	conn *grpc.ClientConn
	pool repoolv1.PoolServiceClient
	ctx  context.Context
}

func (c *cluster) vipProbe(tb testing.TB) *vipProber {
	tb.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", vipAddr, grpcPort), grpc.WithTransportCredentials(c.creds()))
	if err != nil {
		tb.Fatal(err)
	}
	return &vipProber{conn: conn, pool: repoolv1.NewPoolServiceClient(conn),
		ctx: metadata.AppendToOutgoingContext(context.Background(), "x-api-key", c.apiKey, repoolv1.TenantRouteKey, "demo")}
}

func (p *vipProber) close() { p.conn.Close() }

// waitServed waits until a call for the tenant is served through the VIP.
func (p *vipProber) waitServed(tb testing.TB, within time.Duration) {
	tb.Helper()
	testenv.Eventually(tb, within, "a call through the VIP to be served", func() bool {
		ctx, cancel := context.WithTimeout(p.ctx, time.Second)
		defer cancel()
		_, err := p.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r-000"})
		return err == nil
	})
}
