package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
)

// Names and addresses of the topology. Everything the test creates in the
// kernel carries Prefix, so that a crashed run's leftovers can be found and
// removed: namespaces rpe2e-<host>, the root namespace's veth rpe2e0, run
// directories $TMPDIR/rpe2e-run-*, the cgroup rpe2e-throttle.
const (
	Prefix   = "rpe2e-"
	rootLink = "rpe2e0"          // the test's own veth, in the root namespace
	switchNS = Prefix + "switch" // holds the bridge
	bridge   = "br0"
	subnet   = "10.231.0.0/24"
	rootAddr = "10.231.0.1" // the test process, on rootLink
	vipAddr  = "10.231.0.100"
	hostDev  = "eth0" // every host's interface (its end of the veth)
)

// host is one network namespace on the bridge. Its veth is hostDev inside
// the namespace and port on the switch side.
type host struct {
	name string // short name: db, s1, lb1, ...
	addr string // IPv4 on hostDev, in subnet
}

func (h host) ns() string   { return Prefix + h.name }
func (h host) port() string { return h.name } // its veth end in switchNS

// hosts of the topology, in creation order.
var (
	hostDB     = host{"db", "10.231.0.10"}
	hostLB1    = host{"lb1", "10.231.0.11"}
	hostLB2    = host{"lb2", "10.231.0.12"}
	hostS1     = host{"s1", "10.231.0.21"}
	hostS2     = host{"s2", "10.231.0.22"}
	hostS3     = host{"s3", "10.231.0.23"}
	hostS4     = host{"s4", "10.231.0.24"} // TestGroups' fourth server
	hostClient = host{"client", "10.231.0.30"}
	hostMon    = host{"mon", "10.231.0.40"} // TestAlerts' Prometheus
	// TestDatabaseFailover's database nodes (etcd, Patroni, PostgreSQL).
	hostPG1  = host{"pg1", "10.231.0.31"}
	hostPG2  = host{"pg2", "10.231.0.32"}
	hostPG3  = host{"pg3", "10.231.0.33"}
	allHosts = []host{hostDB, hostLB1, hostLB2, hostS1, hostS2, hostS3, hostS4, hostClient, hostMon, hostPG1, hostPG2, hostPG3}
)

// ip runs the ip command and returns its output; a failure fails tb.
func ip(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := ipErr(args...)
	if err != nil {
		tb.Fatalf("ip %s = got error %v, want nil", strings.Join(args, " "), err)
	}
	return out
}

// ipErr runs the ip command with a 10 s bound.
func ipErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// lockRun takes the machine-wide lock of this test: two runs at once (say
// go test ./... in two checkouts) would share the namespace names. It waits
// up to 5 minutes for a previous run. The lock file's descriptor is
// returned; closing it (or the process ending) releases the lock.
func lockRun(tb testing.TB) *os.File {
	tb.Helper()
	path := filepath.Join(os.TempDir(), Prefix+"lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		tb.Fatalf("open lock file: %v", err)
	}
	testenv.Eventually(tb, 5*time.Minute, "the lock "+path+" (another e2e run holds it)", func() bool {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil && err != syscall.EWOULDBLOCK {
			f.Close()
			tb.Fatalf("flock %s = got error %v, want the lock", path, err)
		}
		return err == nil
	})
	return f
}

// removeLeftovers removes what a previous run that crashed left behind:
// every process in a namespace named Prefix*, those namespaces, the root
// veth and old run directories. Only call it holding the lock.
func removeLeftovers(tb testing.TB) {
	tb.Helper()
	out, err := ipErr("netns", "list")
	if err != nil {
		tb.Fatalf("ip netns list = got error %v, want nil (are iproute2 and network namespaces available? run scripts/test as root)", err)
	}
	var stale []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], Prefix) {
			stale = append(stale, f[0])
		}
	}
	for _, ns := range stale {
		killNamespace(ns)
	}
	for _, ns := range stale {
		if _, err := ipErr("netns", "del", ns); err != nil {
			tb.Logf("removing leftover namespace %s: %v", ns, err)
		}
	}
	if len(stale) > 0 {
		tb.Logf("removed leftover namespaces of a previous run: %v", stale)
	}
	if _, err := ipErr("link", "show", rootLink); err == nil {
		ip(tb, "link", "del", rootLink)
		tb.Logf("removed leftover link %s", rootLink)
	}
	if err := removeThrottle(); err != nil {
		tb.Logf("%v", err)
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), Prefix+"run-*"))
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

// killNamespace SIGKILLs every process in network namespace ns (all of
// them were started by this test, in this run or a crashed one) and waits
// briefly for them to go.
func killNamespace(ns string) {
	for range 50 {
		out, err := ipErr("netns", "pids", ns)
		if err != nil || strings.TrimSpace(out) == "" {
			return
		}
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(50 * time.Millisecond) // killed processes exit in their own time
	}
}

