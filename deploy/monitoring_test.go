package deploy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The files of deploy/monitoring.
const (
	rulesFile     = "monitoring/rules.yml"
	alertsFile    = "monitoring/alerts.yml"
	promConfig    = "monitoring/prometheus.yml"
	dashboardFile = "monitoring/dashboard.json"
	ruleTests     = "monitoring/tests"
)

// promtool runs Debian's promtool (package prometheus) and fails t with
// its output if it fails.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (Debian package prometheus; scripts/test installs it): %v", err)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s = %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Record, Alert, Expr string
		}
	}
}

func readRules(t *testing.T, path string) ruleFile {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// TestMonitoringRules: promtool accepts the rule files and the example
// configuration, the rules' unit tests pass, and every alert has a test in
// which it fires.
func TestMonitoringRules(t *testing.T) {
	promtool(t, "check", "rules", rulesFile, alertsFile)
	// --syntax-only: the credential files it names exist only on a
	// Prometheus host.
	promtool(t, "check", "config", "--syntax-only", promConfig)
	tests, err := filepath.Glob(filepath.Join(ruleTests, "*.yml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests in %s (%v)", ruleTests, err)
	}
	promtool(t, append([]string{"test", "rules"}, tests...)...)

	// Every alert fires in some test (an exp_alerts list that is not
	// empty under its name).
	fired := map[string]bool{}
	for _, path := range tests {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Tests []struct {
				AlertRuleTest []struct {
					Alertname string
					ExpAlerts []any `yaml:"exp_alerts"`
				} `yaml:"alert_rule_test"`
			}
		}
		if err := yaml.Unmarshal(raw, &f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, tc := range f.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				}
			}
		}
	}
	alerts := 0
	for _, g := range readRules(t, alertsFile).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("%s: group %s has a rule that is no alert (recording rules go in %s)", alertsFile, g.Name, rulesFile)
				continue
			}
			alerts++
			if !fired[r.Alert] {
				t.Errorf("alert %s fires in no test of %s", r.Alert, ruleTests)
			}
		}
	}
	if alerts == 0 {
		t.Fatalf("%s holds no alert", alertsFile)
	}
}

// promQLNames returns the metric names an expression selects: every
// identifier that is not a function or aggregation (followed by "("), a
// keyword, a label (inside {} or the parentheses of by, without, on,
// ignoring, group_left, group_right), a string or a duration.
func promQLNames(expr string) []string {
	s := regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`).ReplaceAllString(expr, `""`)
	s = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(s, " ")
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
		"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
	var names []string
	for _, m := range regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`).FindAllStringIndex(s, -1) {
		tok := s[m[0]:m[1]]
		if strings.HasSuffix(tok, "(") {
			continue
		}
		if m[0] > 0 && (s[m[0]-1] >= '0' && s[m[0]-1] <= '9' || s[m[0]-1] == '.') {
			continue // a number's exponent or a duration's unit
		}
		if keywords[strings.ToLower(tok)] {
			continue
		}
		names = append(names, tok)
	}
	return names
}

func TestPromQLNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (job, instance) (rate(repool_grpc_requests_total{code=~"Unavailable|Internal"}[5m]))`: {"repool_grpc_requests_total"},
		`(time() - a_seconds > 60) unless on (instance) b == 0`:                                       {"a_seconds", "b"},
		`histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m]))) > 1e3`:                            {"x_bucket"},
		`sum(repool_keepalived_master) or vector(0)`:                                                  {"repool_keepalived_master"},
		`x - time() < 14 * 86400`:                                                                     {"x"},
		`proxy:haproxy_servers_healthy:sum < count by (instance, proxy) (y{state="UP"})`:              {"proxy:haproxy_servers_healthy:sum", "y"},
		`increase(z{to="open", from='x'}[5m] offset 1h) > 0`:                                          {"z"},
	} {
		if got := promQLNames(expr); !slices.Equal(got, want) {
			t.Errorf("promQLNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// usedNames returns every metric name the rules and the dashboard select,
// each with where it is used, leaving out the recording rules' own series
// and `up`, which Prometheus makes for every target.
func usedNames(t *testing.T) map[string]string {
	t.Helper()
	recorded := map[string]bool{"up": true}
	used := map[string]string{}
	for _, path := range []string{rulesFile, alertsFile} {
		for _, g := range readRules(t, path).Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					recorded[r.Record] = true
				}
				for _, n := range promQLNames(r.Expr) {
					used[n] = path + ": " + r.Record + r.Alert
				}
			}
		}
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range promQLNames(tg.Expr) {
				used[n] = dashboardFile + ": " + p.Title
			}
		}
	}
	for n := range used {
		if recorded[n] {
			delete(used, n)
		}
	}
	return used
}

// TestMonitoringMetricsExported: every metric that a rule, an alert or a
// dashboard panel names is exported by a running server (HA on PostgreSQL,
// TLS with client certificates, scraped with Prometheus's certificate), a
// sidecar in front of it, HAProxy with the rendered configuration, or
// keepalived/notify.sh's state file.
func TestMonitoringMetricsExported(t *testing.T) {
	used := usedNames(t)
	exported := map[string]string{}
	add := func(source string, text []byte) {
		t.Helper()
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(text))
		if err != nil {
			t.Fatalf("%s's metrics do not parse: %v", source, err)
		}
		for name, mf := range mfs {
			exported[name] = source
			if mf.GetType().String() == "HISTOGRAM" {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					exported[name+suffix] = source
				}
			}
		}
	}

	dir := t.TempDir()
	ca := tlstest.NewCA(t, "repool monitoring test CA")
	caFile := ca.WriteCA(dir, "ca.crt")
	srvCert, srvKey := ca.Issue("server", "localhost", "127.0.0.1").Write(t, dir, "server")
	promCert, promKey := ca.Issue("prometheus").Write(t, dir, "prometheus")
	scCert, scKey := ca.Issue("sidecar").Write(t, dir, "sidecar")
	bins := buildCommands(t, dir)

	// The server: HA on PostgreSQL, TLS with client certificates.
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	srv := startProcess(t, "server", bins["server"], "run", "--ha", "--store", testenv.Postgres(t),
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--tls-cert", srvCert, "--tls-key", srvKey, "--tls-client-ca", caFile,
		"--log-level", "warn")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	pair, err := tls.LoadX509KeyPair(promCert, promKey)
	if err != nil {
		t.Fatal(err)
	}
	prometheus := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{pair}, ServerName: "localhost", MinVersion: tls.VersionTLS12,
	}}}
	testenv.Eventually(t, 60*time.Second, "the server to be active", func() bool {
		srv.alive(t)
		code, _ := get(prometheus, "https://"+httpAddr+"/readyz/active")
		return code == 200 && demoKeyRE.MatchString(srv.out.String())
	})
	key := demoKeyRE.FindStringSubmatch(srv.out.String())[1]

	// The sidecar in front of it, with its client certificate.
	keyFile := filepath.Join(dir, "demo.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	scConfig := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(scConfig, fmt.Appendf(nil, "listen: %s\nproviders:\n  default:\n    endpoint: %s\n    api_key_file: %s\n    tls: {ca_file: %s, server_name: localhost, cert_file: %s, key_file: %s}\n",
		listen, grpcAddr, keyFile, caFile, scCert, scKey), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := startProcess(t, "sidecar", bins["sidecar"], "--config", scConfig)
	testenv.Eventually(t, 30*time.Second, "the sidecar to answer /healthz", func() bool {
		sc.alive(t)
		code, _ := get(http.DefaultClient, "http://"+listen+"/healthz")
		return code == 200
	})
	// One call of each kind the dashboard shows, through the sidecar.
	base := "http://" + listen + "/v1/providers/default"
	for _, c := range []struct{ path, body string }{
		{"/resources", `{"resources":[{"id":"r1"}]}`},
		{"/acquire", `{"context":"x","ttl_seconds":60}`},
		{"/reports", `{"resource_id":"r1","context":"x","outcome":"FAILURE"}`},
	} {
		resp, err := http.Post(base+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatalf("POST %s: %v", c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s = %d %s, want 200", c.path, resp.StatusCode, body)
		}
	}
	code, body := get(prometheus, "https://"+httpAddr+"/metrics")
	if code != 200 {
		t.Fatalf("server /metrics with Prometheus's certificate = %d, want 200", code)
	}
	add("the server", body)
	if code, body = get(http.DefaultClient, "http://"+listen+"/metrics"); code != 200 {
		t.Fatalf("sidecar /metrics = %d, want 200", code)
	}
	add("the sidecar", body)

	// HAProxy with the rendered configuration, in front of an active, a
	// standby and a broken server.
	trio := haproxytest.StartTrio(t)
	lb1, err := trio.Inv.Host("lb1")
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := fmt.Sprintf("http://%s:%d/metrics", lb1.Address, lb1.MonitorPort)
	if code, body = get(http.DefaultClient, metricsURL); code != 200 {
		t.Fatalf("HAProxy %s = %d, want 200 (the exporter in the rendered configuration)", metricsURL, code)
	}
	add("HAProxy", body)

	// keepalived/notify.sh's state file, which the node exporter serves.
	state := filepath.Join(dir, "textfile", "keepalived-repool-lb1.prom")
	if out, err := exec.Command("../keepalived/notify.sh", filepath.Join(dir, "notify.log"), state, "INSTANCE", "repool", "MASTER", "250").CombinedOutput(); err != nil {
		t.Fatalf("notify.sh = %v\n%s", err, out)
	}
	raw, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	add("keepalived/notify.sh", raw)

	var missing []string
	for n, where := range used {
		if _, ok := exported[n]; !ok {
			missing = append(missing, n+" ("+where+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("named by the rules or the dashboard but exported by nothing that runs:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(used) < 30 {
		t.Errorf("found %d metric names in the rules and the dashboard, want at least 30 (is promQLNames broken?)", len(used))
	}
}

// demoKeyRE finds the demo tenant's API key in a server's first-start
// banner.
var demoKeyRE = regexp.MustCompile(`demo API key:\s+(\S+)`)

// buildCommands builds cmd/server and cmd/sidecar into dir.
func buildCommands(t *testing.T, dir string) map[string]string {
	t.Helper()
	bins := map[string]string{}
	for _, name := range []string{"server", "sidecar"} {
		bins[name] = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", bins[name], "github.com/repool/repool/cmd/"+name).CombinedOutput(); err != nil {
			t.Fatalf("go build cmd/%s = %v\n%s", name, err, out)
		}
	}
	return bins
}

// process is a running command whose output is kept; the test's end
// stops it.
type process struct {
	name string
	out  *testenv.Output
	done chan struct{}
}

func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	p := &process{name: name, out: &testenv.Output{}, done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, p.out.String())
		}
	})
	return p
}

// alive fails t if the process exited.
func (p *process) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%s exited:\n%s", p.name, p.out.String())
	default:
	}
}

// get returns a GET's status and body; status 0 if it got no answer.
func get(c *http.Client, url string) (int, []byte) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
