package e2e

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
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

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/pgcluster"
	"github.com/repool/repool/internal/status"
	"github.com/repool/repool/internal/testenv"
)

// TestRunbook builds the cluster the way docs/ha.md's "Building a cluster
// from nothing" says to, with the shipped files, and then runs
// TestFailover's procedures and faults on it (failoverScenario):
//
//   - step 1: deploy/make-certs makes the CA and every certificate;
//   - step 2: PostgreSQL with the runbook's pg_hba line per server (TLS,
//     scram-sha-256) and its SQL, read from docs/ha.md, for the role
//     and database;
//   - step 3: scripts/install into each emulated host's own root
//     (DESTDIR), with the system users it creates;
//   - step 4: each server's certificate, key and CA installed with the
//     runbook's owners and modes, deploy/config/server.yaml and server.env
//     as installed, changed only in addresses, ha_name and password, and
//     the server run as deploy/systemd/repool-server.service says (its
//     ExecStart, User, Group, EnvironmentFile, WorkingDirectory);
//   - step 5: the LB hosts' certificates, the inventory made from
//     haproxy/inventory.yaml (addresses and names; no database tier),
//     rendered per host by the installed repool-server and installed;
//   - step 7: the runbook's checks, literally: curl with the monitoring
//     identity on /readyz/active, "haproxy status" (one UP, two NOLB on
//     both LB hosts), the VIP on one LB host, a registration through the
//     sidecar;
//   - step 8: a production tenant made through the VIP's control port
//     with an operator token from "repool-server admin-token";
//   - step 6: the sidecar of the application host, on the tenant's key,
//     run as deploy/systemd/repool-sidecar.service says with the installed
//     sidecar.yaml (deploy/config/sidecar.yaml) changed only in the VIP's
//     address and, as the one departure from the runbook, listening on
//     the client host's address: the backend is this test, on another host.
//
// Paths: each emulated host's files live under its root, the DESTDIR
// scripts/install staged them into; an absolute path in a unit or a
// configuration (/etc/repool/..., /usr/local/bin/...) is that path under
// the host's root. What systemd adds around ExecStart (the sandboxing,
// UMask, LimitNOFILE, restarts) is not reproduced.
func TestRunbook(t *testing.T) {
	began := time.Now()
	c := claimRun(t, "tcpdump", "openssl", "setpriv", "prlimit", "useradd", "userdel", "env", pgBin+"/psql")
	network(t)
	cp := c.capture(hostLB1, hostLB2, hostS1, hostS2, hostS3)
	b := c.buildByRunbook()
	t.Logf("cluster built by the runbook in %v: s1 active, s2 and s3 standby, VIP %s on lb1, the sidecar on client for tenant %s", time.Since(began).Round(time.Millisecond), vipAddr, c.tenant)
	c.failoverScenario(t, b, cp, began)
	c.rb.rollingUpgrade(t, b)
}

// runbook holds a cluster built as docs/ha.md says (TestRunbook).
type runbook struct {
	c      *cluster
	tlsDir string            // deploy/make-certs' directory: tls/ of the runbook
	roots  map[string]string // emulated host name -> its root (scripts/install's DESTDIR)
	// The units scripts/install installed (on s1 and client: every host
	// gets the same).
	serverUnit, sidecarUnit unit
	pgPassword              string // the role repool's
}

// The hosts that run repool's programs (step 3: servers, LB hosts,
// application hosts).
var runbookHosts = []host{hostS1, hostS2, hostS3, hostLB1, hostLB2, hostClient}

// at is path p on host h: under h's root.
func (r *runbook) at(h host, p string) string { return filepath.Join(r.roots[h.name], p) }

// tenantRunbook is the production tenant of step 8.
const tenantRunbook = "acme"

