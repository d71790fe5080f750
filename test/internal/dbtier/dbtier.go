// Package dbtier runs repool's database tier for the tests that need it,
// as docs/ha.md builds it: three PostgreSQL nodes under Patroni with
// synchronous replication and three etcd members, all from the shipped
// configuration files (deploy/patroni, deploy/etcd), each node in a
// network namespace the caller made, where etcd, Patroni and PostgreSQL
// run as the postgres OS user on the runbook's ports. What sits in front
// (HAProxy, from an inventory's database section) is the caller's.
package dbtier

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
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

	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/pgcluster"
	"github.com/repool/repool/internal/status/gather"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// The runbook's ports on each database node (deploy/patroni/patroni.yml,
// deploy/etcd/etcd.env): free in a namespace of the node's own.
const (
	PGPort     = 5432
	RESTPort   = 8008
	EtcdClient = 2379
	EtcdPeer   = 2380
)

// NodeSpec is where a database node runs: a network namespace the caller
// made, with Addr on its interface.
type NodeSpec struct {
	Name string // pg1, pg2, pg3
	Addr string
	NS   string
}

// Config is a tier to start.
type Config struct {
	// Root is the module's root, where deploy/ is.
	Root string
	// Dir is the run directory (the postgres user must reach it).
	Dir   string
	Nodes []NodeSpec
	// LBAddrs are the LB hosts' addresses, as PostgreSQL sees HAProxy's
	// connections: they replace the runbook's 10.0.0.11 and 10.0.0.12 in
	// the shipped pg_hba (one address for both is fine).
	LBAddrs [2]string
	// VIP is the address the servers connect to and verify (sslmode
	// verify-full): the nodes' certificate holds it.
	VIP string
}

// Node is one database node: an etcd member and a Patroni with its
// PostgreSQL.
type Node struct {
	NodeSpec
	dir                   string // data, sockets, configuration
	etcd, patroni         *exec.Cmd
	etcdDone, patroniDone chan struct{}
	// PatroniLog is the file Patroni (and its PostgreSQL) logs to.
	PatroniLog string
}

// restURL is the URL of path on n's Patroni REST API.
func (n *Node) restURL(path string) string {
	return fmt.Sprintf("http://%s:%d%s", n.Addr, RESTPort, path)
}

func (n *Node) socketDir() string { return filepath.Join(n.dir, "run") }
func (n *Node) dataDir() string   { return filepath.Join(n.dir, "data") }

// Tier is a running database tier.
type Tier struct {
	t            testing.TB
	cfg          Config
	cred         *syscall.Credential
	uid, gid     int
	ca           *tlstest.CA
	CAFile       string // the CA of the nodes' certificate, for sslrootcert
	certFile     string
	keyFile      string
	Nodes        []*Node
	superuserPwd string
	// RepoolPassword is role repool's password (docs/ha.md, step 2).
	RepoolPassword string
}

