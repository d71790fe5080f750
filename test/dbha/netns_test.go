package dbha

import (
	"bytes"
	"context"
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

// Every database node is a host of its own: a network namespace whose
// eth0 is one end of a veth pair, the other end on a bridge in the test's
// (root) namespace, which holds rootAddr. HAProxy, the servers and the
// load stay in the root namespace, as the LB hosts and servers of the
// runbook are other hosts than the database's; cutting a node's network
// is `ip link set eth0 down` in its namespace. Everything the test makes
// in the kernel carries nsPrefix, so that a crashed run's leftovers can
// be found and removed.
const (
	nsPrefix   = "rpdbha-"
	nsBridge   = "rpdbha0"    // the bridge, in the root namespace
	nsSubnet   = "10.232.0"   // /24
	rootAddr   = "10.232.0.1" // the root namespace on the bridge: HAProxy's source
	nodeDev    = "eth0"       // each node's interface, in its namespace
	cmdTimeout = 10 * time.Second
)

// ipCmd runs ip with args and a bound; a failure fails tb.
func ipCmd(tb testing.TB, args ...string) {
	tb.Helper()
	if out, err := ipErr(args...); err != nil {
		tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func ipErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	return string(bytes.TrimSpace(out)), err
}

// lockNetwork takes the machine-wide lock of the namespaces (two runs at
// once would share their names), waiting up to 5 minutes, and removes a
// crashed run's leftovers. The lock is released when the test ends.
func lockNetwork(t *testing.T) {
	t.Helper()
	path := filepath.Join(os.TempDir(), nsPrefix+"lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	testenv.Eventually(t, 5*time.Minute, "the lock "+path+" (another run of the database tier holds it)", func() bool {
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
	})
	removeNetwork(t)
}

// nodeNS is the namespace of node name.
func nodeNS(name string) string { return nsPrefix + name }

// buildNetwork makes the bridge with rootAddr and one namespace per node
// name with addr on its eth0; the test's cleanup kills what runs in them
// and removes them.
func buildNetwork(t *testing.T, names, addrs []string) {
	t.Helper()
	if out, _ := ipErr("-4", "-o", "route", "show", "match", rootAddr); strings.Contains(out, "dev") && !strings.Contains(out, nsBridge) && !strings.HasPrefix(out, "default") {
		t.Fatalf("the root namespace already routes %s (%q): the test needs %s.0/24 for itself", rootAddr, out, nsSubnet)
	}
	t.Cleanup(func() { removeNetwork(t) })
	ipCmd(t, "link", "add", nsBridge, "type", "bridge", "stp_state", "0", "forward_delay", "0")
	ipCmd(t, "addr", "add", rootAddr+"/24", "dev", nsBridge)
	ipCmd(t, "link", "set", nsBridge, "up")
	for i, name := range names {
		ns := nodeNS(name)
		ipCmd(t, "netns", "add", ns)
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
		ipCmd(t, "link", "add", ns, "type", "veth", "peer", "name", nodeDev, "netns", ns)
		ipCmd(t, "link", "set", ns, "master", nsBridge, "up")
		ipCmd(t, "-n", ns, "addr", "add", addrs[i]+"/24", "dev", nodeDev)
		ipCmd(t, "-n", ns, "link", "set", nodeDev, "up")
	}
}

// removeNetwork kills every process in a namespace named nsPrefix* (all
// started by this test, in this run or a crashed one), removes those
// namespaces and the bridge.
func removeNetwork(tb testing.TB) {
	out, err := ipErr("netns", "list")
	if err != nil {
		tb.Fatalf("ip netns list: %v (%s): run scripts/test as root, it installs iproute2", err, out)
	}
	var ours []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], nsPrefix) {
			ours = append(ours, f[0])
		}
	}
	for _, ns := range ours {
		for range 50 {
			pids, err := ipErr("netns", "pids", ns)
			if err != nil || pids == "" {
				break
			}
			for _, f := range strings.Fields(pids) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(50 * time.Millisecond) // killed processes exit in their own time
		}
		if out, err := ipErr("netns", "del", ns); err != nil {
			tb.Logf("ip netns del %s: %v: %s", ns, err, out)
		}
	}
	// The root end of each node's veth (named as its namespace) goes with
	// the namespace, but the kernel removes it asynchronously: remove it
	// and wait until it is gone, so that a new run can make it again.
	links, _ := ipErr("-o", "link", "show")
	for _, line := range strings.Split(links, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, nsPrefix) || name == nsBridge {
			ipErr("link", "del", name)
		}
	}
	testenv.Eventually(tb, 10*time.Second, "the test's links removed", func() bool {
		out, _ := ipErr("-o", "link", "show")
		return !strings.Contains(out, nsPrefix) && !strings.Contains(out, nsBridge+":")
	})
}
