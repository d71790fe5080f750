// Package status_test runs `server status` against a real deployment on
// loopback: two HA servers on one PostgreSQL (processes of the server
// command), the real HAProxy rendered from their inventory for LB host
// lb1, the node exporter serving the Keepalived state file that
// keepalived/notify.sh writes, and checks what the command prints before
// and after the active server is killed.
package status_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/lb/haproxy/haproxytest"
	"github.com/repool/repool/internal/servercmd"
	"github.com/repool/repool/internal/status"
	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.RunAsCommand(servercmd.Prog, func() {
		os.Exit(cli.Main(servercmd.Prog, os.Stderr, func(ctx context.Context) error {
			return servercmd.Run(ctx, os.Args[1:], servercmd.Env{Getenv: os.Getenv, Stdout: os.Stdout, Stderr: os.Stderr})
		}))
	})
	testenv.Main(m)
}

// settle bounds how long the deployment takes to show a change: HAProxy
// checks every 100 ms, a standby takes a freed lock at once and restores
// an empty store in milliseconds; the rest is a loaded machine.
const settle = 30 * time.Second

// proc is a server process.
type proc struct {
	cmd  *exec.Cmd
	out  *testenv.Output
	done chan struct{}
}

func startServer(t *testing.T, name, dsn string, grpcPort, httpPort int) *proc {
	t.Helper()
	p := &proc{out: &testenv.Output{}, done: make(chan struct{})}
	p.cmd = testenv.Command("run", "--ha", "--ha-name", name, "--store", dsn,
		"--grpc-addr", "127.0.0.1:"+strconv.Itoa(grpcPort), "--http-addr", "127.0.0.1:"+strconv.Itoa(httpPort))
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting server %s = got error %v, want nil", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second): // another process's shutdown: real time
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("server %s's output:\n%s", name, p.out.String())
		}
	})
	return p
}

