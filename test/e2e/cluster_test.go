package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	lbhaproxy "github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/pgcluster"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/test/internal/dbtier"
)

// Tools the test runs. scripts/test installs them.
const (
	pgBin         = "/usr/lib/postgresql/15/bin"
	haproxyBin    = "/usr/sbin/haproxy"
	keepalivedBin = "/usr/sbin/keepalived"
	scriptHint    = "run scripts/test as root: it installs PostgreSQL 15, HAProxy, Keepalived, iproute2, curl, tcpdump, Prometheus and its node exporter"
)

// Ports and timings of the cluster under test.
const (
	grpcPort       = 9090 // servers and the VIP
	httpPort       = 8081 // servers: health, metrics
	pgPort         = 5432
	sidecarPort    = 7070
	sessionTimeout = 2 * time.Second // --ha-session-timeout
)

// cluster is one run's topology and processes.
type cluster struct {
	tb   testing.TB
	dir  string // run directory: binaries, configs, logs, PostgreSQL data
	root string // module root
	ps   *procs

	serverBin, sidecarBin string

	pg     *proc     // PostgreSQL
	dsn    string    // the servers' store
	db     *pgx.Conn // the test's own connection (root namespace)
	apiKey string    // the key of the tenant the sidecar calls for
	tenant string    // that tenant: "" is the demo tenant

	// rb builds and runs the parts as docs/ha.md says to (TestRunbook);
	// nil: the lab's own way (flags, the test's CA).
	rb *runbook

	servers map[string]*server
	lbs     map[string]*lb
	sidecar *proc
	tls     *tlsFiles // nil: plaintext (REPOOL_E2E_PLAINTEXT)

	// dbNodes are the database tier's nodes behind HAProxy on the VIP
	// (TestDatabaseFailover); nil: PostgreSQL on the db host, reached
	// directly.
	dbNodes []dbtier.NodeSpec

	// groups places server hosts (by name) in groups of servers
	// (TestGroups); nil: one group of s1, s2 and s3, as before groups.
	groups  map[string]string
	opToken string // the operator token the first server printed
}

// server is one repool server host.
type server struct {
	host host
	p    *proc
}

// stateMetricsFile is the name of an LB host's state_metrics file in its
// directory.
const stateMetricsFile = "keepalived.prom"

// lb is one load-balancer host: HAProxy and Keepalived.
type lb struct {
	host       host
	dir        string
	haproxyCfg string
	kaConf     string
	socket     string // HAProxy stats socket
	notifyLog  string
	// stateMetrics is the file notify.sh rewrites with the VRRP state
	// (inventory lb_hosts[].state_metrics).
	stateMetrics string
	haproxy      *proc
	keepalived   *proc
}

// claimRun starts a run of an e2e test: it checks that the test runs as
// root with the tools it needs (those every run needs, and more), takes
// the machine-wide run lock, removes what a crashed run left, and returns
// a new cluster, with the watchdog that cleans up after a dead test and,
// if the test fails, every process's log.
func claimRun(t *testing.T, more ...string) *cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("%s builds network namespaces and must run as root (euid %d); %s", t.Name(), os.Geteuid(), scriptHint)
	}
	for _, bin := range append([]string{"ip", "setpriv", "curl", haproxyBin, keepalivedBin, pgBin + "/initdb", pgBin + "/postgres"}, more...) {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found (%v): %s", bin, err, scriptHint)
		}
	}
	lock := lockRun(t)
	t.Cleanup(func() { lock.Close() })
	removeLeftovers(t)
	c := newCluster(t)
	t.Cleanup(watchdog(t, lock, c.dir))
	t.Cleanup(func() {
		if t.Failed() {
			c.dump()
		}
	})
	return c
}

// newCluster prepares the run directory and the binaries; the caller
// builds the network and starts the parts.
func newCluster(tb testing.TB) *cluster {
	tb.Helper()
	dir, err := os.MkdirTemp("", Prefix+"run-")
	if err != nil {
		tb.Fatal(err)
	}
	// PostgreSQL runs as its own user and Keepalived checks that scripts
	// live in directories only root can write: 0755, owned by root.
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	c := &cluster{tb: tb, dir: dir, servers: map[string]*server{}, lbs: map[string]*lb{}}
	c.ps = &procs{tb: tb, dir: dir}
	c.root = moduleRoot(tb)
	return c
}

