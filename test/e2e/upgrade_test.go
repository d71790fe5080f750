package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
)

// TestRollingUpgrade follows docs/ha.md's rolling upgrade, step by step,
// under the sidecar's load through the VIP: the cluster runs a build of
// the server told apart from the one it is upgraded to by its VCS stamp
// (built with -buildvcs=false, "devel (unknown)"); each standby is stopped
// (SIGTERM, as systemctl stop) and started on the new build, and must be
// NOLB on both LB hosts again before the next step; then `server
// switchover --to` hands leadership to an upgraded standby; then the last
// server is upgraded. Each server's build is read from its
// repool_build_info metric after its step, and the two binaries'
// --version differ. It prints rolling_upgrade_failed_calls (target 0) and
// the switchover's gap.
func TestRollingUpgrade(t *testing.T) {
	c := claimRun(t)
	c.build()
	network(t)
	if useTLS() {
		c.setupTLS()
	}
	// The new build as scripts/install makes it (the commit stamped), the
	// old one without the stamp.
	oldBin, newBin := filepath.Join(c.dir, "bin", "server-old"), filepath.Join(c.dir, "bin", "server-new")
	for bin, vcs := range map[string]string{oldBin: "-buildvcs=false", newBin: "-buildvcs=auto"} {
		cmd := exec.Command("go", "build", vcs, "-o", bin, "./cmd/server")
		cmd.Dir = c.root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s ./cmd/server = %v\n%s", vcs, err, out)
		}
	}
	oldVersion, newVersion := version(t, oldBin), version(t, newBin)
	if oldVersion == newVersion {
		t.Fatalf("--version of the old and the new build = %q both, want them told apart (the new one carries the commit: run from a git checkout)", oldVersion)
	}
	t.Logf("upgrading from %q to %q", oldVersion, newVersion)

	c.serverBin = oldBin
	c.postgres()
	s1 := c.startFirst()
	c.startStandbys(hostS2, hostS3)
	b := c.frontEndAndClient("s1")
	oldRev := c.buildRevision(t, s1)

	endLoad := startLoad(t, b)
	time.Sleep(3 * time.Second) // a window of steady load before the upgrade

	c.serverBin = newBin
	tStart := time.Now()
	upgrade := func(s *server) {
		t.Helper()
		t.Logf("%s upgrading %s", time.Now().Format("15:04:05.000"), s.host.name)
		c.restartStandby(t, s)
		if rev := c.buildRevision(t, c.servers[s.host.name]); rev == oldRev {
			t.Errorf("%s after its upgrade runs revision %q, the old build's", s.host.name, rev)
		}
		time.Sleep(time.Second) // load on the cluster between two steps, as an operator's checks take
	}
	upgrade(c.servers["s2"])
	upgrade(c.servers["s3"])

	from := c.waitActive(5*time.Second, nil)
	tSw := time.Now()
	out, err := exec.Command(newBin, "switchover", "--to", "s2", "--store", c.dsn, "--timeout", "20s").CombinedOutput()
	if err != nil {
		t.Fatalf("server switchover --to s2 = %v\n%s", err, out)
	}
	t.Logf("server switchover --to s2 (%v): %s", time.Since(tSw).Round(time.Millisecond), strings.TrimSpace(string(out)))
	if a := c.waitActive(5*time.Second, from); a.host.name != "s2" {
		t.Fatalf("active server after the switchover = %s, want s2", a.host.name)
	}
	testenv.Eventually(t, 5*time.Second, from.host.name+" to stand by after handing over", func() bool {
		return from.readyActive() == http.StatusNotFound
	})
	time.Sleep(time.Second) // load on the upgraded leader before the last server's step
	upgrade(from)
	tEnd := time.Now()
	endLoad()

	calls, leases := b.snapshot()
	failedCalls := count(calls, func(cl call) bool {
		return cl.outcome == failed && cl.end.After(tStart) && cl.start.Before(tEnd)
	})
	for _, v := range capacityViolations(leases) {
		t.Errorf("capacity violation: %v", v)
	}
	for _, id := range c.lostRegistrations(t, b.registeredIDs()) {
		t.Errorf("registration of %s was acknowledged but the resource is gone", id)
	}
	gap, _ := longestGap(calls, tSw, tEnd)
	fmt.Printf("measure: rolling_upgrade_failed_calls=%d\n", failedCalls)
	fmt.Printf("measure: rolling_upgrade_switchover_gap_s=%.3f\n", gap.Seconds())
	t.Logf("rolling upgrade of three servers under load: %v, %d calls, %d failed", tEnd.Sub(tStart).Round(time.Millisecond),
		count(calls, func(cl call) bool { return cl.end.After(tStart) && cl.start.Before(tEnd) }), failedCalls)
}

// restartStandby stops s as systemctl stop does (SIGTERM) and starts it
// again (on whatever build and configuration its host has now); it waits
// until s is a standby again and NOLB on both LB hosts.
func (c *cluster) restartStandby(t *testing.T, s *server) {
	t.Helper()
	if err := s.p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30 s of its SIGTERM", s.host.name)
	}
	c.startStandbys(s.host)
	for _, l := range c.lbs {
		testenv.Eventually(t, 5*time.Second, "HAProxy on "+l.host.name+" to have the restarted "+s.host.name+" NOLB", func() bool {
			return c.serverState(l, s.host.name) == "NOLB"
		})
	}
}

// version is what bin --version prints.
func version(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version = %v\n%s", bin, err, out)
	}
	return strings.TrimSpace(string(out))
}

var revisionRE = regexp.MustCompile(`^repool_build_info\{.*revision="([^"]*)"`)

// buildRevision reads the VCS revision of the build s runs from its
// repool_build_info metric.
func (c *cluster) buildRevision(tb testing.TB, s *server) string {
	tb.Helper()
	resp, err := probe.Get(s.httpURL("/metrics"))
	if err != nil {
		tb.Fatalf("GET %s /metrics = %v", s.host.name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := revisionRE.FindStringSubmatch(sc.Text()); m != nil {
			return m[1]
		}
	}
	tb.Fatalf("no repool_build_info on %s's /metrics", s.host.name)
	return ""
}