// run runs the server command (this test binary) and returns its stdout;
// a status other than 0 fails t.
func run(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := testenv.RunCommand(t, args...)
	if code != 0 {
		t.Fatalf("server %s = got exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// nodeExporter runs Debian's prometheus-node-exporter on addr with only
// its textfile collector, reading dir.
func nodeExporter(t *testing.T, addr, dir string) {
	t.Helper()
	cmd := exec.Command("prometheus-node-exporter", "--web.listen-address="+addr,
		"--collector.disable-defaults", "--collector.textfile", "--collector.textfile.directory="+dir)
	out := &testenv.Output{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus-node-exporter = got error %v, want nil (apt-get install prometheus-node-exporter)", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("node exporter's output:\n%s", out.String())
		}
	})
	testenv.Eventually(t, settle, "the node exporter on "+addr+" to answer", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// TestStatusShowsFailover: `server status` shows repool1 active (UP in
// lb1's HAProxy, the lock held, an epoch and a checkpoint) and repool2 a
// standby waiting on the lock (NOLB), lb1 holding the VIP; once repool1 is
// killed (SIGKILL), repool2 is the leader under a higher epoch, UP, and
// repool1 is DOWN and without status.
func TestStatusShowsFailover(t *testing.T) {
	dsn := testenv.Postgres(t)
	dir := t.TempDir()
	s1 := &haproxytest.Server{Name: "repool1", GRPCPort: testenv.FreePort(t), HTTPPort: testenv.FreePort(t)}
	s2 := &haproxytest.Server{Name: "repool2", GRPCPort: testenv.FreePort(t), HTTPPort: testenv.FreePort(t)}
	inv := haproxytest.LoopbackInventory(t, dir, s1, s2)

	p1 := startServer(t, "repool1", dsn, s1.GRPCPort, s1.HTTPPort)
	tokenFile := filepath.Join(dir, "metrics.token")
	testenv.Eventually(t, settle, "repool1 to make the store (admin-token finds its signing key)", func() bool {
		code, out, _ := testenv.RunCommand(t, "admin-token", "--role", "metrics", "--store", dsn)
		return code == 0 && os.WriteFile(tokenFile, []byte(out), 0o600) == nil
	})
	// repool1 leads before repool2 starts: both campaign for the lock at
	// start, and on a busy machine the later one can win it.
	testenv.Eventually(t, settle, "repool1 to lead (200 on /readyz/active)", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz/active", s1.HTTPPort))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	startServer(t, "repool2", dsn, s2.GRPCPort, s2.HTTPPort)
	haproxytest.Start(t, inv, dir)

	// Keepalived's state on lb1, as keepalived/notify.sh writes it at a
	// transition, served by the node exporter on lb1's address.
	textfiles := filepath.Join(dir, "textfile")
	notify, err := filepath.Abs("../../keepalived/notify.sh")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(notify, filepath.Join(dir, "notify.log"), filepath.Join(textfiles, "keepalived-repool-lb1.prom"),
		"INSTANCE", "repool", "MASTER", "150").CombinedOutput(); err != nil {
		t.Fatalf("notify.sh = got error %v, want nil\n%s", err, out)
	}
	nodePort := testenv.FreePort(t)
	lb1, _ := inv.Host("lb1")
	nodeExporter(t, net.JoinHostPort(lb1.Address, strconv.Itoa(nodePort)), textfiles)

	invFile := filepath.Join(dir, "inventory.yaml")
	raw, err := yaml.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(invFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"status", "--inventory", invFile, "--token-file", tokenFile, "--node-exporter-port", strconv.Itoa(nodePort), "--timeout", "2s"}
	gather := func() status.Cluster {
		var c status.Cluster
		out := run(t, append(args, "--json")...)
		if err := json.Unmarshal([]byte(out), &c); err != nil {
			t.Fatalf("server status --json = got %v\n%s", err, out)
		}
		return c
	}
	var c status.Cluster
	testenv.Eventually(t, settle, "repool1 active and UP, repool2 a standby waiting on the lock and NOLB", func() bool {
		c = gather()
		g, sv := c.Groups[0], c.Servers
		return g.Leader == "repool1" && len(g.Standbys) == 1 && g.Standbys[0].Name == "repool2" && g.Standbys[0].Waiting &&
			seen(c, "lb1", "repool1") == "UP" && seen(c, "lb1", "repool2") == "NOLB" &&
			sv[0].Status.LastCheckpoint != nil
	})
	first := c.Groups[0].Epoch
	switch lb := c.LBHosts[0]; {
	case !lb.HAProxyUp || lb.VRRPState != "MASTER" || !lb.HoldsVIP:
		t.Errorf("lb1 = got %+v, want HAProxy up, MASTER, holding the VIP", lb)
	case c.LBHosts[1].HAProxyUp || c.LBHosts[1].HAProxyError == "":
		t.Errorf("lb2 (nothing runs there) = got %+v, want HAProxy down and why", c.LBHosts[1])
	case c.Database == nil || c.Database.Kind != "postgres" || !c.Database.Writable || c.Database.Address == "":
		t.Errorf("database = got %+v, want a writable postgres", c.Database)
	case c.Servers[0].Status.ConfigHash != c.Servers[1].Status.ConfigHash:
		t.Errorf("configuration hashes = got %s and %s, want equal (same flags but name and addresses)", c.Servers[0].Status.ConfigHash, c.Servers[1].Status.ConfigHash)
	}
	table := tableHolds(t, args, "server status",
		`lb1 +127\.0\.0\.2 +MASTER +held +up`,
		`repool1 +default +active +`+strconv.FormatUint(uint64(first), 10)+` +\S+ +held +UP L7OK/200 `,
		`repool2 +default +standby +- +- +waiting +NOLB L7OKC/404 `,
		`repool2 \(waiting on the lock\)`,
	)
	t.Logf("server status:\n%s", table)

	p1.cmd.Process.Kill()
	<-p1.done
	testenv.Eventually(t, settle, "repool2 active under a higher epoch and UP, repool1 DOWN", func() bool {
		c = gather()
		g := c.Groups[0]
		return g.Leader == "repool2" && g.Epoch > first && len(g.Standbys) == 0 && len(g.Down) == 1 &&
			seen(c, "lb1", "repool2") == "UP" && seen(c, "lb1", "repool1") == "DOWN" && c.Servers[0].Error != ""
	})
	table = tableHolds(t, args, "server status after the kill",
		`repool2 +default +active +`+fmt.Sprint(c.Groups[0].Epoch)+` +\S+ +held +UP L7OK/200 `,
		`repool1 +default +\? +- +- +- +DOWN L4CON `,
		`group default: no standby`,
		`server repool1: no status`,
	)
	t.Logf("server status after kill -9 of repool1:\n%s", table)
}

// tableHolds runs `server status` (args) until its table holds every
// pattern in want, and returns it; at the deadline it fails t with the
// last table. Each run reads HAProxy afresh, and HAProxy exports no check
// code while a check is in flight (every 100 ms, longer on a busy
// machine): a table that shows "NOLB L7OKC" without its "/404" is a
// moment's, not a wrong state, so the state the JSON view settled on is
// waited for in the table too.
func tableHolds(t *testing.T, args []string, what string, want ...string) string {
	t.Helper()
	var table, missing string
	defer func() { // runs when Eventually gives up (t.Fatalf)
		if t.Failed() {
			t.Logf("%s = got\n%s\nwant it to hold %q", what, table, missing)
		}
	}()
	testenv.Eventually(t, settle, what+" to show the settled state", func() bool {
		table = run(t, args...)
		for _, w := range want {
			if !regexp.MustCompile(w).MatchString(table) {
				missing = w
				return false
			}
		}
		return true
	})
	return table
}

// seen is the state of server in host's HAProxy ("" if not listed).
func seen(c status.Cluster, host, server string) string {
	for _, h := range c.LBHosts {
		if h.Name == host {
			for _, b := range h.Backends {
				if b.Server == server {
					return b.State
				}
			}
		}
	}
	return ""
}
