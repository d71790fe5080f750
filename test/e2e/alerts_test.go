package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
)

// What TestAlerts runs besides the lab: Debian's packages prometheus and
// prometheus-node-exporter (scripts/test installs them).
const (
	prometheusBin    = "/usr/bin/prometheus"
	promtoolBin      = "/usr/bin/promtool"
	nodeExporterBin  = "/usr/bin/prometheus-node-exporter"
	promPort         = 9090 // Prometheus, on the mon host
	nodeExporterPort = 9100 // the node exporter on each LB host (prometheus.yml's)
	lbMonitorPort    = 8404 // HAProxy's monitor frontend (the inventory's default monitor_port)
)

// Bounds of TestAlerts.
const (
	// healthyWindow is how long the healthy cluster, under load, must
	// have no alert pending or firing: four rule evaluations at the
	// shipped 15 s.
	healthyWindow = 60 * time.Second
	// firingWithin bounds the wait for an alert to fire: the longest
	// for: of the alerts proved (1 m) plus a scrape and an evaluation
	// interval (15 s each), with room for a loaded machine.
	firingWithin = 3 * time.Minute
	// resolvedWithin bounds the wait for an alert to resolve after its
	// fault is repaired: a scrape, an evaluation, and the repair itself.
	resolvedWithin = 2 * time.Minute
)