// checkSubnetFree fails tb if the root namespace already routes or owns
// an address of subnet: the test must not touch a real network.
func checkSubnetFree(tb testing.TB) {
	tb.Helper()
	p := netip.MustParsePrefix(subnet)
	for _, probe := range []string{rootAddr, vipAddr} {
		out := ip(tb, "-4", "-o", "route", "show", "match", probe)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" || strings.HasPrefix(line, "default ") {
				continue
			}
			tb.Fatalf("the root namespace already has a route to %s (%q): the e2e test needs %s for itself", probe, line, p)
		}
	}
}

// network builds the topology: switchNS with a bridge, one namespace per
// host with a veth to the bridge, and rootLink from the test's own
// namespace to the bridge. No default route is added anywhere. Cleanup
// kills every process left in the namespaces and removes them.
func network(tb testing.TB) {
	tb.Helper()
	checkSubnetFree(tb)
	tb.Cleanup(func() { teardownNetwork(tb) })

	ip(tb, "netns", "add", switchNS)
	ip(tb, "-n", switchNS, "link", "set", "lo", "up")
	ip(tb, "-n", switchNS, "link", "add", bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0")
	ip(tb, "-n", switchNS, "link", "set", bridge, "up")
	for _, h := range allHosts {
		ip(tb, "netns", "add", h.ns())
		ip(tb, "-n", h.ns(), "link", "set", "lo", "up")
		ip(tb, "-n", switchNS, "link", "add", h.port(), "type", "veth", "peer", "name", hostDev, "netns", h.ns())
		ip(tb, "-n", switchNS, "link", "set", h.port(), "master", bridge, "up")
		ip(tb, "-n", h.ns(), "addr", "add", h.addr+"/24", "dev", hostDev)
		ip(tb, "-n", h.ns(), "link", "set", hostDev, "up")
	}
	ip(tb, "link", "add", rootLink, "type", "veth", "peer", "name", "root", "netns", switchNS)
	ip(tb, "-n", switchNS, "link", "set", "root", "master", bridge, "up")
	ip(tb, "addr", "add", rootAddr+"/24", "dev", rootLink)
	ip(tb, "link", "set", rootLink, "up")
}

// teardownNetwork kills what is left in the namespaces and removes them
// and the root veth.
func teardownNetwork(tb testing.TB) {
	for _, h := range allHosts {
		killNamespace(h.ns())
	}
	killNamespace(switchNS)
	for _, ns := range append([]string{switchNS}, nsNames()...) {
		if _, err := ipErr("netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
			tb.Errorf("ip netns del %s: %v", ns, err)
		}
	}
	// Deleting the switch's namespace removes the veth pair, and the
	// kernel does it asynchronously: the root end may vanish between the
	// show and the del. Gone is what we want.
	if _, err := ipErr("link", "show", rootLink); err == nil {
		if _, err := ipErr("link", "del", rootLink); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
			tb.Errorf("ip link del %s: %v", rootLink, err)
		}
	}
}

func nsNames() []string {
	var out []string
	for _, h := range allHosts {
		out = append(out, h.ns())
	}
	return out
}

// watchdog starts a detached shell that, once this test process is gone
// without cleaning up (a panic in a goroutine, a -timeout kill), kills the
// processes in the test's namespaces and removes the namespaces, the root
// veth and dir. It inherits the run lock, so no new run starts before it
// is done. The returned function stops it without cleaning up.
func watchdog(tb testing.TB, lock *os.File, dir string) func() {
	tb.Helper()
	script := `while kill -0 "$1" 2>/dev/null; do sleep 0.2; done
for i in 1 2 3; do
  for ns in $(ip netns list | awk '{print $1}' | grep '^` + Prefix + `'); do
    for p in $(ip netns pids "$ns"); do kill -9 "$p" 2>/dev/null; done
  done
  sleep 0.2
done
for ns in $(ip netns list | awk '{print $1}' | grep '^` + Prefix + `'); do ip netns del "$ns"; done
ip link del ` + rootLink + ` 2>/dev/null
rm -rf "$2"
`
	cmd := exec.Command("/bin/sh", "-c", script, Prefix+"watchdog", strconv.Itoa(os.Getpid()), dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.ExtraFiles = []*os.File{lock}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start watchdog: %v", err)
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// vipHolders returns the LB hosts whose hostDev carries the VIP.
func vipHolders(lbs ...host) []string {
	var held []string
	for _, h := range lbs {
		out, err := ipErr("-n", h.ns(), "-4", "-o", "addr", "show", "dev", hostDev)
		if err == nil && strings.Contains(out, " "+vipAddr+"/") {
			held = append(held, h.name)
		}
	}
	return held
}