// PostgresCred is the postgres OS user, as which etcd, Patroni and
// PostgreSQL run (PostgreSQL refuses root).
func PostgresCred(t testing.TB) (*syscall.Credential, int, int) {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("the postgres OS user: %v (scripts/test installs PostgreSQL)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid
}

// Binaries are the programs Start needs besides PostgreSQL's.
var Binaries = []string{"etcd", "patroni", "patronictl", "setpriv"}

// Start starts three etcd members and three Patroni nodes in the
// namespaces cfg names, waits for a primary with a synchronous standby,
// and makes role and database repool as docs/ha.md's step 2. Stop (also
// run by t's cleanup) ends them.
func Start(t testing.TB, cfg Config) *Tier {
	t.Helper()
	for _, bin := range Binaries {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s: %v (scripts/test installs etcd-server, patroni and util-linux)", bin, err)
		}
	}
	cred, uid, gid := PostgresCred(t)
	d := &Tier{t: t, cfg: cfg, cred: cred, uid: uid, gid: gid, ca: tlstest.NewCA(t, "repool db test CA"),
		superuserPwd: "test-superuser", RepoolPassword: "test-repool"}
	t.Cleanup(d.Stop)
	d.CAFile = filepath.Join(cfg.Dir, "db-ca.crt")
	if err := os.WriteFile(d.CAFile, d.ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// One certificate for every node's etcd and PostgreSQL: the nodes'
	// addresses (etcd checks a peer's client certificate against its
	// source address) and the VIP's (servers verify the VIP's address).
	sans := []string{cfg.VIP}
	for _, n := range cfg.Nodes {
		sans = append(sans, n.Addr)
	}
	pair := d.ca.Issue("repool-db", sans...)
	d.certFile, d.keyFile = pair.Write(t, cfg.Dir, "db")
	for _, f := range []string{d.certFile, d.keyFile} {
		if err := os.Chown(f, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	for _, spec := range cfg.Nodes {
		n := &Node{NodeSpec: spec, dir: filepath.Join(cfg.Dir, spec.Name)}
		for _, sub := range []string{"", "run", "etcd"} {
			p := filepath.Join(n.dir, sub)
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		d.Nodes = append(d.Nodes, n)
	}
	for _, n := range d.Nodes {
		d.startEtcd(n)
	}
	// As the runbook: Patroni once etcd has its quorum. Patroni 3.0
	// refuses to start on a member whose cluster version is not decided
	// yet (it parses "not_decided" as a version and exits).
	d.waitEtcd(pair)
	for _, n := range d.Nodes {
		d.writePatroniConfig(n)
	}
	// The first node bootstraps the cluster; the others then copy it.
	d.StartPatroni(d.Nodes[0])
	testenv.Eventually(t, 90*time.Second, d.Nodes[0].Name+" to bootstrap the cluster and answer /primary 200", func() bool {
		return d.RESTStatus(d.Nodes[0], "/primary") == http.StatusOK
	})
	for _, n := range d.Nodes[1:] {
		d.StartPatroni(n)
	}
	testenv.Eventually(t, 120*time.Second, "two streaming standbys, one of them synchronous", func() bool {
		return d.SyncStandby() != ""
	})
	d.createRepoolRole()
	return d
}

// path is a shipped file's path.
func (d *Tier) path(rel string) string { return filepath.Join(d.cfg.Root, rel) }

const (
	patroniYML = "deploy/patroni/patroni.yml"
	etcdEnv    = "deploy/etcd/etcd.env"
)

// startEtcd starts n's etcd member from the shipped environment file with
// the test's names, addresses, ports and directories.
func (d *Tier) startEtcd(n *Node) {
	t := d.t
	raw, err := os.ReadFile(d.path(etcdEnv))
	if err != nil {
		t.Fatal(err)
	}
	var cluster []string
	for _, o := range d.Nodes {
		cluster = append(cluster, fmt.Sprintf("%s=https://%s:%d", o.Name, o.Addr, EtcdPeer))
	}
	over := map[string]string{
		"ETCD_NAME":                        n.Name,
		"ETCD_DATA_DIR":                    filepath.Join(n.dir, "etcd"),
		"ETCD_LISTEN_CLIENT_URLS":          fmt.Sprintf("https://%s:%d", n.Addr, EtcdClient),
		"ETCD_ADVERTISE_CLIENT_URLS":       fmt.Sprintf("https://%s:%d", n.Addr, EtcdClient),
		"ETCD_LISTEN_PEER_URLS":            fmt.Sprintf("https://%s:%d", n.Addr, EtcdPeer),
		"ETCD_INITIAL_ADVERTISE_PEER_URLS": fmt.Sprintf("https://%s:%d", n.Addr, EtcdPeer),
		"ETCD_INITIAL_CLUSTER":             strings.Join(cluster, ","),
		"ETCD_CERT_FILE":                   d.certFile,
		"ETCD_KEY_FILE":                    d.keyFile,
		"ETCD_TRUSTED_CA_FILE":             d.CAFile,
		"ETCD_PEER_CERT_FILE":              d.certFile,
		"ETCD_PEER_KEY_FILE":               d.keyFile,
		"ETCD_PEER_TRUSTED_CA_FILE":        d.CAFile,
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
	n.etcd, n.etcdDone = d.run(n, filepath.Join(d.cfg.Dir, n.Name+"-etcd.log"), env, "etcd")
}

// waitEtcd waits until every etcd member answers GET /version with a
// decided cluster version, over TLS with the nodes' client certificate.
func (d *Tier) waitEtcd(pair tlstest.Pair) {
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
	for _, n := range d.Nodes {
		testenv.Eventually(t, 60*time.Second, n.Name+"'s etcd member to report a decided cluster version", func() bool {
			resp, err := c.Get(fmt.Sprintf("https://%s:%d/version", n.Addr, EtcdClient))
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

// run starts argv in n's namespace as the postgres OS user (ip netns exec
// needs root, setpriv then drops to the user), in its own process group,
// with its output in logPath. If the test dies, the caller's next run
// kills what runs in its namespaces (the parent-death signal does not
// survive setpriv's change of user).
func (d *Tier) run(n *Node, logPath string, env []string, argv ...string) (*exec.Cmd, chan struct{}) {
	t := d.t
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	argv = append([]string{"ip", "netns", "exec", n.NS, "setpriv",
		"--reuid=" + fmt.Sprint(d.uid), "--regid=" + fmt.Sprint(d.gid), "--clear-groups", "--"}, argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = d.cfg.Dir
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
func (d *Tier) writePatroniConfig(n *Node) {
	t := d.t
	raw, err := os.ReadFile(d.path(patroniYML))
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
	cfg["name"] = n.Name
	rest := get(cfg, "restapi")
	rest["listen"] = fmt.Sprintf("%s:%d", n.Addr, RESTPort)
	rest["connect_address"] = rest["listen"]
	get(cfg, "ctl")["cacert"] = d.CAFile
	etcd := get(cfg, "etcd3")
	// The shipped file names this node's own member only.
	if h, _ := etcd["hosts"].(string); strings.Contains(h, ",") {
		t.Fatalf("%s: etcd3.hosts %q lists more than this node's member", patroniYML, h)
	}
	etcd["hosts"] = fmt.Sprintf("%s:%d", n.Addr, EtcdClient)
	etcd["cacert"], etcd["cert"], etcd["key"] = d.CAFile, d.certFile, d.keyFile
	params := get(cfg, "bootstrap", "dcs", "postgresql", "parameters")
	params["ssl_cert_file"], params["ssl_key_file"] = d.certFile, d.keyFile
	pg := get(cfg, "postgresql")
	pg["listen"] = fmt.Sprintf("%s:%d", n.Addr, PGPort)
	pg["connect_address"] = pg["listen"]
	pg["data_dir"] = n.dataDir()
	pg["bin_dir"] = pgcluster.BinDir()
	pg["pgpass"] = filepath.Join(n.dir, "pgpass")
	get(cfg, "postgresql", "parameters")["unix_socket_directories"] = n.socketDir()
	auth := get(cfg, "postgresql", "authentication")
	get(auth, "superuser")["password"] = d.superuserPwd
	for _, role := range []string{"replication", "rewind"} {
		get(auth, role)["sslrootcert"] = d.CAFile
	}
	hba, ok := pg["pg_hba"].([]any)
	if !ok {
		t.Fatalf("%s: postgresql.pg_hba is not a list", patroniYML)
	}
	// The runbook's addresses in the shipped pg_hba, mapped to the test's:
	// the nodes' (replication, rewind) and the LB hosts'.
	addrs := map[string]string{"10.0.0.11": d.cfg.LBAddrs[0], "10.0.0.12": d.cfg.LBAddrs[1]}
	for i, o := range d.Nodes {
		addrs[fmt.Sprintf("10.0.0.%d", 31+i)] = o.Addr
	}
	for i, l := range hba {
		line := l.(string)
		for from, to := range addrs {
			line = strings.ReplaceAll(line, from+"/32", to+"/32")
		}
		hba[i] = line
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.patroniConfig(n), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (d *Tier) patroniConfig(n *Node) string { return filepath.Join(n.dir, "patroni.yml") }

// StartPatroni starts (or restarts) n's Patroni, which starts its
// PostgreSQL.
func (d *Tier) StartPatroni(n *Node) {
	n.PatroniLog = filepath.Join(d.cfg.Dir, n.Name+"-patroni.log")
	if n.patroni != nil {
		n.PatroniLog = filepath.Join(d.cfg.Dir, n.Name+"-patroni.restarted.log")
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + n.dir, "LANG=C.UTF-8"}
	n.patroni, n.patroniDone = d.run(n, n.PatroniLog, env, "patroni", d.patroniConfig(n))
}

// StopPatroni stops n's Patroni as `systemctl stop patroni` does (SIGTERM
// to Patroni alone, KillMode=process): Patroni shuts its PostgreSQL down
// and gives up the leader key.
func (d *Tier) StopPatroni(n *Node, within time.Duration) {
	d.t.Helper()
	n.patroni.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.patroniDone:
	case <-time.After(within):
		d.t.Fatalf("patroni %s did not stop within %v of SIGTERM", n.Name, within)
	}
}

// Crash kills n's Patroni and PostgreSQL with SIGKILL, as a host that
// dies: nothing gives up the leader key, which expires after the ttl.
func (d *Tier) Crash(n *Node) {
	pid := d.postmasterPID(n)
	syscall.Kill(-n.patroni.Process.Pid, syscall.SIGKILL)
	if pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-n.patroniDone
}

// postmasterPID is the pid of n's running postmaster, 0 if none.
func (d *Tier) postmasterPID(n *Node) int {
	raw, err := os.ReadFile(filepath.Join(n.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// Patronictl runs patronictl with n's configuration, as the postgres OS
// user.
func (d *Tier) Patronictl(n *Node, args ...string) string {
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

// RESTStatus is the status of GET path on n's Patroni REST API, 0 if it
// does not answer.
func (d *Tier) RESTStatus(n *Node, path string) int {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(n.restURL(path))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// member is one member in Patroni's GET /cluster.
type member struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	State string `json:"state"`
}

// members asks any node that answers for the cluster's members.
func (d *Tier) members() []member {
	c := http.Client{Timeout: time.Second}
	for _, n := range d.Nodes {
		resp, err := c.Get(n.restURL("/cluster"))
		if err != nil {
			continue
		}
		var body struct {
			Members []member `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err == nil {
			return body.Members
		}
	}
	return nil
}

// SyncStandby returns the name of the synchronous standby once the
// cluster has a leader, a streaming synchronous standby and another
// streaming standby; "" until then.
func (d *Tier) SyncStandby() string {
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

// Primary returns the node whose Patroni answers /primary 200, or nil.
func (d *Tier) Primary() *Node {
	for _, n := range d.Nodes {
		if d.RESTStatus(n, "/primary") == http.StatusOK {
			return n
		}
	}
	return nil
}

// Psql runs SQL as the superuser on n's Unix socket (peer, as the postgres
// OS user), as the runbook does.
func (d *Tier) Psql(n *Node, db, sql string) string {
	d.t.Helper()
	cmd := exec.Command(filepath.Join(pgcluster.BinDir(), "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", n.socketDir(), "-p", strconv.Itoa(PGPort), "-U", "postgres", "-d", db, "-c", sql)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.cred}
	cmd.Dir = d.cfg.Dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		d.t.Fatalf("psql on %s: %v\n%s", n.Name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// createRepoolRole makes role and database repool as docs/ha.md's step 2.
func (d *Tier) createRepoolRole() {
	p := d.Primary()
	if p == nil {
		d.t.Fatal("no primary")
	}
	d.Psql(p, "postgres", "CREATE ROLE repool LOGIN PASSWORD '"+d.RepoolPassword+"'")
	d.Psql(p, "postgres", "CREATE DATABASE repool OWNER repool")
	d.Psql(p, "postgres", "REVOKE ALL ON DATABASE repool FROM PUBLIC")
	d.Psql(p, "repool", "REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT ALL ON SCHEMA public TO repool")
}

// DSN is the servers' --store as docs/ha.md gives it: role repool through
// HAProxy's database frontend at vip:port, TLS verified for the VIP's
// address, and only a read-write session accepted.
func (d *Tier) DSN(vip string, port int) string {
	return fmt.Sprintf("postgres://repool:%s@%s:%d/repool?sslmode=verify-full&sslrootcert=%s&target_session_attrs=read-write",
		d.RepoolPassword, vip, port, d.CAFile)
}

// Stop ends every process of the tier: Patroni (whose PostgreSQL gets an
// immediate shutdown) and etcd. It may run more than once.
func (d *Tier) Stop() {
	var wg sync.WaitGroup
	for _, n := range d.Nodes {
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
	for _, n := range d.Nodes {
		if n.etcd != nil {
			syscall.Kill(-n.etcd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// LogTail is the last n bytes of the file at path, without the tracebacks
// Patroni's REST API logs for every check HAProxy drops.
func LogTail(path string, n int) string {
	raw, _ := os.ReadFile(path)
	var keep []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, " ") || strings.Contains(line, "Traceback") || strings.Contains(line, "Exception happened") {
			continue
		}
		keep = append(keep, line)
	}
	out := strings.Join(keep, "\n")
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// CheckStatus gathers the deployment's status from inv (with the tier in
// its database section) as `server status` does and checks its database
// rows against Patroni: the node Primary names is the one primary, the others running
// replicas, and no warning about the database tier. A node that has just
// rejoined can still be restarting its PostgreSQL (after pg_rewind) while
// the consensus store already lists it as running, so the status is
// gathered again until it agrees, for up to statusSettle; the last
// disagreement is the failure.
func (d *Tier) CheckStatus(t testing.TB, inv *inventory.Inventory) {
	t.Helper()
	want := d.Primary()
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
	testenv.Eventually(t, statusSettle, "server status to agree with Patroni on "+want.Name+" primary and the others running replicas", func() bool {
		problems = d.statusProblems(inv, want)
		return len(problems) == 0
	})
}

// statusSettle bounds how long CheckStatus waits for `server status` to
// agree with Patroni once the tier is back: a rejoined node's restart
// after pg_rewind, a few Patroni loops (loop_wait 1 s) on a loaded machine.
const statusSettle = 60 * time.Second

// statusProblems gathers the status once and says where it disagrees with
// want as the primary; none when it agrees.
func (d *Tier) statusProblems(inv *inventory.Inventory, want *Node) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := gather.Cluster(ctx, gather.Config{Inventory: inv, Timeout: 5 * time.Second})
	if err != nil {
		return []string{err.Error()}
	}
	var b strings.Builder
	c.WriteTable(&b)
	if len(c.DBNodes) != len(d.Nodes) {
		return []string{fmt.Sprintf("server status lists %d database nodes, want %d:\n%s", len(c.DBNodes), len(d.Nodes), b.String())}
	}
	var out []string
	for _, n := range c.DBNodes {
		role := "replica"
		if n.Name == want.Name {
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