// TestAlerts proves the alerts of deploy/monitoring against real faults.
// The lab of TestFailover (PostgreSQL, three servers in one group, two LB
// hosts with HAProxy and Keepalived, the sidecar, TLS on every hop) runs
// under the same load; Debian's node exporter on each LB host serves
// keepalived/notify.sh's state file, as docs/ha.md installs it; Debian's
// Prometheus on a host of its own scrapes the servers, the sidecar,
// HAProxy and the node exporters with deploy/monitoring/prometheus.yml,
// whose example addresses and credential paths are the only thing
// changed, and evaluates rules.yml and alerts.yml as shipped (15 s
// intervals, every for: as it is). The test asserts that
//
//   - on the healthy cluster no alert fires for healthyWindow, and every
//     rule evaluates without error (pending alerts are logged);
//   - for each fault the matching alert reaches firing, read from
//     Prometheus's API: the active server killed and not restarted and a
//     standby cut off (RepoolStandbyLost), the backup LB host cut off
//     (RepoolLBHostLost), VRRP blocked between the LB hosts
//     (RepoolVIPTwoHolders), and PostgreSQL killed (RepoolNoActiveServer,
//     RepoolDatabaseUnreachable, and RepoolSidecarBreakerOpened as the
//     sidecar's calls fail).
//
// The faults run in two rounds, those of a round side by side (they touch
// different alerts): the server faults and the LB host lost, then the
// database and split brain. Each firing time, from the fault to the first
// poll of the API that shows the alert firing, is printed as
// "measure: alert_<name>_firing_s=".
func TestAlerts(t *testing.T) {
	began := time.Now()
	c := claimRun(t, prometheusBin, promtoolBin, nodeExporterBin)
	c.build()
	network(t)
	// The shipped scrape configuration scrapes the servers over TLS.
	c.setupTLS()
	c.postgres()

	c.startFirst()
	c.startStandbys(hostS2, hostS3)
	b := c.frontEndAndClient("s1")
	for _, name := range []string{"lb1", "lb2"} {
		c.startNodeExporter(c.lbs[name])
	}
	prom := c.startPrometheus()
	t.Logf("cluster and monitoring up in %v", time.Since(began).Round(time.Millisecond))

	endLoad := startLoad(t, b)

	prom.waitTargetsUp(t, 60*time.Second)
	t.Logf("every target up %v after the start", time.Since(began).Round(time.Millisecond))
	// The rules evaluated on what the targets said: until the recording
	// rules run after every target's first scrape, the alerts read their
	// empty start (no LB host holds the VIP, say).
	prom.waitEvaluated(t, time.Now())

	// The healthy cluster, under load.
	prom.checkQuiet(t, healthyWindow)
	t.Logf("healthy cluster: no alert firing for %v", healthyWindow)

	// Faults in two rounds, the faults of each side by side (they touch
	// different alerts). First the server faults and an LB host lost;
	// then the database down and split brain, last: the one leaves no
	// server serving, the other, as it heals, can leave the client's ARP
	// entry for the VIP on the host that gave it up (its calls unanswered
	// until the entry is renewed).
	var (
		mu    sync.Mutex
		fired []firing
	)
	round := func(faults ...func(*promClient) ([]firing, error)) {
		t.Helper()
		var wg sync.WaitGroup
		var errs []error
		for _, f := range faults {
			wg.Go(func() {
				got, err := f(prom)
				mu.Lock()
				defer mu.Unlock()
				fired = append(fired, got...)
				if err != nil {
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("alerts now: %s", prom.describe())
			printFirings(t, fired)
			t.FailNow()
		}
	}
	round(c.serverFaults, c.lbHostLost)
	// The breaker must not have opened yet: its alert counts openings
	// over 5 minutes, and would be firing already.
	if err := prom.waitResolved("RepoolSidecarBreakerOpened"); err != nil {
		t.Fatalf("the sidecar's breaker opened before the database fault (sidecar: %s): %v", sidecarCounters(), err)
	}
	round(c.databaseDown, c.splitBrain)
	endLoad()

	fmt.Printf("measure: alerts_healthy_window_s=%.0f\n", healthyWindow.Seconds())
	printFirings(t, fired)
	t.Logf("whole test %v", time.Since(began).Round(time.Millisecond))
}

// printFirings logs the firings and prints them as measure lines.
func printFirings(t *testing.T, fired []firing) {
	sort.Slice(fired, func(i, j int) bool { return fired[i].measure < fired[j].measure })
	for _, f := range fired {
		t.Logf("%s firing %.1f s after: %s", f.alert, f.after.Seconds(), f.fault)
	}
	for _, f := range fired {
		fmt.Printf("measure: %s=%.1f\n", f.measure, f.after.Seconds())
	}
}

// firing is an alert that reached firing after a fault.
type firing struct {
	measure string // name of its measure line
	alert   string
	fault   string
	after   time.Duration // from the fault to the first poll that showed it firing
}

// serverFaults kills the active server (kill -9, not restarted at first):
// RepoolStandbyLost must fire; then starts it again (it rejoins as a
// standby) and waits for the alert to resolve; then cuts a standby's link:
// RepoolStandbyLost must fire again. The standby's link is restored at
// the end.
func (c *cluster) serverFaults(p *promClient) ([]firing, error) {
	var out []firing
	act := c.active()
	if len(act) != 1 {
		return nil, fmt.Errorf("%d active servers before the server faults, want 1", len(act))
	}
	old := act[0]
	t0 := time.Now()
	c.tb.Logf("---- %s kill -9 the active server %s", t0.Format("15:04:05.000"), old.host.name)
	old.p.kill9()
	after, err := p.waitFiring(t0, "RepoolStandbyLost")
	if err != nil {
		return out, fmt.Errorf("after kill -9 of the active server %s: %w", old.host.name, err)
	}
	out = append(out, firing{"alert_RepoolStandbyLost_active_killed_firing_s", "RepoolStandbyLost", "kill -9 of the active server " + old.host.name, after["RepoolStandbyLost"]})

	// Replaced, it rejoins as a standby: the alert resolves.
	t1 := time.Now()
	c.startServer(old.host)
	if err := p.waitResolved("RepoolStandbyLost"); err != nil {
		return out, fmt.Errorf("after %s was started again: %w", old.host.name, err)
	}
	c.tb.Logf("RepoolStandbyLost resolved %v after %s was started again", time.Since(t1).Round(time.Millisecond), old.host.name)

	// A standby lost: its link cut.
	var standby *server
	for _, name := range []string{"s1", "s2", "s3"} {
		if s := c.servers[name]; !s.p.exited() && s.readyActive() == http.StatusNotFound {
			standby = s
			break
		}
	}
	if standby == nil {
		return out, errors.New("no healthy standby to cut off")
	}
	t0 = time.Now()
	c.tb.Logf("---- %s link of the standby %s down", t0.Format("15:04:05.000"), standby.host.name)
	if _, err := ipErr("-n", switchNS, "link", "set", standby.host.port(), "down"); err != nil {
		return out, err
	}
	after, err = p.waitFiring(t0, "RepoolStandbyLost")
	if _, err := ipErr("-n", switchNS, "link", "set", standby.host.port(), "up"); err != nil {
		return out, err
	}
	if err != nil {
		return out, fmt.Errorf("after the standby %s was cut off: %w", standby.host.name, err)
	}
	out = append(out, firing{"alert_RepoolStandbyLost_firing_s", "RepoolStandbyLost", "the standby " + standby.host.name + " cut off", after["RepoolStandbyLost"]})
	return out, nil
}

// lbHostLost cuts the backup LB host's link: RepoolLBHostLost must fire;
// then restores it and waits for the alert to resolve.
func (c *cluster) lbHostLost(p *promClient) ([]firing, error) {
	var out []firing
	held := vipHolders(hostLB1, hostLB2)
	if len(held) != 1 {
		return nil, fmt.Errorf("VIP holders %v before the LB faults, want one", held)
	}
	backup := c.lbs["lb2"]
	if held[0] == "lb2" {
		backup = c.lbs["lb1"]
	}
	t0 := time.Now()
	c.tb.Logf("---- %s link of the backup LB host %s down", t0.Format("15:04:05.000"), backup.host.name)
	if _, err := ipErr("-n", switchNS, "link", "set", backup.host.port(), "down"); err != nil {
		return out, err
	}
	after, err := p.waitFiring(t0, "RepoolLBHostLost")
	if _, err := ipErr("-n", switchNS, "link", "set", backup.host.port(), "up"); err != nil {
		return out, err
	}
	if err != nil {
		return out, fmt.Errorf("after the LB host %s was cut off: %w", backup.host.name, err)
	}
	out = append(out, firing{"alert_RepoolLBHostLost_firing_s", "RepoolLBHostLost", "the backup LB host " + backup.host.name + " cut off", after["RepoolLBHostLost"]})
	t1 := time.Now()
	if err := p.waitResolved("RepoolLBHostLost", "RepoolVIPTwoHolders", "RepoolVIPNoHolder"); err != nil {
		return out, fmt.Errorf("after the link of %s was restored: %w", backup.host.name, err)
	}
	c.tb.Logf("RepoolLBHostLost resolved %v after the link of %s was restored; VIP on %v", time.Since(t1).Round(time.Millisecond), backup.host.name, vipHolders(hostLB1, hostLB2))
	return out, nil
}

// splitBrain blocks VRRP between the LB hosts: both become MASTER and
// RepoolVIPTwoHolders must fire. VRRP flows again at the end.
func (c *cluster) splitBrain(p *promClient) ([]firing, error) {
	var out []firing
	// Split brain: the LB hosts stop hearing each other's VRRP adverts.
	// Each sends them (unicast) to a MAC address nobody has, from a
	// permanent neighbour entry: the bridge floods the frames, the peer's
	// stack drops them as not its own. (Keepalived sends its adverts
	// past the routing table: a blackhole route does not stop them.)
	lb1, lb2 := c.lbs["lb1"], c.lbs["lb2"]
	neigh := [][]string{
		{"-n", lb1.host.ns(), "neigh", "replace", lb2.host.addr, "lladdr", "02:00:00:00:00:02", "nud", "permanent", "dev", hostDev},
		{"-n", lb2.host.ns(), "neigh", "replace", lb1.host.addr, "lladdr", "02:00:00:00:00:01", "nud", "permanent", "dev", hostDev},
	}
	t0 := time.Now()
	c.tb.Logf("---- %s VRRP blocked between lb1 and lb2", t0.Format("15:04:05.000"))
	for _, n := range neigh {
		if _, err := ipErr(n...); err != nil {
			return out, err
		}
	}
	after, err := p.waitFiring(t0, "RepoolVIPTwoHolders")
	c.tb.Logf("VIP holders while VRRP is blocked: %v", vipHolders(hostLB1, hostLB2))
	for _, n := range neigh {
		if _, err := ipErr(append(slices.Clone(n[:3]), "del", n[4], "dev", hostDev)...); err != nil {
			return out, err
		}
	}
	if err != nil {
		return out, fmt.Errorf("after VRRP was blocked between the LB hosts: %w", err)
	}
	out = append(out, firing{"alert_RepoolVIPTwoHolders_firing_s", "RepoolVIPTwoHolders", "VRRP blocked between the LB hosts", after["RepoolVIPTwoHolders"]})
	return out, nil
}

// databaseDown kills PostgreSQL: RepoolNoActiveServer (no server can
// lead), RepoolDatabaseUnreachable (no server's election reaches it) and
// RepoolSidecarBreakerOpened (the sidecar's calls go unanswered) must
// fire. It is not started again.
func (c *cluster) databaseDown(p *promClient) ([]firing, error) {
	var out []firing
	t0 := time.Now()
	c.tb.Logf("---- %s kill -9 PostgreSQL", t0.Format("15:04:05.000"))
	c.pg.kill9()
	names := []string{"RepoolNoActiveServer", "RepoolDatabaseUnreachable", "RepoolSidecarBreakerOpened"}
	after, err := p.waitFiring(t0, names...)
	for _, name := range names {
		if d, ok := after[name]; ok {
			out = append(out, firing{"alert_" + name + "_firing_s", name, "PostgreSQL killed", d})
		}
	}
	if err != nil {
		return out, fmt.Errorf("after PostgreSQL was killed: %w", err)
	}
	return out, nil
}

// startNodeExporter runs Debian's node exporter on l, on its own address,
// serving the directory of l's state_metrics file (the textfile collector,
// as docs/ha.md installs it; the host's own collectors are left out: no
// rule reads them).
func (c *cluster) startNodeExporter(l *lb) {
	c.tb.Helper()
	c.ps.start("node-exporter-"+l.host.name, l.host.ns(), nil, nodeExporterBin,
		fmt.Sprintf("--web.listen-address=%s:%d", l.host.addr, nodeExporterPort),
		"--collector.disable-defaults", "--collector.textfile", "--collector.textfile.directory="+filepath.Dir(l.stateMetrics))
}

// startPrometheus renders deploy/monitoring's configuration for the lab,
// with the monitoring identity (a client certificate of the run's CA and
// a metrics token), and runs Prometheus on the mon host.
func (c *cluster) startPrometheus() *promClient {
	c.tb.Helper()
	dir := filepath.Join(c.dir, "prometheus")
	creds := filepath.Join(dir, "repool")
	if err := os.MkdirAll(creds, 0o755); err != nil {
		c.tb.Fatal(err)
	}
	ca, err := os.ReadFile(c.tls.caFile)
	if err != nil {
		c.tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "ca.crt"), ca, 0o644); err != nil {
		c.tb.Fatal(err)
	}
	c.tls.issue("prometheus").Write(c.tb, creds, "prometheus")
	// The metrics token, as docs/ha.md has the operator make it.
	var stderr strings.Builder
	cmd := exec.Command(c.serverBin, "admin-token", "--role", "metrics", "--ttl", "8760h", "--store", c.dsn)
	cmd.Stderr = &stderr
	tok, err := cmd.Output()
	if err != nil {
		c.tb.Fatalf("server admin-token --role metrics = got error %v, want nil\n%s", err, stderr.String())
	}
	if err := os.WriteFile(filepath.Join(creds, "metrics.token"), tok, 0o600); err != nil {
		c.tb.Fatal(err)
	}

	cfg := c.renderPromConfig(dir, creds)
	if out, err := exec.Command(promtoolBin, "check", "config", cfg).CombinedOutput(); err != nil {
		c.tb.Fatalf("promtool check config %s = got error %v, want nil\n%s", cfg, err, out)
	}
	c.ps.start("prometheus", hostMon.ns(), nil, prometheusBin, "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), fmt.Sprintf("--web.listen-address=%s:%d", hostMon.addr, promPort))
	p := &promClient{base: fmt.Sprintf("http://%s:%d", hostMon.addr, promPort), http: &http.Client{Timeout: 5 * time.Second}}
	testenv.Eventually(c.tb, 30*time.Second, "Prometheus to be ready", func() bool {
		resp, err := p.http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// renderPromConfig writes deploy/monitoring/prometheus.yml into dir as an
// operator installs it for the lab: its example addresses (deploy/config's
// and haproxy/inventory.yaml's) become the lab hosts', its credential
// directory creds; nothing else changes. rules.yml and alerts.yml go
// beside it, as it names them.
func (c *cluster) renderPromConfig(dir, creds string) string {
	c.tb.Helper()
	src := filepath.Join(c.root, "deploy", "monitoring")
	raw, err := os.ReadFile(filepath.Join(src, "prometheus.yml"))
	if err != nil {
		c.tb.Fatal(err)
	}
	addr := func(h host, port int) string { return fmt.Sprintf("%s:%d", h.addr, port) }
	var pairs []string
	for _, r := range []struct{ from, to string }{
		{"/etc/prometheus/repool/", creds + "/"},
		{"10.0.0.21:8081", addr(hostS1, httpPort)},
		{"10.0.0.22:8081", addr(hostS2, httpPort)},
		{"10.0.0.23:8081", addr(hostS3, httpPort)},
		{"127.0.0.1:7070", addr(hostClient, sidecarPort)},
		{"10.0.0.11:8404", addr(hostLB1, lbMonitorPort)},
		{"10.0.0.12:8404", addr(hostLB2, lbMonitorPort)},
		{"10.0.0.11:9100", addr(hostLB1, nodeExporterPort)},
		{"10.0.0.12:9100", addr(hostLB2, nodeExporterPort)},
	} {
		if !strings.Contains(string(raw), r.from) {
			c.tb.Fatalf("deploy/monitoring/prometheus.yml does not name %s: TestAlerts renders it for the lab by replacing its example addresses; update the list", r.from)
		}
		pairs = append(pairs, r.from, r.to)
	}
	out := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(out, []byte(strings.NewReplacer(pairs...).Replace(string(raw))), 0o644); err != nil {
		c.tb.Fatal(err)
	}
	for _, name := range []string{"rules.yml", "alerts.yml"} {
		raw, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			c.tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			c.tb.Fatal(err)
		}
	}
	return out
}

// promClient reads Prometheus's HTTP API.
type promClient struct {
	base string
	http *http.Client
}

// get reads an API path's data into v.
func (p *promClient) get(path string, v any) error {
	resp, err := p.http.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("GET %s: %d %.200s: %w", path, resp.StatusCode, raw, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s %s", path, env.Status, env.Error)
	}
	return json.Unmarshal(env.Data, v)
}

// promAlert is an alert of /api/v1/alerts: pending or firing.
type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

func (a promAlert) String() string {
	var ls []string
	for k, v := range a.Labels {
		if k != "alertname" {
			ls = append(ls, k+"="+v)
		}
	}
	sort.Strings(ls)
	return fmt.Sprintf("%s %s since %s {%s}", a.Labels["alertname"], a.State, a.ActiveAt.Format("15:04:05"), strings.Join(ls, ", "))
}

func (p *promClient) alerts() ([]promAlert, error) {
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", &d)
	return d.Alerts, err
}

// describe lists the active alerts, for the log.
func (p *promClient) describe() string {
	as, err := p.alerts()
	if err != nil {
		return err.Error()
	}
	if len(as) == 0 {
		return "none"
	}
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, "; ")
}

// waitTargetsUp waits until every target of the configuration has been
// scraped and is up.
func (p *promClient) waitTargetsUp(tb testing.TB, within time.Duration) {
	tb.Helper()
	type target struct {
		Labels    map[string]string `json:"labels"`
		Health    string            `json:"health"`
		LastError string            `json:"lastError"`
	}
	var last []target
	defer func() {
		if tb.Failed() {
			for _, t := range last {
				tb.Logf("target %s %s: %s %s", t.Labels["job"], t.Labels["instance"], t.Health, t.LastError)
			}
		}
	}()
	// Three servers, the sidecar, two HAProxies, two node exporters.
	const want = 8
	testenv.Eventually(tb, within, fmt.Sprintf("Prometheus to have its %d targets up", want), func() bool {
		var d struct {
			ActiveTargets []target `json:"activeTargets"`
		}
		if err := p.get("/api/v1/targets", &d); err != nil {
			return false
		}
		last = d.ActiveTargets
		up := 0
		for _, t := range last {
			if t.Health == "up" {
				up++
			}
		}
		return len(last) == want && up == want
	})
}

// promRules is /api/v1/rules.
type promRules struct {
	Groups []struct {
		Name           string    `json:"name"`
		LastEvaluation time.Time `json:"lastEvaluation"`
		Rules          []struct {
			Name           string    `json:"name"`
			Type           string    `json:"type"`     // recording, alerting
			Duration       float64   `json:"duration"` // an alert's for:, in seconds
			Health         string    `json:"health"`
			LastError      string    `json:"lastError"`
			LastEvaluation time.Time `json:"lastEvaluation"`
		} `json:"rules"`
	} `json:"groups"`
}

// waitEvaluated waits until the recording rules have been evaluated after
// since, and then every group of alerts after them.
func (p *promClient) waitEvaluated(tb testing.TB, since time.Time) {
	tb.Helper()
	// evaluated says whether every group of recording rules (or of
	// alerts) was evaluated after after, and when the last one was.
	evaluated := func(recording bool, after time.Time) (time.Time, bool) {
		var d promRules
		if err := p.get("/api/v1/rules", &d); err != nil || len(d.Groups) == 0 {
			return time.Time{}, false
		}
		var latest time.Time
		for _, g := range d.Groups {
			if len(g.Rules) == 0 || (g.Rules[0].Type == "recording") != recording {
				continue
			}
			if !g.LastEvaluation.After(after) {
				return time.Time{}, false
			}
			if g.LastEvaluation.After(latest) {
				latest = g.LastEvaluation
			}
		}
		return latest, !latest.IsZero()
	}
	var rec time.Time
	testenv.Eventually(tb, time.Minute, "the recording rules to be evaluated", func() bool {
		var ok bool
		rec, ok = evaluated(true, since)
		return ok
	})
	testenv.Eventually(tb, time.Minute, "the alerts to be evaluated after the recording rules", func() bool {
		_, ok := evaluated(false, rec)
		return ok
	})
}

// checkQuiet fails tb if an alert is firing at any poll within window, or
// if a rule was not evaluated in the window or failed. Pending alerts are
// logged, those whose for: is no longer than window (they could have
// fired within it) as such: on a machine loaded far beyond its cores
// HAProxy's 100 ms checks time out now and then, and a server is DOWN
// for a check or two; the calls' latency rises.
func (p *promClient) checkQuiet(tb testing.TB, window time.Duration) {
	tb.Helper()
	var d promRules
	if err := p.get("/api/v1/rules", &d); err != nil {
		tb.Fatalf("Prometheus's rules: %v", err)
	}
	holdFor := map[string]time.Duration{}
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" {
				holdFor[r.Name] = time.Duration(r.Duration * float64(time.Second))
			}
		}
	}
	from := time.Now()
	seen := map[string]promAlert{}
	for time.Since(from) < window {
		as, err := p.alerts()
		if err != nil {
			tb.Fatalf("Prometheus's alerts: %v", err)
		}
		for _, a := range as {
			if _, ok := seen[a.String()]; ok {
				continue
			}
			seen[a.String()] = a
			switch hold := holdFor[a.Labels["alertname"]]; {
			case a.State == "firing":
				tb.Errorf("on the healthy cluster, %.0f s into the window: %s", time.Since(from).Seconds(), a)
			case hold <= window:
				tb.Logf("on the healthy cluster, %.0f s into the window (for: %v, within the window; it did not fire): %s", time.Since(from).Seconds(), hold, a)
			default:
				tb.Logf("on the healthy cluster, %.0f s into the window (for: %v, longer than the window): %s", time.Since(from).Seconds(), hold, a)
			}
		}
		time.Sleep(time.Second) // polls over a window of Prometheus's real time
	}
	if err := p.get("/api/v1/rules", &d); err != nil {
		tb.Fatalf("Prometheus's rules: %v", err)
	}
	n := 0
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" || r.LastEvaluation.Before(from) {
				tb.Errorf("rule %s (group %s): health %q %s, last evaluated %s: want ok, evaluated in the window from %s",
					r.Name, g.Name, r.Health, r.LastError, r.LastEvaluation.Format("15:04:05"), from.Format("15:04:05"))
			}
		}
	}
	if n == 0 {
		tb.Errorf("Prometheus has loaded no rule")
	}
}