// buildByRunbook builds the cluster by the runbook's steps (TestRunbook's
// comment) and returns the backend that registered the initial resources
// through the sidecar.
func (c *cluster) buildByRunbook() *backend {
	c.tb.Helper()
	r := &runbook{c: c, roots: map[string]string{}, pgPassword: randomHex(c.tb, 16)}
	c.rb = r

	// Step 1: certificates, for the runbook's name, the VIP, the database
	// and the three servers.
	r.tlsDir = filepath.Join(c.dir, "tls")
	c.run(c.root, nil, "deploy/make-certs", r.tlsDir, serverName, vipAddr, hostDB.addr, hostS1.addr, hostS2.addr, hostS3.addr)
	caPEM, err := os.ReadFile(filepath.Join(r.tlsDir, "ca.crt"))
	if err != nil {
		c.tb.Fatal(err)
	}
	pair := func(name string) []tls.Certificate {
		cert, err := tls.LoadX509KeyPair(filepath.Join(r.tlsDir, name+".crt"), filepath.Join(r.tlsDir, name+".key"))
		if err != nil {
			c.tb.Fatalf("deploy/make-certs' %s pair: %v", name, err)
		}
		return []tls.Certificate{cert}
	}
	// The test probes the servers' HTTP ports as Prometheus does (the
	// monitoring identity) and calls them over gRPC as a sidecar.
	c.useTLS(&tlsFiles{caPEM: caPEM, dir: r.tlsDir, caFile: filepath.Join(r.tlsDir, "ca.crt"),
		vipPEM: filepath.Join(r.tlsDir, "vip.pem"), client: pair("sidecar")}, pair("prometheus"))

	// Step 2: PostgreSQL.
	r.postgres()

	// Step 3: build and install on every host that runs repool's programs.
	r.users()
	for _, h := range runbookHosts {
		r.roots[h.name] = filepath.Join(c.dir, "hosts", h.name)
		c.run(c.root, []string{"DESTDIR=" + r.roots[h.name]}, "scripts/install")
		// What scripts/install does without DESTDIR: the configurations
		// readable by their service's group.
		for file, group := range map[string]string{"server.yaml": "repool", "sidecar.yaml": "repool-sidecar"} {
			chown(c.tb, r.at(h, "/etc/repool/"+file), "root", group)
		}
	}
	r.serverUnit = readUnit(c.tb, r.at(hostS1, "/etc/systemd/system/repool-server.service"))
	r.sidecarUnit = readUnit(c.tb, r.at(hostClient, "/etc/systemd/system/repool-sidecar.service"))
	// The LB hosts run the installed repool-server's render, status and
	// sync commands.
	c.serverBin = r.at(hostLB1, "/usr/local/bin/repool-server")

	// Step 4: servers; the first one alone, then the others.
	for i, h := range []host{hostS1, hostS2, hostS3} {
		r.configureServer(h, i+1)
	}
	s1 := c.startServer(hostS1)
	c.waitDemoKey(s1)
	if a := c.waitActive(30*time.Second, nil); a != s1 {
		c.tb.Fatalf("active server = %s, want s1 (the only one)", a.host.name)
	}
	c.installAudit(s1)
	c.startStandbys(hostS2, hostS3)

	// Step 5: LB hosts.
	r.loadBalancers()
	testenv.Eventually(c.tb, 20*time.Second, "the VIP on lb1 only", func() bool {
		h := vipHolders(hostLB1, hostLB2)
		return len(h) == 1 && h[0] == "lb1"
	})

	// Step 7, the servers and the LB hosts.
	r.verifyServers()

	// Step 8: a production tenant, and step 6: the application host's
	// sidecar with its key.
	c.tenant, c.apiKey = tenantRunbook, r.createTenant()
	c.sidecar = r.startSidecar()

	// Step 7, the last check: a registration through the sidecar.
	out := c.output(nil, "curl", "-s", "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"resources":[{"id":"proxy-1"}]}`,
		sidecarURL("/v1/providers/default/resources"))
	// Compared as JSON: the sidecar's encoder (protojson) varies its
	// spacing on purpose.
	var reg map[string]any
	if json.Unmarshal([]byte(out), &reg) != nil || len(reg) != 2 || reg["registered"] != 1.0 || reg["existing"] != 0.0 {
		c.tb.Fatalf("step 7: registration through the sidecar = %s, want {\"registered\":1,\"existing\":0} (docs/ha.md)", out)
	}
	return c.registerInitial()
}

// run runs argv in dir with env added, and fails on error.
func (c *cluster) run(dir string, env []string, argv ...string) {
	c.tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.tb.Fatalf("%s = got error %v, want nil\n%s", strings.Join(argv, " "), err, out)
	}
}

// output runs argv with env added and returns its standard output; it
// fails on error.
func (c *cluster) output(env []string, argv ...string) string {
	c.tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.tb.Fatalf("%s = got error %v, want nil\n%s%s", strings.Join(argv, " "), err, out, stderr.String())
	}
	return string(out)
}

func randomHex(tb testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// chown sets path's owner and group by name.
func chown(tb testing.TB, path, owner, group string) {
	tb.Helper()
	u, err := user.Lookup(owner)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		tb.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(g.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		tb.Fatal(err)
	}
}

// install is install(1) of the runbook: src to dst with owner, group and
// mode.
func install(tb testing.TB, src, dst, owner, group string, mode os.FileMode) {
	tb.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, dst, b, owner, group, mode)
}

// writeFile writes b to dst with owner, group and mode, making its
// directory.
func writeFile(tb testing.TB, dst string, b []byte, owner, group string, mode os.FileMode) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		tb.Fatal(err)
	}
	chown(tb, dst, owner, group)
	if err := os.Chmod(dst, mode); err != nil {
		tb.Fatal(err)
	}
}

