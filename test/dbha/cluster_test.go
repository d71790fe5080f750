package dbha

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/pgcluster"
	"github.com/repool/repool/internal/status/gather"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// The shipped configuration files the database tier is built from.
const (
	patroniYML = "../../deploy/patroni/patroni.yml"
	etcdEnv    = "../../deploy/etcd/etcd.env"
)

// The runbook's hosts: the database nodes each in a network namespace of
// its own on a bridge (netns_test.go), on the runbook's ports; the VIP and
// the servers on loopback addresses of the test's namespace (Linux routes
// all of 127.0.0.0/8 to lo), where HAProxy runs too.
var (
	nodeAddrs   = []string{nsSubnet + ".31", nsSubnet + ".32", nsSubnet + ".33"}
	vipAddr     = "127.0.0.100"
	serverAddrs = []string{"127.0.0.21", "127.0.0.22"}
)

// The runbook's ports on each database node (deploy/patroni/patroni.yml,
// deploy/etcd/etcd.env): free in a namespace of the test's own.
const (
	nodePGPort     = 5432
	nodeRESTPort   = 8008
	nodeEtcdClient = 2379
	nodeEtcdPeer   = 2380
)

// hbaAddrs maps the runbook's addresses in the shipped pg_hba to the
// test's: the nodes' (replication, rewind) and the LB hosts' (HAProxy's
// connections for the servers come from rootAddr, the root namespace's
// address on the bridge).
var hbaAddrs = map[string]string{
	"10.0.0.31": nodeAddrs[0], "10.0.0.32": nodeAddrs[1], "10.0.0.33": nodeAddrs[2],
	"10.0.0.11": rootAddr, "10.0.0.12": rootAddr,
}

// dbNode is one database node: an etcd member and a Patroni with its
// PostgreSQL.
type dbNode struct {
	name, addr             string
	pgPort, restPort       int
	etcdClient, etcdPeer   int
	dir                    string // data, sockets, configuration
	etcd, patroni          *exec.Cmd
	etcdDone, patroniDone  chan struct{}
	patroniLog, etcdLogPth string
}

func (n *dbNode) restURL(path string) string {
	return fmt.Sprintf("http://%s:%d%s", n.addr, n.restPort, path)
}

func (n *dbNode) socketDir() string { return filepath.Join(n.dir, "run") }
func (n *dbNode) dataDir() string   { return filepath.Join(n.dir, "data") }

// dbTier is the whole database tier of a run and the HAProxy in front.
type dbTier struct {
	inv     *inventory.Inventory // the inventory HAProxy was rendered from
	t       *testing.T
	dir     string
	cred    *syscall.Credential
	ca      *tlstest.CA
	caFile  string
	nodes   []*dbNode
	haproxy *exec.Cmd
	dbPort  int // HAProxy's database frontend on the VIP
	// The front end of the repool servers, rendered into the same
	// haproxy.cfg.
	grpcPort     int
	serverPorts  [][2]int // grpc, http per server
	repoolPass   string
	haproxyCfg   string
	haproxyLog   string
	superuserPwd string
}