// waitFiring polls the alerts until each of names is firing, and returns
// for each the time from t0 to the poll that first showed it firing; the
// error names those that did not fire within firingWithin.
func (p *promClient) waitFiring(t0 time.Time, names ...string) (map[string]time.Duration, error) {
	after := map[string]time.Duration{}
	var last []promAlert
	for time.Since(t0) < firingWithin {
		as, err := p.alerts()
		if err == nil {
			last = as
		}
		for _, a := range as {
			n := a.Labels["alertname"]
			if _, done := after[n]; !done && a.State == "firing" && slices.Contains(names, n) {
				after[n] = time.Since(t0)
			}
		}
		if len(after) == len(names) {
			return after, nil
		}
		time.Sleep(250 * time.Millisecond) // polls Prometheus, which evaluates in its own time
	}
	var missing []string
	for _, n := range names {
		if _, ok := after[n]; !ok {
			missing = append(missing, n)
		}
	}
	var now []string
	for _, a := range last {
		now = append(now, a.String())
	}
	return after, fmt.Errorf("%s not firing within %v; active alerts: %v", strings.Join(missing, ", "), firingWithin, now)
}

// waitResolved waits until no alert of names is pending or firing.
func (p *promClient) waitResolved(names ...string) error {
	t0 := time.Now()
	var last []promAlert
	for time.Since(t0) < resolvedWithin {
		as, err := p.alerts()
		if err == nil {
			last = slices.DeleteFunc(as, func(a promAlert) bool { return !slices.Contains(names, a.Labels["alertname"]) })
			if len(last) == 0 {
				return nil
			}
		}
		time.Sleep(250 * time.Millisecond) // polls Prometheus, which evaluates in its own time
	}
	return fmt.Errorf("still active after %v: %v", resolvedWithin, last)
}