// edit replaces, in the file at path, each old string with its new one,
// as an operator does with $EDITOR; an old string the file does not hold
// fails tb (the runbook's edit no longer applies to the shipped file).
func edit(tb testing.TB, path string, pairs ...string) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			tb.Fatalf("%s holds no %q to change: the shipped file and the runbook disagree", path, pairs[i])
		}
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), fi.Mode()); err != nil {
		tb.Fatal(err)
	}
}

// users creates the system users scripts/install creates outside a
// DESTDIR, as it does, if they are missing; the test removes those it
// created when it ends.
func (r *runbook) users() {
	tb := r.c.tb
	for _, u := range []string{"repool", "repool-sidecar"} {
		if _, err := user.Lookup(u); err == nil {
			continue
		}
		r.c.run("/", nil, "useradd", "--system", "--user-group", "--home-dir", "/var/lib/"+u, "--no-create-home", "--shell", "/usr/sbin/nologin", u)
		// Registered before any process starts: it runs after they stopped.
		tb.Cleanup(func() {
			if out, err := exec.Command("userdel", u).CombinedOutput(); err != nil {
				tb.Errorf("userdel %s = got error %v, want nil\n%s", u, err, out)
			}
		})
	}
}

// docsSQL is the SQL of the runbook's step 2 (the psql heredoc of
// docs/ha.md), with password as the role's.
func (r *runbook) docsSQL(password string) string {
	r.c.tb.Helper()
	b, err := os.ReadFile(filepath.Join(r.c.root, "docs", "ha.md"))
	if err != nil {
		r.c.tb.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "runuser -u postgres -- psql <<'SQL'\n")
	sql, _, ok2 := strings.Cut(rest, "\nSQL\n")
	const example = "'a long random password'"
	if !ok || !ok2 || !strings.Contains(sql, example) {
		r.c.tb.Fatalf("docs/ha.md step 2: no psql <<'SQL' ... SQL block creating the role with the password %s", example)
	}
	return strings.Replace(sql, example, "'"+password+"'", 1) + "\n"
}

