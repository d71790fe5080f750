package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
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
//	(e) moves it to b and back again.
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

	loadCtx, stopLoad := context.WithCancel(context.Background())
	var loadWG sync.WaitGroup
	loadWG.Go(func() { b.run(loadCtx, "late-") })
	var stopOnce sync.Once
	endLoad := func() { stopOnce.Do(func() { stopLoad(); loadWG.Wait() }) }
	t.Cleanup(endLoad)
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
		refused := c.moveTenant(t, src, "demo", to)
		// The window: until a call through the VIP is served again.
		probe.waitServed(t, 20*time.Second)
		w := time.Since(t0)
		windows = append(windows, w)
		t.Logf("moved to %s: calls served again through the VIP %v after the move began (the source refused them for %v)",
			to, w.Round(time.Millisecond), refused.Round(time.Millisecond))
		time.Sleep(time.Second) // load on the tenant's new group, in real time, before the next step
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
		c.startServer(old.host)
		testenv.Eventually(t, 30*time.Second, "the restarted "+old.host.name+" to be a healthy standby", func() bool {
			return c.servers[old.host.name].readyActive() == http.StatusNotFound
		})
		time.Sleep(time.Second) // load on the restored group before the next step
	}
	move("b")
	kill("b")
	move("default")
	kill("default")
	move("b")
	move("default")
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

// moveTenant moves tenant to group through the control plane of src, the
// active server of its group, and returns how long src refused its calls.
func (c *cluster) moveTenant(tb testing.TB, src *server, tenant, to string) time.Duration {
	tb.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: probe.Transport}
	req, _ := http.NewRequest(http.MethodPost, src.httpURL("/api/v1/tenants/"+tenant+"/move"), strings.NewReader(`{"group":"`+to+`"}`))
	req.Header.Set("Authorization", "Bearer "+c.opToken)
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("POST move of %s to %s on %s = %v", tenant, to, src.host.name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		RefusedMS int64 `json:"refused_ms"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
		tb.Fatalf("POST move of %s to %s on %s = %d %s, want 200", tenant, to, src.host.name, resp.StatusCode, raw)
	}
	return time.Duration(out.RefusedMS) * time.Millisecond
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
