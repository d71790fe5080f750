package dbha

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/test/internal/dbtier"
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

// dbTier is the database tier of a run and the HAProxy in front.
type dbTier struct {
	*dbtier.Tier
	t       *testing.T
	dir     string
	haproxy *exec.Cmd
	dbPort  int // HAProxy's database frontend on the VIP
}

// startTier starts the database tier (dbtier.Start) in namespaces of its
// own and HAProxy in front of it, rendered from an inventory's database
// section, and waits until HAProxy sends connections to the primary only.
func startTier(t *testing.T) *dbTier {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("%s runs Patroni and PostgreSQL as the postgres OS user in network namespaces, and must run as root (euid %d); run scripts/test as root", t.Name(), os.Geteuid())
	}
	if _, err := exec.LookPath(haproxy.DefaultBinary); err != nil {
		t.Fatalf("%s: %v (scripts/test installs haproxy)", haproxy.DefaultBinary, err)
	}
	lockNetwork(t)
	// Not t.TempDir(): the postgres user must reach it.
	dir, err := os.MkdirTemp("", "repool-dbha-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var names []string
	var specs []dbtier.NodeSpec
	for i, a := range nodeAddrs {
		names = append(names, fmt.Sprintf("pg%d", i+1))
		specs = append(specs, dbtier.NodeSpec{Name: names[i], Addr: a, NS: nodeNS(names[i])})
	}
	buildNetwork(t, names, nodeAddrs)
	d := &dbTier{t: t, dir: dir}
	t.Cleanup(func() {
		d.stop()
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			d.dumpLogs()
			t.Logf("run directory kept: %s", dir)
		}
	})
	// HAProxy's connections for the servers come from rootAddr, the root
	// namespace's address on the bridge.
	d.Tier = dbtier.Start(t, dbtier.Config{Root: "../..", Dir: dir, Nodes: specs, LBAddrs: [2]string{rootAddr, rootAddr}, VIP: vipAddr})
	d.startHAProxy()
	return d
}

// DSN is the servers' --store through HAProxy's database frontend.
func (d *dbTier) DSN() string { return d.Tier.DSN(vipAddr, d.dbPort) }

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

// startHAProxy renders haproxy.cfg with `server haproxy render`'s code from
// an inventory with the repool servers and the database section, and
// starts HAProxy (as root; it drops to its user as configured).
func (d *dbTier) startHAProxy() {
	t := d.t
	grpcPort, control := freePortOn(t, vipAddr), freePortOn(t, vipAddr)
	d.dbPort = freePortOn(t, vipAddr)
	monitor := freePortOn(t, "127.0.0.11")
	var b strings.Builder
	fmt.Fprintf(&b, "vip: {address: %s/8, interface: lo, router_id: 51, grpc_port: %d, control_port: %d}\n", vipAddr, grpcPort, control)
	fmt.Fprintf(&b, "lb_hosts:\n  - {name: lb1, address: 127.0.0.11, priority: 250, state: BACKUP, stats_socket: %s, monitor_port: %d}\n", filepath.Join(d.dir, "haproxy.sock"), monitor)
	b.WriteString("  - {name: lb2, address: 127.0.0.12, priority: 200, state: BACKUP}\n")
	b.WriteString("servers:\n")
	for i, a := range serverAddrs {
		fmt.Fprintf(&b, "  - {name: s%d, address: %s, grpc_port: %d, http_port: %d}\n", i+1, a, freePortOn(t, a), freePortOn(t, a))
	}
	// The inventory's defaults except a maxconn whose file descriptors
	// any test machine allows.
	b.WriteString("haproxy: {maxconn: 1000}\n")
	fmt.Fprintf(&b, "database:\n  port: %d\n  nodes:\n", d.dbPort)
	for _, n := range d.Nodes {
		fmt.Fprintf(&b, "    - {name: %s, address: %s, port: %d, rest_port: %d}\n", n.Name, n.Addr, dbtier.PGPort, dbtier.RESTPort)
	}
	inv, err := inventory.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("inventory:\n%s\n%v", b.String(), err)
	}
	cfg, err := haproxy.Render(context.Background(), inv, haproxy.Options{Host: "lb1", PIDFile: filepath.Join(d.dir, "haproxy.pid")})
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(d.dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(d.dir, "haproxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(haproxy.DefaultBinary, "-db", "-f", cfgPath)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.haproxy = cmd
	go cmd.Wait()
	// HAProxy takes every server for UP when it starts, until its checks
	// say otherwise (fall checks): wait until only the primary is.
	p := d.Primary()
	testenv.Eventually(t, 10*time.Second, "HAProxy to send database connections to the primary only", func() bool {
		up := d.dbUp()
		return len(up) == 1 && p != nil && up[0] == p.Name
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

// stop ends HAProxy and the tier.
func (d *dbTier) stop() {
	if d.haproxy != nil && d.haproxy.Process != nil {
		syscall.Kill(-d.haproxy.Process.Pid, syscall.SIGKILL)
	}
	if d.Tier != nil {
		d.Tier.Stop()
	}
}

// dumpLogs logs the tail of every process's log, for a failed run.
func (d *dbTier) dumpLogs() {
	files, _ := filepath.Glob(filepath.Join(d.dir, "*.log"))
	for _, f := range files {
		d.t.Logf("==== %s (tail)\n%s", filepath.Base(f), dbtier.LogTail(f, 6000))
	}
}