// freePortOn returns a TCP port free a moment ago on addr.
func freePortOn(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// postgresCred is the postgres OS user, as which etcd, Patroni and
// PostgreSQL run (PostgreSQL refuses root).
func postgresCred(t *testing.T) (*syscall.Credential, int, int) {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("the postgres OS user: %v (scripts/test installs PostgreSQL)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid
}

// startTier starts three etcd members, three Patroni nodes and HAProxy
// (database frontend and the repool front end for the servers at
// serverAddrs), and waits for a primary with a synchronous standby.
func startTier(t *testing.T) *dbTier {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("%s runs Patroni and PostgreSQL as the postgres OS user and HAProxy binding the VIP, and must run as root (euid %d); run scripts/test as root", t.Name(), os.Geteuid())
	}
	for _, bin := range []string{"etcd", "patroni", "patronictl", haproxy.DefaultBinary} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s: %v (scripts/test installs etcd-server, patroni and haproxy)", bin, err)
		}
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv: %v (util-linux)", err)
	}
	cred, uid, gid := postgresCred(t)
	lockNetwork(t)
	// Not t.TempDir(): the postgres user must reach it, and a test's name
	// could put characters the inventory refuses in a path.
	dir, err := os.MkdirTemp("", "repool-dbha-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := &dbTier{t: t, dir: dir, cred: cred, ca: tlstest.NewCA(t, "repool db test CA")}
	var names []string
	for i := range nodeAddrs {
		names = append(names, fmt.Sprintf("pg%d", i+1))
	}
	buildNetwork(t, names, nodeAddrs)
	t.Cleanup(func() {
		d.stop()
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("run directory kept: %s", dir)
		}
	})
	d.caFile = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(d.caFile, d.ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// One certificate for every node's etcd and PostgreSQL: the nodes'
	// addresses (etcd checks a peer's client certificate against its
	// source address) and the VIP's (servers verify the VIP's name).
	pair := d.ca.Issue("repool-db", append(append([]string{}, nodeAddrs...), vipAddr)...)
	certFile, keyFile := pair.Write(t, dir, "db")
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chown(f, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if t.Failed() {
			d.dumpLogs()
		}
	}()
	d.superuserPwd = "test-superuser"
	d.repoolPass = "test-repool"

	for i, addr := range nodeAddrs {
		n := &dbNode{name: names[i], addr: addr, dir: filepath.Join(dir, names[i]),
			pgPort: nodePGPort, restPort: nodeRESTPort, etcdClient: nodeEtcdClient, etcdPeer: nodeEtcdPeer}
		for _, sub := range []string{"", "run", "etcd"} {
			p := filepath.Join(n.dir, sub)
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		d.nodes = append(d.nodes, n)
	}
	for _, n := range d.nodes {
		d.startEtcd(n, certFile, keyFile)
	}
	// As the runbook: Patroni once etcd has its quorum. Patroni 3.0
	// refuses to start on a member whose cluster version is not decided
	// yet (it parses "not_decided" as a version and exits).
	d.waitEtcd(pair)
	for _, n := range d.nodes {
		d.writePatroniConfig(n, certFile, keyFile)
	}
	// The first node bootstraps the cluster; the others then copy it.
	d.startPatroni(d.nodes[0])
	testenv.Eventually(t, 90*time.Second, "pg1 to bootstrap the cluster and answer /primary 200", func() bool {
		return d.restStatus(d.nodes[0], "/primary") == http.StatusOK
	})
	for _, n := range d.nodes[1:] {
		d.startPatroni(n)
	}
	testenv.Eventually(t, 120*time.Second, "two streaming standbys, one of them synchronous", func() bool {
		return d.syncStandby() != ""
	})
	d.createRepoolRole()
	d.startHAProxy()
	return d
}

// startEtcd starts n's etcd member from the shipped environment file with
// the test's names, addresses, ports and directories.
func (d *dbTier) startEtcd(n *dbNode, certFile, keyFile string) {
	t := d.t
	raw, err := os.ReadFile(etcdEnv)
	if err != nil {
		t.Fatal(err)
	}
	var cluster []string
	for _, o := range d.nodes {
		cluster = append(cluster, fmt.Sprintf("%s=https://%s:%d", o.name, o.addr, o.etcdPeer))
	}
	over := map[string]string{
		"ETCD_NAME":                        n.name,
		"ETCD_DATA_DIR":                    filepath.Join(n.dir, "etcd"),
		"ETCD_LISTEN_CLIENT_URLS":          fmt.Sprintf("https://%s:%d", n.addr, n.etcdClient),
		"ETCD_ADVERTISE_CLIENT_URLS":       fmt.Sprintf("https://%s:%d", n.addr, n.etcdClient),
		"ETCD_LISTEN_PEER_URLS":            fmt.Sprintf("https://%s:%d", n.addr, n.etcdPeer),
		"ETCD_INITIAL_ADVERTISE_PEER_URLS": fmt.Sprintf("https://%s:%d", n.addr, n.etcdPeer),
		"ETCD_INITIAL_CLUSTER":             strings.Join(cluster, ","),
		"ETCD_CERT_FILE":                   certFile,
		"ETCD_KEY_FILE":                    keyFile,
		"ETCD_TRUSTED_CA_FILE":             d.caFile,
		"ETCD_PEER_CERT_FILE":              certFile,
		"ETCD_PEER_KEY_FILE":               keyFile,
		"ETCD_PEER_TRUSTED_CA_FILE":        d.caFile,
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	seen := map[string]bool{}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", etcdEnv, line)
		}
		if i := strings.Index(v, " #"); i >= 0 {
			v = strings.TrimSpace(v[:i])
		}
		if o, ok := over[k]; ok {
			v = o
			seen[k] = true
		}
		env = append(env, k+"="+v)
	}
	for k := range over {
		if !seen[k] {
			t.Fatalf("%s has no %s: the test's override would add a setting the runbook lacks", etcdEnv, k)
		}
	}
	n.etcdLogPth = filepath.Join(d.dir, n.name+"-etcd.log")
	n.etcd, n.etcdDone = d.run(n, n.etcdLogPth, env, "etcd")
}