func moduleRoot(tb testing.TB) string {
	tb.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		tb.Fatalf("go env GOMOD = %q, %v: want the module's go.mod", out, err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// build compiles cmd/server and cmd/sidecar into the run directory.
func (c *cluster) build() {
	c.tb.Helper()
	for _, b := range []struct {
		pkg string
		out *string
	}{{"./cmd/server", &c.serverBin}, {"./cmd/sidecar", &c.sidecarBin}} {
		*b.out = filepath.Join(c.dir, "bin", filepath.Base(b.pkg))
		cmd := exec.Command("go", "build", "-o", *b.out, b.pkg)
		cmd.Dir = c.root
		if out, err := cmd.CombinedOutput(); err != nil {
			c.tb.Fatalf("go build %s = got error %v, want nil\n%s", b.pkg, err, out)
		}
	}
}

// postgres initialises a cluster in the run directory and runs it in the
// db namespace, listening on the db host's address only, trusting the
// subnet, with fsync off.
func (c *cluster) postgres() {
	c.tb.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		c.tb.Fatalf("OS user postgres missing (%v): %s", err, scriptHint)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	pgDir := filepath.Join(c.dir, "pg")
	data := filepath.Join(pgDir, "data")
	if err := os.Mkdir(pgDir, 0o700); err != nil {
		c.tb.Fatal(err)
	}
	if err := os.Chown(pgDir, uid, gid); err != nil {
		c.tb.Fatal(err)
	}
	asPG := []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups"}
	initdb := exec.Command(asPG[0], slices.Concat(asPG[1:], []string{filepath.Join(pgBin, "initdb")}, pgcluster.InitdbArgs(data))...)
	initdb.Env = append(os.Environ(), "HOME="+pgDir)
	if out, err := initdb.CombinedOutput(); err != nil {
		c.tb.Fatalf("initdb = got error %v, want nil (%s)\n%s", err, scriptHint, out)
	}
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		c.tb.Fatal(err)
	}
	sslArgs, sslmode := []string{}, "disable"
	if c.tls != nil {
		// TLS only (hostssl): the servers connect with sslmode=require.
		fmt.Fprintf(hba, "hostssl all all %s trust\n", subnet)
		cert, key := c.tls.issue("db", hostDB.addr).Write(c.tb, pgDir, "server")
		for _, f := range []string{cert, key} {
			if err := os.Chown(f, uid, gid); err != nil {
				c.tb.Fatal(err)
			}
		}
		sslArgs, sslmode = []string{"-c", "ssl=on", "-c", "ssl_cert_file=" + cert, "-c", "ssl_key_file=" + key}, "require"
	} else {
		fmt.Fprintf(hba, "host all all %s trust\n", subnet)
	}
	hba.Close()

	c.pg = c.ps.start("postgres", hostDB.ns(), []string{"HOME=" + pgDir}, slices.Concat(asPG, []string{filepath.Join(pgBin, "postgres")},
		pgcluster.ServerArgs(data, hostDB.addr, pgPort, pgDir), []string{"-c", "log_min_messages=warning"}, sslArgs)...)

	admin := fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=%s&connect_timeout=2", hostDB.addr, pgPort, sslmode)
	var conn *pgx.Conn
	testenv.Eventually(c.tb, 30*time.Second, "PostgreSQL to accept connections", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err = pgx.Connect(ctx, admin)
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "CREATE DATABASE repool"); err != nil {
		c.tb.Fatalf("CREATE DATABASE repool = got error %v, want nil", err)
	}
	conn.Close(ctx)
	c.dsn = fmt.Sprintf("postgres://postgres@%s:%d/repool?sslmode=%s", hostDB.addr, pgPort, sslmode)
	c.connectDB()
}

// connectDB opens the test's own connection to c.dsn.
func (c *cluster) connectDB() {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if c.db, err = pgx.Connect(ctx, c.dsn); err != nil {
		c.tb.Fatalf("connect to %s = got error %v, want nil", c.dsn, err)
	}
	c.tb.Cleanup(func() { c.db.Close(context.Background()) })
}

// tenantID is the tenant the sidecar calls for.
func (c *cluster) tenantID() string {
	if c.tenant == "" {
		return "demo"
	}
	return c.tenant
}

// startServer runs (or restarts) the repool server on h.
func (c *cluster) startServer(h host) *server {
	c.tb.Helper()
	if c.rb != nil {
		s := &server{host: h, p: c.rb.startServer(h)}
		c.servers[h.name] = s
		return s
	}
	security := []string{"--insecure=true"}
	if c.tls != nil {
		cert, key := c.tls.serverPair(c.tb, h)
		security = []string{"--tls-cert", cert, "--tls-key", key}
	}
	p := c.ps.start("server-"+h.name, h.ns(), nil, append([]string{c.serverBin, "run",
		"--ha=true", "--store", c.dsn, // --ha alone takes the next argument as its value (see the reply)
		"--grpc-addr", fmt.Sprintf("%s:%d", h.addr, grpcPort),
		"--http-addr", fmt.Sprintf("%s:%d", h.addr, httpPort),
		"--ha-name", h.name,
		"--ha-session-timeout", sessionTimeout.String(),
		"--ha-interval", "250ms",
	}, append(c.groupFlags(h), security...)...)...)
	s := &server{host: h, p: p}
	c.servers[h.name] = s
	return s
}

// groupFlags are the flags that put h in its group (TestGroups).
func (c *cluster) groupFlags(h host) []string {
	g, ok := c.groups[h.name]
	if !ok {
		return nil
	}
	// Tokens of the shortest lifetime, which the sidecars renew every
	// few seconds (see startSidecarFor): renewals happen after each move.
	return []string{"--group", g, "--placement-interval", "100ms", "--token-ttl", "1m"}
}

var (
	demoKeyRE = regexp.MustCompile(`demo API key:\s+(rpk_\S+)`)
	opTokenRE = regexp.MustCompile(`operator token:\s+(\S+)`)
)

// startFirst starts the first server, s1, on an empty store: it reads the
// demo API key and the operator token s1 prints, and waits until s1 is
// active.
func (c *cluster) startFirst() *server {
	c.tb.Helper()
	s1 := c.startServer(hostS1)
	c.waitDemoKey(s1)
	if a := c.waitActive(30*time.Second, nil); a != s1 {
		c.tb.Fatalf("active server = %s, want s1 (the only one)", a.host.name)
	}
	return s1
}

// waitDemoKey reads the demo API key the first server printed.
func (c *cluster) waitDemoKey(s *server) {
	c.tb.Helper()
	testenv.Eventually(c.tb, 30*time.Second, "server "+s.host.name+" to print the demo API key", func() bool {
		if m := demoKeyRE.FindStringSubmatch(s.p.output()); m != nil {
			c.apiKey = m[1]
			if m := opTokenRE.FindStringSubmatch(s.p.output()); m != nil {
				c.opToken = m[1]
			}
			return true
		}
		return s.p.exited()
	})
	if c.apiKey == "" {
		c.tb.Fatalf("server %s exited without printing a demo API key", s.host.name)
	}
}

// probe is an HTTP client for health checks and metrics: short timeouts,
// no keep-alive (a stopped server must not hold a pooled connection).
var probe = &http.Client{Timeout: 400 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}

// readyActive returns the status of GET /readyz/active, or 0 if the server
// does not answer.
func (s *server) readyActive() int {
	resp, err := probe.Get(s.httpURL("/readyz/active"))
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// metric returns the value of an unlabelled metric from /metrics.
func (s *server) metric(name string) (float64, error) {
	resp, err := probe.Get(s.httpURL("/metrics"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found on %s", name, s.host.name)
}

// active returns the servers answering 200 on /readyz/active.
func (c *cluster) active() []*server {
	var out []*server
	for _, name := range []string{"s1", "s2", "s3", "s4"} {
		if s := c.servers[name]; s != nil && !s.p.exited() && s.readyActive() == http.StatusOK {
			out = append(out, s)
		}
	}
	return out
}

// waitActive waits until exactly one server other than except is active
// and returns it.
func (c *cluster) waitActive(timeout time.Duration, except *server) *server {
	c.tb.Helper()
	var got *server
	testenv.Eventually(c.tb, timeout, "one active server", func() bool {
		a := c.active()
		if len(a) == 1 && a[0] != except {
			got = a[0]
			return true
		}
		return false
	})
	return got
}

// inventory writes the LB inventory for this topology.
func (c *cluster) inventory() string {
	c.tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "# The e2e topology (test/e2e): rendered per LB host.\n")
	fmt.Fprintf(&b, "vip: {address: %s/24, interface: %s, router_id: 231, grpc_port: %d}\n", vipAddr, hostDev, grpcPort)
	fmt.Fprintf(&b, "lb_hosts:\n")
	for i, h := range []host{hostLB1, hostLB2} {
		// nopreempt (the default): both BACKUP, lb1 first by priority.
		state, prio := "BACKUP", 250
		if i > 0 {
			prio = 200
		}
		d := filepath.Join(c.dir, h.name)
		fmt.Fprintf(&b, "  - {name: %s, address: %s, priority: %d, state: %s, stats_socket: %s, notify_log: %s, state_metrics: %s}\n",
			h.name, h.addr, prio, state, filepath.Join(d, "admin.sock"), filepath.Join(d, "notify.log"), filepath.Join(d, stateMetricsFile))
	}
	fmt.Fprintf(&b, "servers:\n")
	servers := []host{hostS1, hostS2, hostS3}
	if c.groups != nil {
		servers = append(servers, hostS4)
	}
	for _, h := range servers {
		group := ""
		if g, ok := c.groups[h.name]; ok {
			group = ", group: " + g
		}
		fmt.Fprintf(&b, "  - {name: %s, address: %s, grpc_port: %d, http_port: %d%s}\n", h.name, h.addr, grpcPort, httpPort, group)
	}
	// The track script is this run's repool-server (keepalived check).
	fmt.Fprintf(&b, "keepalived: {notify_script: %s, check_program: %s}\n", filepath.Join(c.dir, "notify.sh"), c.serverBin)
	// HAProxy drops to the test's user (no haproxy user needed), with a
	// maxconn whose file descriptors any test machine allows.
	usr, grp := haproxytest.CurrentUser(c.tb)
	fmt.Fprintf(&b, "haproxy: {user: %s, group: %s, maxconn: 1000, tenant_map: %s}\n", usr, grp, c.tenantMap())
	if c.tls != nil {
		fmt.Fprintf(&b, "tls: {cert: %s, server_ca: %s, server_name: %s}\n", c.tls.vipPEM, c.tls.caFile, serverName)
	}
	if c.dbNodes != nil {
		// The database tier behind the VIP (TestDatabaseFailover).
		fmt.Fprintf(&b, "database:\n  port: %d\n  nodes:\n", pgPort)
		for _, n := range c.dbNodes {
			fmt.Fprintf(&b, "    - {name: %s, address: %s, port: %d, rest_port: %d}\n", n.Name, n.Addr, dbtier.PGPort, dbtier.RESTPort)
		}
	}
	path := c.inventoryPath()
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		c.tb.Fatal(err)
	}
	return path
}

// inventoryPath is where inventory writes the LB inventory.
func (c *cluster) inventoryPath() string { return filepath.Join(c.dir, "inventory.yaml") }

// frontEndAndClient is frontEnd, then client.
func (c *cluster) frontEndAndClient(up string) *backend {
	c.tb.Helper()
	c.frontEnd()
	return c.client(up)
}

// frontEnd starts the LB hosts and waits for the VIP on lb1.
func (c *cluster) frontEnd() {
	c.tb.Helper()
	c.loadBalancers()
	testenv.Eventually(c.tb, 20*time.Second, "the VIP on lb1 only", func() bool {
		h := vipHolders(hostLB1, hostLB2)
		return len(h) == 1 && h[0] == "lb1"
	})
}

// client waits for HAProxy on both LB hosts to have exactly up (server
// names, as upServers lists them) UP; then starts the sidecar and
// registers the initial resources through it, and returns the backend
// that did.
func (c *cluster) client(up string) *backend {
	c.tb.Helper()
	lb1, lb2 := c.lbs["lb1"], c.lbs["lb2"]
	testenv.Eventually(c.tb, 10*time.Second, "HAProxy on lb1 and lb2 to see "+up+" UP", func() bool {
		return c.upServers(lb1) == up && c.upServers(lb2) == up
	})
	c.tb.Logf("HAProxy on lb1:\n%s", c.haproxyStatus(lb1))
	c.startSidecar()
	return c.registerInitial()
}

// registerInitial registers the initial resources through the sidecar
// and returns the backend that did.
func (c *cluster) registerInitial() *backend {
	c.tb.Helper()
	b := newBackend()
	var ids []string
	for i := range initialResources {
		ids = append(ids, fmt.Sprintf("r-%03d", i))
	}
	testenv.Eventually(c.tb, 15*time.Second, "the first registration through the sidecar", func() bool { return b.register(ids...) })
	return b
}

// tenantMap is the LB hosts' tenant map file (one file: both hosts'
// sync loops write the same placements to it).
func (c *cluster) tenantMap() string { return filepath.Join(c.dir, "repool-tenants.map") }

// render runs "server <args>" (a render command) and fails on error.
func (c *cluster) render(args ...string) {
	c.tb.Helper()
	c.renderOutput(args...)
}

// renderOutput runs "server <args>" (a render command), fails on error,
// and returns what it printed.
func (c *cluster) renderOutput(args ...string) string {
	c.tb.Helper()
	out, err := exec.Command(c.serverBin, args...).CombinedOutput()
	if err != nil {
		c.tb.Fatalf("server %s = got error %v, want nil\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// loadBalancers renders the HAProxy and Keepalived configurations of lb1
// and lb2 from one inventory and starts both on both hosts.
func (c *cluster) loadBalancers() {
	c.tb.Helper()
	notify, err := os.ReadFile(filepath.Join(c.root, "keepalived", "notify.sh"))
	if err != nil {
		c.tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "notify.sh"), notify, 0o755); err != nil {
		c.tb.Fatal(err)
	}
	inv := c.inventory()
	for _, h := range []host{hostLB1, hostLB2} {
		d := filepath.Join(c.dir, h.name)
		if err := os.Mkdir(d, 0o755); err != nil {
			c.tb.Fatal(err)
		}
		l := &lb{host: h, dir: d, haproxyCfg: filepath.Join(d, "haproxy.cfg"), kaConf: filepath.Join(d, "keepalived.conf"),
			socket: filepath.Join(d, "admin.sock"), notifyLog: filepath.Join(d, "notify.log"), stateMetrics: filepath.Join(d, stateMetricsFile)}
		c.render("haproxy", "render", "--inventory", inv, "--host", h.name, "--out", l.haproxyCfg, "--pid-file", filepath.Join(d, "haproxy.pid"))
		c.render("keepalived", "render", "--inventory", inv, "--host", h.name, "--out", l.kaConf)
		c.lbs[h.name] = l
		if c.groups != nil {
			// The map file, from the store, before HAProxy first reads it.
			c.render("haproxy", "sync-placements", "--inventory", inv, "--host", h.name, "--store", c.dsn, "--file-only")
		}
		c.startHAProxy(l)
		if c.groups != nil {
			// Then kept live through the runtime API, as on a real LB host.
			c.ps.start("sync-placements-"+h.name, h.ns(), nil, c.serverBin, "haproxy", "sync-placements",
				"--inventory", inv, "--host", h.name, "--store", c.dsn, "--interval", "100ms")
		}
	}
	// Keepalived once HAProxy answers on both hosts: a host whose HAProxy
	// sees no server and no peer fails its track script (the partition
	// guard), and a host in FAULT at the start leaves the VIP to the other
	// within its master-down interval (1.3 s), whatever the priorities.
	// With no repool server up yet (TestDatabaseFailover starts the
	// database tier first), a host's monitor answers 200 only once its
	// HAProxy sees the other host again.
	c.startKeepaliveds(func(h host) string { return filepath.Join(c.dir, h.name) })
}

// startKeepaliveds runs Keepalived on both LB hosts, their pid files in
// pidDir(host), once both hosts' HAProxy answers its monitor.
func (c *cluster) startKeepaliveds(pidDir func(host) string) {
	for _, h := range []host{hostLB1, hostLB2} {
		c.waitMonitor(c.lbs[h.name])
	}
	for _, h := range []host{hostLB1, hostLB2} {
		c.startKeepalived(c.lbs[h.name], pidDir(h))
	}
}

// startKeepalived runs Keepalived on l, its pid files in dir.
func (c *cluster) startKeepalived(l *lb, dir string) {
	l.keepalived = c.ps.start("keepalived-"+l.host.name, l.host.ns(), nil, keepalivedBin,
		"--vrrp", "--dont-fork", "--log-console", "--log-detail", "--no-syslog",
		"--use-file", l.kaConf, "--pid", filepath.Join(dir, "keepalived.pid"),
		"--vrrp_pid", filepath.Join(dir, "vrrp.pid"), "--checkers_pid", filepath.Join(dir, "checkers.pid"))
}

// startHAProxy runs (or restarts) HAProxy on l and waits for its monitor
// frontend.
func (c *cluster) startHAProxy(l *lb) {
	c.tb.Helper()
	l.haproxy = c.ps.start("haproxy-"+l.host.name, l.host.ns(), nil, haproxyBin, "-f", l.haproxyCfg, "-db")
	c.waitMonitor(l)
}

// waitMonitor waits until l's HAProxy answers its monitor URI with 200
// (what Keepalived's track script asks).
func (c *cluster) waitMonitor(l *lb) {
	c.tb.Helper()
	url := fmt.Sprintf("http://%s:8404/lb-health", l.host.addr)
	testenv.Eventually(c.tb, 15*time.Second, "HAProxy on "+l.host.name+" to answer "+url, func() bool {
		resp, err := probe.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// haproxyStatus returns "server haproxy status" of l, for the log.
func (c *cluster) haproxyStatus(l *lb) string {
	out, err := exec.Command(c.serverBin, "haproxy", "status", "--socket", l.socket).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("haproxy status on %s: %v\n%s", l.host.name, err, out)
	}
	return string(out)
}

// serverState returns the STATE column of server name in l's "server
// haproxy status" (UP, NOLB, DOWN, DRAIN, MAINT), "" if it is not listed.
func (c *cluster) serverState(l *lb, name string) string {
	col := 0 // the SERVER column: 1 behind a GROUP column (TestGroups)
	for _, line := range strings.Split(c.haproxyStatus(l), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "GROUP" {
			col = 1
		}
		if len(f) > col+2 && f[col] == name {
			return f[col+2]
		}
	}
	return ""
}

// upServers returns the servers l's HAProxy has UP, space-separated.
func (c *cluster) upServers(l *lb) string {
	var up []string
	col := 0 // the SERVER column: 1 behind a GROUP column (TestGroups)
	for _, line := range strings.Split(c.haproxyStatus(l), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "GROUP" {
			col = 1
		}
		if len(f) > col+2 && f[col+2] == "UP" {
			up = append(up, f[col])
		}
	}
	return strings.Join(up, " ")
}

// startSidecar runs the sidecar in the client namespace, listening on the
// client's address (the test drives it like a backend would), with one
// provider on the VIP.
func (c *cluster) startSidecar() {
	c.tb.Helper()
	c.sidecar = c.startSidecarFor("sidecar", sidecarPort, c.apiKey)
}

// startSidecarFor starts a sidecar named name on the client host at
// port with the shipped configuration, deploy/config/sidecar.yaml, changed
// only where an operator changes it for this lab (docs/ha.md): its listen
// address (the client host's, so allow_remote), the VIP's address, the CA
// file (or plaintext without TLS) and the API key file; every resilience
// setting is the shipped one. With groups (TestGroups) its tokens are used
// for 30 s of their 1 min and renewed after 1.5 to 3 s. It waits for the
// sidecar to answer.
func (c *cluster) startSidecarFor(name string, port int, apiKey string) *proc {
	c.tb.Helper()
	keyFile := filepath.Join(c.dir, name+"-api.key")
	if err := os.WriteFile(keyFile, []byte(apiKey+"\n"), 0o600); err != nil {
		c.tb.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(c.root, "deploy", "config", "sidecar.yaml"))
	if err != nil {
		c.tb.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(shipped, &doc); err != nil {
		c.tb.Fatalf("deploy/config/sidecar.yaml: %v", err)
	}
	prov, ok := doc["providers"].(map[string]any)["default"].(map[string]any)
	if !ok {
		c.tb.Fatal("deploy/config/sidecar.yaml has no provider default: the lab replaces its addresses")
	}
	doc["listen"], doc["allow_remote"] = fmt.Sprintf("%s:%d", hostClient.addr, port), true
	prov["endpoint"], prov["api_key_file"] = fmt.Sprintf("%s:%d", vipAddr, grpcPort), keyFile
	if c.tls != nil {
		prov["tls"] = map[string]any{"ca_file": c.tls.caFile, "server_name": serverName}
	} else {
		delete(prov, "tls")
		prov["insecure"] = true
	}
	if c.groups != nil {
		prov["token"] = map[string]any{"skew": "30s", "refresh_at": 0.1}
	}
	timeout, err := time.ParseDuration(fmt.Sprint(prov["timeout"]))
	if err != nil || timeout >= callDeadline {
		c.tb.Fatalf("deploy/config/sidecar.yaml: timeout %v (%v): the lab's backend calls have a %v deadline, which must outlast the sidecar's", prov["timeout"], err, callDeadline)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		c.tb.Fatal(err)
	}
	path := filepath.Join(c.dir, name+".yaml")
	if err := os.WriteFile(path, append([]byte("# deploy/config/sidecar.yaml with the lab's addresses (test/e2e).\n"), out...), 0o600); err != nil {
		c.tb.Fatal(err)
	}
	p := c.ps.start(name, hostClient.ns(), nil, c.sidecarBin, "--config", path)
	testenv.Eventually(c.tb, 15*time.Second, name+" to answer /healthz", func() bool {
		resp, err := probe.Get(sidecarAt(port, "/healthz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

func sidecarURL(path string) string { return sidecarAt(sidecarPort, path) }

func sidecarAt(port int, path string) string {
	return fmt.Sprintf("http://%s:%d%s", hostClient.addr, port, path)
}

// dump logs every process's output and the LB files (on failure).
func (c *cluster) dump() {
	var extra []string
	for _, name := range []string{"lb1", "lb2"} {
		if l := c.lbs[name]; l != nil {
			extra = append(extra, l.notifyLog, l.haproxyCfg, l.kaConf)
		}
	}
	extra = append(extra, filepath.Join(c.dir, "inventory.yaml"), filepath.Join(c.dir, "sidecar.yaml"))
	c.ps.dump(extra...)
}

// sidecarCounters returns the sidecar's retry, budget, breaker and
// fast-fail counters, for the log.
func sidecarCounters() string {
	resp, err := probe.Get(sidecarURL("/metrics"))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range []string{"repool_sidecar_retries_total", "repool_sidecar_retry_budget_refusals_total",
			"repool_sidecar_breaker_transitions_total", "repool_sidecar_fast_fails_total"} {
			if strings.HasPrefix(line, name) {
				out = append(out, strings.TrimPrefix(line, "repool_sidecar_"))
			}
		}
	}
	return strings.Join(out, ", ")
}

// sidecarBreakerClosed reports whether GET /v1/breakers shows the provider's
// breaker closed.
func sidecarBreakerClosed() bool {
	resp, err := probe.Get(sidecarURL("/v1/breakers"))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var v struct {
		Breakers []struct {
			Provider string `json:"provider"`
			State    string `json:"state"`
		} `json:"breakers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return false
	}
	for _, b := range v.Breakers {
		if b.Provider == provider {
			return b.State == "closed"
		}
	}
	return false
}

// downEvents returns, per LB host, the lines in which its running HAProxy
// logged a server of the gRPC backend going DOWN, oldest first.
func (c *cluster) downEvents() map[string][]string {
	out := map[string][]string{}
	prefix := "Server " + lbhaproxy.Backend + "/"
	for name, l := range c.lbs {
		for _, line := range strings.Split(l.haproxy.output(), "\n") {
			if strings.Contains(line, prefix) && strings.Contains(line, " is DOWN") {
				out[name] = append(out[name], line)
			}
		}
	}
	return out
}

// startStandbys starts a server on each of hosts and waits until each is a
// healthy standby (404 on /readyz/active).
func (c *cluster) startStandbys(hosts ...host) {
	c.tb.Helper()
	for _, h := range hosts {
		c.startServer(h)
	}
	for _, h := range hosts {
		s := c.servers[h.name]
		testenv.Eventually(c.tb, 30*time.Second, h.name+" to be a healthy standby (404 on /readyz/active)", func() bool {
			return s.readyActive() == http.StatusNotFound
		})
	}
}