// postgres is step 2: a PostgreSQL on the db host with TLS on, the
// runbook's certificate and pg_hba lines (hostssl, one server each,
// scram-sha-256), and its SQL for the role and database. The test's own
// connection (the write audit, the epoch) is one more line: the
// superuser, over TLS, from the test's address only.
func (r *runbook) postgres() {
	c := r.c
	tb := c.tb
	pgDir := filepath.Join(c.dir, "pg")
	data := filepath.Join(pgDir, "data")
	if err := os.Mkdir(pgDir, 0o700); err != nil {
		tb.Fatal(err)
	}
	chown(tb, pgDir, "postgres", "postgres")
	asPG := []string{"setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"}
	c.run(pgDir, []string{"HOME=" + pgDir}, slices.Concat(asPG, []string{filepath.Join(pgBin, "initdb")}, pgcluster.InitdbArgs(data))...)
	key, cert := filepath.Join(pgDir, "repool.key"), filepath.Join(pgDir, "repool.crt")
	install(tb, filepath.Join(r.tlsDir, "postgres.key"), key, "postgres", "postgres", 0o600)
	install(tb, filepath.Join(r.tlsDir, "postgres.crt"), cert, "postgres", "postgres", 0o644)
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		tb.Fatal(err)
	}
	for _, h := range []host{hostS1, hostS2, hostS3} {
		fmt.Fprintf(hba, "hostssl repool repool %s/32 scram-sha-256\n", h.addr)
	}
	fmt.Fprintf(hba, "# the test's own connection, not the runbook's\nhostssl all postgres %s/32 trust\n", rootAddr)
	hba.Close()
	c.pg = c.ps.start("postgres", hostDB.ns(), []string{"HOME=" + pgDir}, slices.Concat(asPG, []string{filepath.Join(pgBin, "postgres")},
		pgcluster.ServerArgs(data, hostDB.addr, pgPort, pgDir), []string{"-c", "log_min_messages=warning",
			"-c", "ssl=on", "-c", "ssl_cert_file=" + cert, "-c", "ssl_key_file=" + key})...)
	psql := slices.Concat(asPG, []string{filepath.Join(pgBin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", pgDir, "-p", strconv.Itoa(pgPort)})
	testenv.Eventually(tb, 30*time.Second, "PostgreSQL to accept connections", func() bool {
		return exec.Command(psql[0], append(psql[1:], "-c", "SELECT 1")...).Run() == nil
	})
	cmd := exec.Command(psql[0], psql[1:]...)
	cmd.Dir = pgDir
	cmd.Stdin = strings.NewReader(r.docsSQL(r.pgPassword))
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("step 2's SQL = got error %v, want nil\n%s", err, out)
	}
	c.dsn = fmt.Sprintf("postgres://postgres@%s:%d/repool?sslmode=require", hostDB.addr, pgPort)
	c.connectDB()
}

// unit is what TestRunbook runs of a systemd unit's [Service] section.
type unit struct {
	name        string
	user, group string
	envFile     string // "" if none
	envOptional bool   // EnvironmentFile=-...: a missing file is not an error
	exec        []string
	workDir     string
}

// readUnit reads the unit file at path.
func readUnit(tb testing.TB, path string) unit {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	u := unit{name: filepath.Base(path)}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if section != "[Service]" || !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch k {
		case "User":
			u.user = v
		case "Group":
			u.group = v
		case "EnvironmentFile":
			u.envFile, u.envOptional = strings.TrimPrefix(v, "-"), strings.HasPrefix(v, "-")
		case "ExecStart":
			if strings.ContainsAny(v, `"'$\`) {
				tb.Fatalf("%s: ExecStart %q quotes or expands: the test runs it split on spaces", path, v)
			}
			u.exec = strings.Fields(v)
		case "WorkingDirectory":
			u.workDir = v
		}
	}
	if u.user == "" || u.group == "" || len(u.exec) == 0 || u.workDir == "" {
		tb.Fatalf("%s: want User, Group, ExecStart and WorkingDirectory in [Service], got %+v", path, u)
	}
	return u
}

// start runs u on host h as systemd would start it there (but for its
// sandboxing): as its user and group, in its working directory (made as
// its StateDirectory, mode 0700), with its environment file, and its
// ExecStart's absolute paths under h's root.
func (r *runbook) start(h host, u unit, name string) *proc {
	tb := r.c.tb
	tb.Helper()
	work := r.at(h, u.workDir)
	if err := os.MkdirAll(filepath.Dir(work), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Mkdir(work, 0o700); err != nil && !os.IsExist(err) {
		tb.Fatal(err)
	}
	chown(tb, work, u.user, u.group)
	var env []string
	if u.envFile != "" {
		b, err := os.ReadFile(r.at(h, u.envFile))
		switch {
		case err == nil:
			for _, line := range strings.Split(string(b), "\n") {
				if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
					env = append(env, line)
				}
			}
		case !os.IsNotExist(err) || !u.envOptional:
			tb.Fatalf("%s: EnvironmentFile %s: %v", u.name, u.envFile, err)
		}
	}
	argv := []string{"setpriv", "--reuid=" + u.user, "--regid=" + u.group, "--init-groups", "--", "env", "-C", work}
	for _, a := range u.exec {
		if strings.HasPrefix(a, "/") {
			a = r.at(h, a)
		}
		argv = append(argv, a)
	}
	return r.c.ps.start(name, h.ns(), env, argv...)
}

// configureServer is step 4's files for server h, the runbook's repool<n>:
// its certificate pair and the CA with the runbook's owners and modes,
// server.yaml changed in its addresses and ha_name, server.env in the
// role's password.
func (r *runbook) configureServer(h host, n int) {
	tb := r.c.tb
	tls := func(name string) string { return filepath.Join(r.tlsDir, name) }
	install(tb, tls(fmt.Sprintf("server%d.key", n)), r.at(h, "/etc/repool/tls/server.key"), "root", "repool", 0o640)
	install(tb, tls(fmt.Sprintf("server%d.crt", n)), r.at(h, "/etc/repool/tls/server.crt"), "root", "root", 0o644)
	install(tb, tls("ca.crt"), r.at(h, "/etc/repool/tls/ca.crt"), "root", "root", 0o644)
	edit(tb, r.at(h, "/etc/repool/server.yaml"),
		"10.0.0.21:", h.addr+":", "@10.0.0.31:", "@"+hostDB.addr+":", "ha_name: repool1", "ha_name: "+h.name,
		"/etc/repool/", r.at(h, "/etc/repool")+"/")
	edit(tb, r.at(h, "/etc/repool/server.env"), "PGPASSWORD=change-me", "PGPASSWORD="+r.pgPassword)
}

// startServer runs repool-server.service on h.
func (r *runbook) startServer(h host) *proc {
	return r.start(h, r.serverUnit, "server-"+h.name)
}

// serverCommand is "repool-server ARGS --config /etc/repool/server.yaml"
// on server host h with server.env's variables ("set -a; .
// /etc/repool/server.env; set +a" in the runbook).
func (r *runbook) serverCommand(h host, args ...string) *exec.Cmd {
	b, err := os.ReadFile(r.at(h, "/etc/repool/server.env"))
	if err != nil {
		r.c.tb.Fatal(err)
	}
	argv := slices.Concat([]string{"netns", "exec", h.ns(), r.at(h, "/usr/local/bin/repool-server")}, args,
		[]string{"--config", r.at(h, "/etc/repool/server.yaml")})
	cmd := exec.Command("ip", argv...)
	cmd.Env = os.Environ()
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			cmd.Env = append(cmd.Env, line)
		}
	}
	return cmd
}

// switchover is the runbook's directed switchover, run on s1.
func (r *runbook) switchover(to string) ([]byte, error) {
	return r.serverCommand(hostS1, "switchover", "--to", to, "--timeout", "20s").CombinedOutput()
}

// loadBalancers is step 5 on lb1 and lb2: the certificates, one
// inventory made from haproxy/inventory.yaml, rendered and installed per
// host as "Rendering and installing the LB configuration" says, then
// HAProxy and Keepalived started.
func (r *runbook) loadBalancers() {
	c := r.c
	tb := c.tb
	tls := func(name string) string { return filepath.Join(r.tlsDir, name) }
	example, err := os.ReadFile(filepath.Join(c.root, "haproxy", "inventory.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	inv := filepath.Join(c.dir, "inventory.yaml")
	if err := os.WriteFile(inv, example, 0o644); err != nil {
		tb.Fatal(err)
	}
	edit(tb, inv, "10.0.0.100/24", vipAddr+"/24", "10.0.0.11", hostLB1.addr, "10.0.0.12", hostLB2.addr,
		"repool1", hostS1.name, "10.0.0.21", hostS1.addr, "repool2", hostS2.name, "10.0.0.22", hostS2.addr,
		"repool3", hostS3.name, "10.0.0.23", hostS3.addr)
	var doc map[string]any
	b, _ := os.ReadFile(inv)
	if err := yaml.Unmarshal(b, &doc); err != nil {
		tb.Fatalf("%s: %v", inv, err)
	}
	// One PostgreSQL, reached directly: "leave the section out".
	delete(doc, "database")
	notify, err := os.ReadFile(filepath.Join(c.root, "keepalived", "notify.sh"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, h := range []host{hostLB1, hostLB2} {
		// The inventory as lb h sees its files: every path under its root.
		// lb2's entry leaves its paths to the defaults lb1's entry spells
		// out; they are spelled out here too, to be put under lb2's root.
		hostDoc := mapCopy(tb, doc)
		for _, e := range hostDoc["lb_hosts"].([]any) {
			lh := e.(map[string]any)
			name := lh["name"].(string)
			setDefault(lh, "stats_socket", "/run/haproxy/admin.sock")
			setDefault(lh, "notify_log", "/var/log/keepalived-repool-"+name+".log")
			setDefault(lh, "state_metrics", "/var/lib/prometheus/node-exporter/keepalived-repool-"+name+".prom")
			for _, k := range []string{"stats_socket", "notify_log", "state_metrics"} {
				lh[k] = r.at(h, lh[k].(string))
			}
		}
		for section, keys := range map[string][]string{"haproxy": {"tenant_map"}, "tls": {"cert", "server_ca", "client_cert"}, "keepalived": {"notify_script", "check_program"}} {
			m := hostDoc[section].(map[string]any)
			for _, k := range keys {
				if v, ok := m[k].(string); ok {
					m[k] = r.at(h, v)
				}
			}
		}
		hostInv := r.at(h, "/root/inventory.yaml")
		writeYAML(tb, hostInv, hostDoc)

		// The certificates, before the render (its haproxy -c opens them).
		tlsDir := r.at(h, "/etc/haproxy/tls")
		if err := os.MkdirAll(tlsDir, 0o750); err != nil {
			tb.Fatal(err)
		}
		chown(tb, tlsDir, "root", "haproxy")
		install(tb, tls("vip.pem"), filepath.Join(tlsDir, "vip.pem"), "root", "haproxy", 0o640)
		install(tb, tls("haproxy-client.pem"), filepath.Join(tlsDir, "haproxy-client.pem"), "root", "haproxy", 0o640)
		install(tb, tls("ca.crt"), filepath.Join(tlsDir, "ca.crt"), "root", "root", 0o644)
		// What the packages make: HAProxy's socket directory, the log and
		// the node exporter's textfile directories.
		for _, d := range []string{"/run/haproxy", "/var/log", "/var/lib/prometheus/node-exporter"} {
			if err := os.MkdirAll(r.at(h, d), 0o755); err != nil {
				tb.Fatal(err)
			}
		}

		// Render and install.
		work := r.at(h, "/root")
		render := []string{"haproxy", "render", "--inventory", hostInv, "--host", h.name, "--out", filepath.Join(work, "haproxy.cfg")}
		if m := maxconnFitsRE.FindStringSubmatch(c.renderOutput(render...)); m != nil {
			// Step 5: where the hard limit is too low for the example's
			// maxconn, the render says so and names one that fits; lower
			// haproxy.maxconn to it (raising the limit needs
			// CAP_SYS_RESOURCE, which a container may not have).
			n, _ := strconv.Atoi(m[1])
			hp := hostDoc["haproxy"].(map[string]any)
			tb.Logf("step 5 on %s: the render warns that maxconn %v needs more file descriptors than the hard limit; haproxy.maxconn %d, as it says", h.name, hp["maxconn"], n)
			hp["maxconn"] = n
			if fm, ok := hp["frontend_maxconn"].(int); ok && fm > n {
				hp["frontend_maxconn"] = n
			}
			writeYAML(tb, hostInv, hostDoc)
			if out := c.renderOutput(render...); strings.Contains(out, "warning") {
				tb.Fatalf("step 5: the render still warns with the maxconn it named:\n%s", out)
			}
		}
		c.render("keepalived", "render", "--inventory", hostInv, "--host", h.name, "--out", filepath.Join(work, "keepalived.conf"))
		l := &lb{host: h, dir: r.roots[h.name],
			haproxyCfg: r.at(h, "/etc/haproxy/haproxy.cfg"), kaConf: r.at(h, "/etc/keepalived/keepalived.conf"),
			socket: r.at(h, "/run/haproxy/admin.sock"), notifyLog: r.at(h, "/var/log/keepalived-repool-"+h.name+".log"),
			stateMetrics: r.at(h, "/var/lib/prometheus/node-exporter/keepalived-repool-"+h.name+".prom")}
		install(tb, filepath.Join(work, "haproxy.cfg"), l.haproxyCfg, "root", "root", 0o644)
		install(tb, filepath.Join(work, "keepalived.conf"), l.kaConf, "root", "root", 0o600)
		writeFile(tb, r.at(h, "/etc/keepalived/notify.sh"), notify, "root", "root", 0o755)
		// The checks the runbook runs before reloading, on the LB host.
		c.run("/", nil, "ip", "netns", "exec", h.ns(), haproxyBin, "-c", "-q", "-f", l.haproxyCfg)
		c.run("/", nil, "ip", "netns", "exec", h.ns(), keepalivedBin, "-t", "-f", l.kaConf)
		c.lbs[h.name] = l
		c.startHAProxy(l)
	}
	// HAProxy before Keepalived, on both hosts (cluster.loadBalancers).
	c.startKeepaliveds(func(h host) string { return r.at(h, "/run") })
}

// maxconnFitsRE finds the maxconn the render names when the hard limit
// of file descriptors is too low for the inventory's.
var maxconnFitsRE = regexp.MustCompile(`lower haproxy\.maxconn to (\d+) or less`)

// writeYAML writes doc to path, mode 0600, owned by root.
func writeYAML(tb testing.TB, path string, doc map[string]any) {
	tb.Helper()
	out, err := yaml.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, path, out, "root", "root", 0o600)
}

// mapCopy is a deep copy of a YAML document.
func mapCopy(tb testing.TB, m map[string]any) map[string]any {
	b, err := yaml.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	var out map[string]any
	if err := yaml.Unmarshal(b, &out); err != nil {
		tb.Fatal(err)
	}
	return out
}

func setDefault(m map[string]any, k, v string) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}

// verifyServers is step 7's checks of the servers and the LB hosts,
// literally: curl with the monitoring identity on each server's
// /readyz/active (200 on the active one, 404 on the others), "server
// haproxy status" on both LB hosts (one UP, two NOLB) and the VIP on one
// LB host only.
func (r *runbook) verifyServers() {
	c := r.c
	tb := c.tb
	tls := func(name string) string { return filepath.Join(r.tlsDir, name) }
	codes := map[string]string{}
	for _, h := range []host{hostS1, hostS2, hostS3} {
		codes[h.name] = c.output(nil, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", tls("ca.crt"),
			"--cert", tls("prometheus.crt"), "--key", tls("prometheus.key"), fmt.Sprintf("https://%s:%d/readyz/active", h.addr, httpPort))
	}
	if codes["s1"] != "200" || codes["s2"] != "404" || codes["s3"] != "404" {
		tb.Fatalf("step 7: /readyz/active with the monitoring identity = %v, want 200 on s1 (active), 404 on s2 and s3", codes)
	}
	for _, l := range []*lb{c.lbs["lb1"], c.lbs["lb2"]} {
		testenv.Eventually(tb, 10*time.Second, "step 7: one UP, two NOLB on "+l.host.name, func() bool {
			return c.serverState(l, "s1") == "UP" && c.serverState(l, "s2") == "NOLB" && c.serverState(l, "s3") == "NOLB"
		})
		tb.Logf("step 7: server haproxy status on %s:\n%s", l.host.name, c.haproxyStatus(l))
	}
	if h := vipHolders(hostLB1, hostLB2); len(h) != 1 {
		tb.Fatalf("step 7: VIP %s on %v, want on one LB host", vipAddr, h)
	}
}

// createTenant is step 8: an operator token from "repool-server
// admin-token" on s1, then the tenant, its limits and its key through
// the VIP's control port; it returns the key. The limits are sized for
// the test's load (the runbook's are an example).
func (r *runbook) createTenant() string {
	c := r.c
	tb := c.tb
	cmd := r.serverCommand(hostS1, "admin-token", "--role", "operator", "--ttl", "1h")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	tok, err := cmd.Output()
	if err != nil {
		tb.Fatalf("step 8: repool-server admin-token = got error %v, want nil\n%s", err, stderr.String())
	}
	vip := fmt.Sprintf("https://%s:8081", vipAddr)
	curl := func(method, path, body string) string {
		return c.output(nil, "curl", "-s", "--fail-with-body", "--cacert", filepath.Join(r.tlsDir, "ca.crt"), "-X", method, vip+path,
			"-H", "Authorization: Bearer "+strings.TrimSpace(string(tok)), "-d", body)
	}
	tb.Logf("step 8: %s", curl("POST", "/api/v1/tenants", `{"id":"`+tenantRunbook+`","name":"Acme Inc."}`))
	tb.Logf("step 8: %s", curl("PUT", "/api/v1/tenants/"+tenantRunbook+"/limits", `{"rate_per_second":20000,"max_streams":8,"max_resources":5000}`))
	var key struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal([]byte(curl("POST", "/api/v1/tenants/"+tenantRunbook+"/keys", `{"name":"app-hosts"}`)), &key); err != nil || !strings.HasPrefix(key.Key, "rpk_") {
		tb.Fatalf("step 8: the new key's answer: %v, key %q", err, key.Key)
	}
	return key.Key
}

// startSidecar is step 6 on the client host: the CA, the tenant's key,
// the installed sidecar.yaml changed in the VIP's address (and, the one
// departure, listening on the client host's address), then
// repool-sidecar.service.
func (r *runbook) startSidecar() *proc {
	c := r.c
	tb := c.tb
	h := hostClient
	install(tb, filepath.Join(r.tlsDir, "ca.crt"), r.at(h, "/etc/repool/tls/ca.crt"), "root", "root", 0o644)
	writeFile(tb, r.at(h, "/etc/repool/sidecar-default.key"), []byte(c.apiKey+"\n"), "repool-sidecar", "repool-sidecar", 0o600)
	edit(tb, r.at(h, "/etc/repool/sidecar.yaml"), "endpoint: 10.0.0.100:", "endpoint: "+vipAddr+":",
		"/etc/repool/", r.at(h, "/etc/repool")+"/",
		"listen: 127.0.0.1:7070\n", fmt.Sprintf("listen: %s:%d\nallow_remote: true\n", h.addr, sidecarPort))
	p := r.start(h, r.sidecarUnit, "sidecar")
	testenv.Eventually(tb, 15*time.Second, "the sidecar to answer /healthz", func() bool {
		resp, err := probe.Get(sidecarURL("/healthz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// rollingUpgrade is Day-2's configuration change and rolling upgrade, as
// docs/ha.md says, under the sidecar's load: scripts/install again on each
// server host (the build of this checkout: the procedure, not a change of
// version, is what is tested here; TestRollingUpgrade upgrades between
// two builds), the configuration changed (log_level), then the standbys
// restarted one by one (each NOLB on both LB hosts again before the
// next), a switchover to an upgraded standby, and the last server. Each
// step is checked as the runbook says: --version of both installed
// binaries, and "server status" (each server's version and configuration
// digest: a server's digest changes when it restarts on the changed file,
// and only then). Here the three digests differ from one another from the
// start: file paths count in the digest, and each emulated host's files
// are under its own root. It prints rolling_upgrade_failed_calls (target
// 0) and the switchover's gap.
func (r *runbook) rollingUpgrade(t *testing.T, b *backend) {
	c := r.c
	metrics := r.serverCommand(hostS1, "admin-token", "--role", "metrics", "--ttl", "1h")
	tok, err := metrics.Output()
	if err != nil {
		t.Fatalf("repool-server admin-token --role metrics = %v", err)
	}
	statusOf := func() status.Cluster {
		t.Helper()
		tls := func(name string) string { return filepath.Join(r.tlsDir, name) }
		out := c.output([]string{"REPOOL_TOKEN=" + strings.TrimSpace(string(tok))}, "ip", "netns", "exec", hostLB1.ns(),
			r.at(hostLB1, "/usr/local/bin/repool-server"), "status", "--inventory", r.at(hostLB1, "/root/inventory.yaml"),
			"--cert-file", tls("prometheus.crt"), "--key-file", tls("prometheus.key"), "--json")
		var st status.Cluster
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("server status --json: %v\n%s", err, out)
		}
		return st
	}
	// digests returns each server's configuration digest and build, and
	// fails unless every server answered.
	digests := func(st status.Cluster) (cfg, build map[string]string) {
		t.Helper()
		cfg, build = map[string]string{}, map[string]string{}
		for _, e := range st.Servers {
			if e.Status == nil {
				t.Fatalf("server status: %s did not answer: %s", e.Name, e.Error)
			}
			cfg[e.Name], build[e.Name] = e.Status.ConfigHash, e.Status.Build.Short()
		}
		return cfg, build
	}
	before, _ := digests(statusOf())

	// Install the new build on every server host first (the build runs
	// there, as scripts/install does; the running servers keep the binary
	// they started with), and change the configuration.
	for _, h := range []host{hostS1, hostS2, hostS3} {
		c.run(c.root, []string{"DESTDIR=" + r.roots[h.name]}, "scripts/install")
		for _, bin := range []string{"repool-server", "repool-sidecar"} {
			if out := c.output(nil, r.at(h, "/usr/local/bin/"+bin), "--version"); !strings.Contains(out, "repool") {
				t.Fatalf("%s --version on %s = %q", bin, h.name, out)
			}
		}
		edit(t, r.at(h, "/etc/repool/server.yaml"), "log_level: info", "log_level: warn")
	}

	endLoad := startLoad(t, b)
	time.Sleep(2 * time.Second) // steady load before the first restart
	tStart := time.Now()
	restart := func(s *server) {
		t.Helper()
		t.Logf("%s restarting %s on its new build and configuration", time.Now().Format("15:04:05.000"), s.host.name)
		c.restartStandby(t, s)
		time.Sleep(time.Second) // load on the cluster between two steps, as an operator's checks take
	}
	leader := c.waitActive(5*time.Second, nil)
	var standbys []*server
	for _, name := range []string{"s1", "s2", "s3"} {
		if s := c.servers[name]; s != leader {
			standbys = append(standbys, s)
		}
	}
	restart(standbys[0])
	half, _ := digests(statusOf())
	for name, d := range half {
		if changed := d != before[name]; changed != (name == standbys[0].host.name) {
			t.Errorf("configuration digests after %s's restart = %v (before %v): want only its digest changed", standbys[0].host.name, half, before)
			break
		}
	}
	restart(standbys[1])

	// The switchover to an upgraded standby, chosen.
	tSw := time.Now()
	out, err := r.switchover(standbys[0].host.name)
	if err != nil {
		t.Fatalf("repool-server switchover --to %s = %v\n%s", standbys[0].host.name, err, out)
	}
	t.Logf("switchover --to %s (%v): %s", standbys[0].host.name, time.Since(tSw).Round(time.Millisecond), strings.TrimSpace(string(out)))
	if a := c.waitActive(5*time.Second, leader); a.host.name != standbys[0].host.name { // restarted: a new *server
		t.Fatalf("active server after the switchover = %s, want %s", a.host.name, standbys[0].host.name)
	}
	testenv.Eventually(t, 5*time.Second, leader.host.name+" to stand by after handing over", func() bool {
		return leader.readyActive() == http.StatusNotFound
	})
	time.Sleep(time.Second) // load on the upgraded leader before the last server's step
	restart(c.servers[leader.host.name])
	tEnd := time.Now()
	endLoad()

	after, builds := digests(statusOf())
	for name, d := range after {
		if d == before[name] {
			t.Errorf("configuration digest of %s after the change = %s, as before: the change does not show", name, d)
		}
	}
	if builds["s1"] != builds["s2"] || builds["s2"] != builds["s3"] {
		t.Errorf("builds after the upgrade = %v, want one", builds)
	}
	calls, leases := b.snapshot()
	failed := count(calls, func(cl call) bool { return cl.outcome == failed && cl.end.After(tStart) && cl.start.Before(tEnd) })
	for _, v := range capacityViolations(leases) {
		t.Errorf("capacity violation: %v", v)
	}
	for _, id := range c.lostRegistrations(t, b.registeredIDs()) {
		t.Errorf("registration of %s was acknowledged but the resource is gone", id)
	}
	gap, _ := longestGap(calls, tSw, tEnd)
	fmt.Printf("measure: rolling_upgrade_failed_calls=%d\n", failed)
	fmt.Printf("measure: rolling_upgrade_switchover_gap_s=%.3f\n", gap.Seconds())
	t.Logf("configuration change and rolling restart of three servers under load: %v, %d calls, %d failed; builds %v",
		tEnd.Sub(tStart).Round(time.Millisecond), count(calls, func(cl call) bool { return cl.end.After(tStart) && cl.start.Before(tEnd) }), failed, builds)
}