// waitEtcd waits until every etcd member answers GET /version with a
// decided cluster version, over TLS with the nodes' client certificate.
func (d *dbTier) waitEtcd(pair tlstest.Pair) {
	t := d.t
	t.Helper()
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(d.ca.PEM)
	c := http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots},
	}}
	for _, n := range d.nodes {
		testenv.Eventually(t, 60*time.Second, n.name+"'s etcd member to report a decided cluster version", func() bool {
			resp, err := c.Get(fmt.Sprintf("https://%s:%d/version", n.addr, n.etcdClient))
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var v struct {
				Cluster string `json:"etcdcluster"`
			}
			return json.NewDecoder(resp.Body).Decode(&v) == nil && v.Cluster != "" && v.Cluster != "not_decided"
		})
	}
}

// run starts argv in n's namespace as the postgres OS user, in its own
// process group, with its output in logPath. If the test dies, the next
// run's lockNetwork kills it (the parent-death signal does not survive
// setpriv's change of user).
func (d *dbTier) run(n *dbNode, logPath string, env []string, argv ...string) (*exec.Cmd, chan struct{}) {
	t := d.t
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	argv = inNode(n.name, d.cred.Uid, d.cred.Gid, argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = d.dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", argv[0], err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	return cmd, done
}

// writePatroniConfig writes n's Patroni configuration: the shipped file
// with the test's names, addresses, ports, directories, certificate paths
// and passwords; every other setting (timings, synchronous replication,
// pg_hba) as shipped.
func (d *dbTier) writePatroniConfig(n *dbNode, certFile, keyFile string) {
	t := d.t
	raw, err := os.ReadFile(patroniYML)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", patroniYML, err)
	}
	get := func(m map[string]any, keys ...string) map[string]any {
		for _, k := range keys {
			next, ok := m[k].(map[string]any)
			if !ok {
				t.Fatalf("%s: no mapping %s", patroniYML, strings.Join(keys, "."))
			}
			m = next
		}
		return m
	}
	cfg["name"] = n.name
	rest := get(cfg, "restapi")
	rest["listen"] = fmt.Sprintf("%s:%d", n.addr, n.restPort)
	rest["connect_address"] = rest["listen"]
	get(cfg, "ctl")["cacert"] = d.caFile
	etcd := get(cfg, "etcd3")
	// The shipped file names this node's own member only.
	if h, _ := etcd["hosts"].(string); strings.Contains(h, ",") {
		t.Fatalf("%s: etcd3.hosts %q lists more than this node's member", patroniYML, h)
	}
	etcd["hosts"] = fmt.Sprintf("%s:%d", n.addr, n.etcdClient)
	etcd["cacert"], etcd["cert"], etcd["key"] = d.caFile, certFile, keyFile
	params := get(cfg, "bootstrap", "dcs", "postgresql", "parameters")
	params["ssl_cert_file"], params["ssl_key_file"] = certFile, keyFile
	pg := get(cfg, "postgresql")
	pg["listen"] = fmt.Sprintf("%s:%d", n.addr, n.pgPort)
	pg["connect_address"] = pg["listen"]
	pg["data_dir"] = n.dataDir()
	pg["bin_dir"] = pgcluster.BinDir()
	pg["pgpass"] = filepath.Join(n.dir, "pgpass")
	get(cfg, "postgresql", "parameters")["unix_socket_directories"] = n.socketDir()
	auth := get(cfg, "postgresql", "authentication")
	get(auth, "superuser")["password"] = d.superuserPwd
	for _, role := range []string{"replication", "rewind"} {
		get(auth, role)["sslrootcert"] = d.caFile
	}
	hba, ok := pg["pg_hba"].([]any)
	if !ok {
		t.Fatalf("%s: postgresql.pg_hba is not a list", patroniYML)
	}
	for i, l := range hba {
		line := l.(string)
		for from, to := range hbaAddrs {
			line = strings.ReplaceAll(line, from+"/32", to+"/32")
		}
		hba[i] = line
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(n.dir, "patroni.yml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (d *dbTier) patroniConfig(n *dbNode) string { return filepath.Join(n.dir, "patroni.yml") }

// startPatroni starts n's Patroni (which starts its PostgreSQL).
func (d *dbTier) startPatroni(n *dbNode) {
	n.patroniLog = filepath.Join(d.dir, n.name+"-patroni.log")
	if n.patroni != nil {
		n.patroniLog = filepath.Join(d.dir, n.name+"-patroni.restarted.log")
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + n.dir, "LANG=C.UTF-8"}
	n.patroni, n.patroniDone = d.run(n, n.patroniLog, env, "patroni", d.patroniConfig(n))
}

// stopPatroni stops n's Patroni as `systemctl stop patroni` does (SIGTERM
// to Patroni alone, KillMode=process): Patroni shuts its PostgreSQL down
// and gives up the leader key.
func (d *dbTier) stopPatroni(n *dbNode, within time.Duration) {
	d.t.Helper()
	n.patroni.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.patroniDone:
	case <-time.After(within):
		d.t.Fatalf("patroni %s did not stop within %v of SIGTERM", n.name, within)
	}
}

// crash kills n's Patroni and PostgreSQL with SIGKILL, as a host that
// dies: nothing gives up the leader key, which expires after the ttl.
func (d *dbTier) crash(n *dbNode) {
	pid := d.postmasterPID(n)
	syscall.Kill(-n.patroni.Process.Pid, syscall.SIGKILL)
	if pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-n.patroniDone
}

// postmasterPID is the pid of n's running postmaster, 0 if none.
func (d *dbTier) postmasterPID(n *dbNode) int {
	raw, err := os.ReadFile(filepath.Join(n.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// patronictl runs patronictl with n's configuration, as the postgres OS
// user.
func (d *dbTier) patronictl(n *dbNode, args ...string) string {
	d.t.Helper()
	cmd := exec.Command("patronictl", append([]string{"-c", d.patroniConfig(n)}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.cred}
	cmd.Dir = n.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + n.dir, "LANG=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		d.t.Fatalf("patronictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// restStatus is the status of GET path on n's Patroni REST API, 0 if it
// does not answer.
func (d *dbTier) restStatus(n *dbNode, path string) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(n.restURL(path))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// clusterMember is one member in Patroni's GET /cluster.
type clusterMember struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	State string `json:"state"`
	Lag   any    `json:"lag"`
	TL    int    `json:"timeline"`
}

// members asks any node that answers for the cluster's members.
func (d *dbTier) members() []clusterMember {
	c := http.Client{Timeout: time.Second}
	for _, n := range d.nodes {
		resp, err := c.Get(n.restURL("/cluster"))
		if err != nil {
			continue
		}
		var body struct {
			Members []clusterMember `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err == nil {
			return body.Members
		}
	}
	return nil
}

// syncStandby returns the name of the synchronous standby once the
// cluster has a leader, a streaming synchronous standby and another
// streaming standby; "" until then.
func (d *dbTier) syncStandby() string {
	var sync string
	streaming := 0
	for _, m := range d.members() {
		// Patroni 3.0 says "running" for a standby that replicates;
		// later versions "streaming".
		up := m.State == "running" || m.State == "streaming"
		if m.Role == "sync_standby" && up {
			sync = m.Name
		}
		if (m.Role == "replica" || m.Role == "sync_standby") && up {
			streaming++
		}
	}
	if streaming < 2 {
		return ""
	}
	return sync
}

// primary returns the node whose Patroni answers /primary 200, or nil.
func (d *dbTier) primary() *dbNode {
	for _, n := range d.nodes {
		if d.restStatus(n, "/primary") == http.StatusOK {
			return n
		}
	}
	return nil
}

// psql runs SQL as the superuser on the primary's Unix socket (peer, as
// the postgres OS user), as the runbook does.
func (d *dbTier) psql(n *dbNode, db, sql string) string {
	d.t.Helper()
	cmd := exec.Command(filepath.Join(pgcluster.BinDir(), "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", n.socketDir(), "-p", strconv.Itoa(n.pgPort), "-U", "postgres", "-d", db, "-c", sql)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.cred}
	cmd.Dir = d.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		d.t.Fatalf("psql on %s: %v\n%s", n.name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// createRepoolRole makes role and database repool as docs/ha.md's step 2.
func (d *dbTier) createRepoolRole() {
	p := d.primary()
	if p == nil {
		d.t.Fatal("no primary")
	}
	d.psql(p, "postgres", "CREATE ROLE repool LOGIN PASSWORD '"+d.repoolPass+"'")
	d.psql(p, "postgres", "CREATE DATABASE repool OWNER repool")
	d.psql(p, "postgres", "REVOKE ALL ON DATABASE repool FROM PUBLIC")
	d.psql(p, "repool", "REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT ALL ON SCHEMA public TO repool")
}

// DSN is the servers' --store as docs/ha.md gives it: role repool through
// HAProxy's database frontend on the VIP, TLS verified for the VIP's
// address, and only a read-write session accepted.
func (d *dbTier) DSN() string {
	return fmt.Sprintf("postgres://repool:%s@%s:%d/repool?sslmode=verify-full&sslrootcert=%s&target_session_attrs=read-write",
		d.repoolPass, vipAddr, d.dbPort, d.caFile)
}

// startHAProxy renders haproxy.cfg with `server haproxy render`'s code from
// an inventory with the repool servers and the database section, and
// starts HAProxy (as root; it drops to its user as configured).
func (d *dbTier) startHAProxy() {
	t := d.t
	d.grpcPort = freePortOn(t, vipAddr)
	control := freePortOn(t, vipAddr)
	d.dbPort = freePortOn(t, vipAddr)
	monitor := freePortOn(t, "127.0.0.11")
	var b strings.Builder
	fmt.Fprintf(&b, "vip: {address: %s/8, interface: lo, router_id: 51, auth_pass: test, grpc_port: %d, control_port: %d}\n", vipAddr, d.grpcPort, control)
	fmt.Fprintf(&b, "lb_hosts:\n  - {name: lb1, address: 127.0.0.11, priority: 250, state: BACKUP, stats_socket: %s, monitor_port: %d}\n", filepath.Join(d.dir, "haproxy.sock"), monitor)
	b.WriteString("  - {name: lb2, address: 127.0.0.12, priority: 200, state: BACKUP}\n")
	b.WriteString("servers:\n")
	d.serverPorts = nil
	for i, a := range serverAddrs {
		g, h := freePortOn(t, a), freePortOn(t, a)
		d.serverPorts = append(d.serverPorts, [2]int{g, h})
		fmt.Fprintf(&b, "  - {name: s%d, address: %s, grpc_port: %d, http_port: %d}\n", i+1, a, g, h)
	}
	// The inventory's defaults except a maxconn whose file descriptors
	// any test machine allows.
	b.WriteString("haproxy: {maxconn: 1000}\n")
	fmt.Fprintf(&b, "database:\n  port: %d\n  nodes:\n", d.dbPort)
	for _, n := range d.nodes {
		fmt.Fprintf(&b, "    - {name: %s, address: %s, port: %d, rest_port: %d}\n", n.name, n.addr, n.pgPort, n.restPort)
	}
	inv, err := inventory.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("inventory:\n%s\n%v", b.String(), err)
	}
	d.inv = inv
	cfg, err := haproxy.Render(context.Background(), inv, haproxy.Options{Host: "lb1", PIDFile: filepath.Join(d.dir, "haproxy.pid")})
	if err != nil {
		t.Fatal(err)
	}
	d.haproxyCfg = filepath.Join(d.dir, "haproxy.cfg")
	if err := os.WriteFile(d.haproxyCfg, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	d.haproxyLog = filepath.Join(d.dir, "haproxy.log")
	f, err := os.Create(d.haproxyLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(haproxy.DefaultBinary, "-db", "-f", d.haproxyCfg)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.haproxy = cmd
	go cmd.Wait()
	// HAProxy takes every server for UP when it starts, until its checks
	// say otherwise (fall checks): wait until only the primary is.
	p := d.primary()
	testenv.Eventually(t, 10*time.Second, "HAProxy to send database connections to the primary only", func() bool {
		up := d.dbUp()
		return len(up) == 1 && p != nil && up[0] == p.name
	})
}

// dbUp lists the database nodes HAProxy has UP, from "show stat" on its
// stats socket.
func (d *dbTier) dbUp() []string {
	c, err := net.DialTimeout("unix", filepath.Join(d.dir, "haproxy.sock"), time.Second)
	if err != nil {
		return nil
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("show stat\n")); err != nil {
		return nil
	}
	var up []string
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		// pxname, svname, ..., status is the 18th field.
		// "UP 1/2" is a node on its way down (one failed check of
		// fall 2): it still takes connections.
		if len(f) > 17 && f[0] == haproxy.DBBackend && f[1] != "BACKEND" && strings.HasPrefix(f[17], "UP") {
			up = append(up, f[1])
		}
	}
	return up
}

// stop ends every process of the tier: HAProxy, Patroni (whose PostgreSQL
// gets an immediate shutdown) and etcd.
func (d *dbTier) stop() {
	if d.haproxy != nil && d.haproxy.Process != nil {
		syscall.Kill(-d.haproxy.Process.Pid, syscall.SIGKILL)
	}
	var wg sync.WaitGroup
	for _, n := range d.nodes {
		if n.patroni != nil {
			syscall.Kill(-n.patroni.Process.Pid, syscall.SIGKILL)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := os.Stat(filepath.Join(n.dataDir(), "postmaster.pid")); err != nil {
				return
			}
			cmd := exec.Command(filepath.Join(pgcluster.BinDir(), "pg_ctl"), "stop", "-D", n.dataDir(), "-m", "immediate", "-w", "-t", "10")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.cred}
			cmd.Run()
		}()
	}
	wg.Wait()
	for _, n := range d.nodes {
		if n.etcd != nil {
			syscall.Kill(-n.etcd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// dumpLogs logs the tail of every process's log, for a failed run.
func (d *dbTier) dumpLogs() {
	files, _ := filepath.Glob(filepath.Join(d.dir, "*.log"))
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		if len(raw) > 6000 {
			raw = raw[len(raw)-6000:]
		}
		d.t.Logf("==== %s (tail)\n%s", filepath.Base(f), raw)
	}
}

// checkStatus gathers the deployment's status from the inventory as
// `server status` does and checks its database rows against Patroni: the
// node d.primary() names is the one primary, the others running
// replicas, and no warning about the database tier. A node that has just
// rejoined can still be restarting its PostgreSQL (after pg_rewind) while
// the consensus store already lists it as running, so the status is
// gathered again until it agrees, for up to statusSettle; the last
// disagreement is the failure.
func (d *dbTier) checkStatus(t *testing.T) {
	t.Helper()
	want := d.primary()
	if want == nil {
		t.Fatal("no primary to check the status against")
	}
	var problems []string
	defer func() {
		if t.Failed() {
			for _, p := range problems {
				t.Error(p)
			}
		}
	}()
	testenv.Eventually(t, statusSettle, "server status to agree with Patroni on "+want.name+" primary and the others running replicas", func() bool {
		problems = d.statusProblems(want)
		return len(problems) == 0
	})
}

// statusSettle bounds how long checkStatus waits for `server status` to
// agree with Patroni once the tier is back: a rejoined node's restart
// after pg_rewind, a few Patroni loops (loop_wait 1 s) on a loaded machine.
const statusSettle = 60 * time.Second

// statusProblems gathers the status once and says where it disagrees with
// want as the primary; none when it agrees.
func (d *dbTier) statusProblems(want *dbNode) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := gather.Cluster(ctx, gather.Config{Inventory: d.inv, Timeout: 5 * time.Second})
	if err != nil {
		return []string{err.Error()}
	}
	var b strings.Builder
	c.WriteTable(&b)
	if len(c.DBNodes) != len(d.nodes) {
		return []string{fmt.Sprintf("server status lists %d database nodes, want %d:\n%s", len(c.DBNodes), len(d.nodes), b.String())}
	}
	var out []string
	for _, n := range c.DBNodes {
		role := "replica"
		if n.Name == want.name {
			role = "primary"
		}
		if n.Role != role || n.State != "running" || n.Error != "" {
			out = append(out, fmt.Sprintf("server status: database node %s is %q %q (%s), want %s running:\n%s", n.Name, n.Role, n.State, n.Error, role, b.String()))
		}
		if role == "replica" && n.LagBytes == nil {
			out = append(out, fmt.Sprintf("server status: replica %s has no lag, want the bytes behind the primary:\n%s", n.Name, b.String()))
		}
	}
	for _, w := range c.Warnings {
		if strings.Contains(w, "database") {
			out = append(out, fmt.Sprintf("server status warns %q on a healthy database tier:\n%s", w, b.String()))
		}
	}
	return out
}
