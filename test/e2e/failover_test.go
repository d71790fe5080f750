// Package e2e holds repool's end-to-end failover test: the
// real topology in network namespaces — PostgreSQL, three servers in one
// active/standby group, two LB hosts with HAProxy and Keepalived sharing a
// VIP, a client host with the sidecar — under load while parts of it are
// killed, paused and cut off.
//
// The test needs root (network namespaces, veths, a bridge) and the tools
// scripts/test installs; it fails, never skips, without them. It creates
// and removes everything itself: namespaces rpe2e-*, the veth rpe2e0 in
// its own namespace, a run directory rpe2e-run-* in $TMPDIR and a cgroup
// rpe2e-throttle (step a'). Traffic
// stays in 10.231.0.0/24 on that bridge; no default route is added. A run
// that dies without cleaning up is cleaned after by a watchdog process, and
// the next run removes whatever is still left at its start.
package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// initialResources are registered before the load starts; more are
// registered during it.
const initialResources = 40

// Step (a'): for hogFor the active server gets hogQuota of CPU time in
// every hogPeriod.
const (
	hogFor    = 20 * time.Second
	hogQuota  = 1000 * time.Microsecond
	hogPeriod = 10 * time.Millisecond
)

// phase marks the start of a step of the scenario.
type phase struct {
	name string
	at   time.Time
}

// timeline is a scenario's steps, in order.
type timeline struct {
	tb     testing.TB
	phases []phase
}

// mark starts the step name now, and logs it with the sidecar's counters
// so far.
func (tl *timeline) mark(name string) {
	now := time.Now()
	tl.phases = append(tl.phases, phase{name, now})
	tl.tb.Logf("---- %s %s (sidecar so far: %s)", now.Format("15:04:05.000"), name, sidecarCounters())
}

// TestFailover runs a load of acquire → report → release through the
// sidecar and the VIP while it
//
//	(a) kills the active server (kill -9): a standby takes over; the
//	    killed one, started again, is NOLB on both LB hosts within 2 s of
//	    answering as a standby;
//	(a') starves the active server (a tenth of a core) for hogFor: no
//	    server is marked DOWN on either LB host and the leader stays (a
//	    starved server is not a dead one);
//	(a'') SIGTERMs the active server (the planned move of leadership): a
//	    standby takes over, the stopped one rejoins;
//	(a''') switches over (server switchover --to) to the standby last in
//	    the queue for the lock: it takes over, the other waits on, and the
//	    server handing over stands by again;
//	(b) pauses the new active server (SIGSTOP) past its session timeout,
//	    then resumes it: it must step down without writing anything;
//	(c) kills HAProxy on the MASTER LB host: the VIP moves;
//	(d) cuts the MASTER LB host's link: the VIP moves;
//	(e) partitions the MASTER LB host with its link up (its veth off the
//	    bridge): it gives up the VIP before its peer takes it, and once
//	    healed the VIP stays where it is.
//
// It asserts the correctness properties — no resource ever leased beyond
// its capacity, no acknowledged registration lost, no write of a deposed
// leader accepted, every backend call answered within its deadline — and
// prints the measured times as "measure: name=value" lines.
func TestFailover(t *testing.T) {
	began := time.Now()
	c := claimRun(t, "tcpdump")

	c.build()
	t.Logf("built cmd/server and cmd/sidecar in %v", time.Since(began).Round(time.Millisecond))
	network(t)
	if useTLS() {
		c.setupTLS()
	}
	// Every packet on the LB hosts' and the servers' links, from before
	// the first connection to the end.
	cp := c.capture(hostLB1, hostLB2, hostS1, hostS2, hostS3)
	c.postgres()

	s1 := c.startFirst()
	c.installAudit(s1)
	c.startStandbys(hostS2, hostS3)

	b := c.frontEndAndClient("s1")
	t.Logf("cluster up in %v: PostgreSQL on db, s1 active, s2 and s3 standby, VIP %s on lb1, sidecar on client", time.Since(began).Round(time.Millisecond), vipAddr)
	c.failoverScenario(t, b, cp, began)
}

// failoverScenario runs TestFailover's steps (a) to (e) on a cluster that
// is up (one active server, two standbys, the VIP on lb1, the sidecar
// registered b's initial resources), under b's load, then checks the
// correctness properties and prints the measures. TestFailover and
// TestRunbook run it on clusters built their own ways.
func (c *cluster) failoverScenario(t *testing.T, b *backend, cp *capture, began time.Time) {
	lb1, lb2 := c.lbs["lb1"], c.lbs["lb2"]

	// The load, until the scenario ends (or fails: cleanups run last first,
	// so the load stops before the processes do).
	endLoad := startLoad(t, b)

	tl := &timeline{tb: t}
	mark := tl.mark
	mark("warm-up")
	time.Sleep(3 * time.Second) // a window of steady load on the real cluster, its latencies logged
	if calls, _ := b.snapshot(); count(calls, func(c call) bool { return c.op == "acquire" && c.outcome == ok }) == 0 {
		t.Fatalf("no acquire succeeded in the warm-up; calls: %v", calls)
	}

	// (a) kill -9 the active server.
	old := c.waitActive(5*time.Second, nil)
	oldEpoch := c.epoch()
	mark("a: kill -9 the active server " + old.host.name)
	tKill := time.Now()
	old.p.kill9()
	next := c.waitActive(20*time.Second, old)
	t.Logf("%s active %v after the kill (epoch %d -> %d)", next.host.name, time.Since(tKill).Round(time.Millisecond), oldEpoch, c.epoch())
	time.Sleep(3 * time.Second) // load on the new leader alone, in real time, before the dead one rejoins
	// Replace the dead server: it rejoins as a standby.
	c.startStandbys(old.host)
	// HAProxy on both LB hosts brings it back to NOLB by itself (the agent
	// check; docs/ha.md, "Health states"), within the 2 s promised.
	tStandby := time.Now()
	for _, l := range c.lbs {
		func() {
			defer func() {
				if t.Failed() {
					t.Logf("HAProxy on %s:\n%s", l.host.name, c.haproxyStatus(l))
				}
			}()
			testenv.Eventually(t, 2*time.Second, "HAProxy on "+l.host.name+" to have the restarted "+old.host.name+" NOLB", func() bool {
				return c.serverState(l, old.host.name) == "NOLB"
			})
		}()
	}
	standbyNOLB := time.Since(tStandby)
	t.Logf("restarted %s NOLB on both LB hosts %v after it answered 404", old.host.name, standbyNOLB.Round(time.Millisecond))
	time.Sleep(time.Second) // load on the restored three-server cluster before the next step

	// (a') a CPU hog on the active server's host: the server is held to
	// a tenth of one core (throttle: the kernel's CPU bandwidth control,
	// 1 ms of every 10 ms), as busy loops on each core of its host would
	// leave it; a busy loop here would starve every emulated host at once,
	// the database's too. A starved server is not a dead one: neither LB
	// host may mark any server DOWN, and it stays the leader.
	hogged := c.waitActive(5*time.Second, nil)
	downsBefore := c.downEvents()
	hogEpoch := c.epoch()
	mark(fmt.Sprintf("a': %s held to a tenth of a core for %v", hogged.host.name, hogFor))
	tHog := time.Now()
	unthrottle := throttle(t, hogged.p.pid(), hogQuota, hogPeriod)
	time.Sleep(hogFor) // the hog lasts this long in real time: that is the fault
	unthrottle()
	tHogEnd := time.Now()
	var falseDowns []string
	for name, lines := range c.downEvents() {
		for _, l := range lines[len(downsBefore[name]):] {
			falseDowns = append(falseDowns, name+": "+l)
		}
	}
	for _, l := range falseDowns {
		t.Errorf("HAProxy marked a server DOWN under a CPU hog alone: %s", l)
	}
	if a, e := c.waitActive(5*time.Second, nil), c.epoch(); a != hogged || e != hogEpoch {
		t.Errorf("after the CPU hog: active server %s at epoch %d, want %s still at %d (nothing failed)", a.host.name, e, hogged.host.name, hogEpoch)
	}
	time.Sleep(time.Second) // load on the unloaded cluster again, before the next step

	// (a'') SIGTERM of the active server, the runbook's planned move of
	// leadership: a standby takes over, and the stopped one, started
	// again, rejoins as a standby.
	termed := c.waitActive(5*time.Second, nil)
	termEpoch := c.epoch()
	mark("a'': SIGTERM the active server " + termed.host.name)
	tTerm := time.Now()
	if err := termed.p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termSucc := c.waitActive(20*time.Second, termed)
	termTook := time.Since(tTerm)
	t.Logf("%s active %v after the SIGTERM of %s (epoch %d -> %d)", termSucc.host.name, termTook.Round(time.Millisecond), termed.host.name, termEpoch, c.epoch())
	if termTook > slowHandover {
		// Rare (about one run in ten): what each side logged, for the why.
		t.Logf("a slow handover: the log of %s (stopped)\n%s\nthe log of %s (successor)\n%s",
			termed.host.name, tail(termed.p.output()), termSucc.host.name, tail(termSucc.p.output()))
	}
	select {
	case <-termed.p.done:
		if termed.p.err != nil {
			t.Errorf("%s after SIGTERM exited with %v, want 0", termed.host.name, termed.p.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of its SIGTERM", termed.host.name)
	}
	time.Sleep(time.Second) // load on the new leader alone, in real time, before the stopped one rejoins
	c.startStandbys(termed.host)
	time.Sleep(time.Second) // load on the restored three-server cluster before the next step
	tTermEnd := time.Now()

	// (a''') A directed switchover, as docs/ha.md says to run it (server
	// switchover --to), to the standby started last: it waits behind the
	// other one in the database's queue for the lock, so only the request
	// makes it the leader. The server handing over stands by again
	// without a restart.
	swFrom, swTo := c.waitActive(5*time.Second, nil), c.servers[termed.host.name] // termed, started again
	swEpoch := c.epoch()
	mark(fmt.Sprintf("a''': switchover from %s to %s", swFrom.host.name, swTo.host.name))
	tSw := time.Now()
	out, err := c.switchover(swTo.host.name)
	if err != nil {
		t.Fatalf("server switchover --to %s = got error %v, want nil\n%s", swTo.host.name, err, out)
	}
	t.Logf("server switchover --to %s (%v): %s", swTo.host.name, time.Since(tSw).Round(time.Millisecond), strings.TrimSpace(string(out)))
	if a := c.waitActive(5*time.Second, swFrom); a != swTo {
		t.Errorf("active server after a switchover to %s = %s", swTo.host.name, a.host.name)
	}
	testenv.Eventually(t, 5*time.Second, swFrom.host.name+" to stand by (404 on /readyz/active) after handing over", func() bool {
		return swFrom.readyActive() == http.StatusNotFound
	})
	select {
	case <-swFrom.p.done:
		t.Errorf("%s exited after handing over (%v), want it standing by", swFrom.host.name, swFrom.p.err)
	default:
	}
	time.Sleep(time.Second) // load on the new leader, in real time, before the next step
	tSwEnd := time.Now()

	// (b) SIGSTOP the new active server past its session timeout, and
	// queue requests straight to it (not through HAProxy, as a client that
	// cached its address would): it serves them when it resumes, racing
	// its own discovery that it was deposed. The fence must refuse every
	// write it attempts after its successor raised the epoch.
	victim := c.waitActive(5*time.Second, nil)
	fenced0, err := victim.metric("repool_store_fenced_writes_total")
	if err != nil {
		t.Fatalf("metric of %s: %v", victim.host.name, err)
	}
	victimEpoch := c.epoch()
	direct := c.dial(t, victim)
	mark("b: SIGSTOP the active server " + victim.host.name)
	tStop := time.Now()
	if err := victim.p.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	staleDone := direct.queue(b)
	// Keep it stopped for twice its session timeout: its session (and so
	// the leader lock) ends after one.
	var succ *server
	var tSucc time.Time
	explained := false
	for time.Since(tStop) < 2*sessionTimeout {
		if a := c.active(); len(a) == 1 && a[0] != victim && succ == nil {
			succ, tSucc = a[0], time.Now()
		}
		if succ == nil && !explained && time.Since(tStop) > sessionTimeout+1500*time.Millisecond {
			// Why is nobody taking over? Show who waits for what.
			t.Logf("no successor %v after SIGSTOP; database sessions:\n%s", time.Since(tStop).Round(time.Millisecond), c.sessions())
			explained = true
		}
		time.Sleep(20 * time.Millisecond) // polls within a window of real time: the database's session timeout runs on it
	}
	tCont := time.Now()
	if err := victim.p.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if succ == nil {
		succ = c.waitActive(20*time.Second, victim)
		tSucc = time.Now()
		t.Logf("NOTE: no successor took over while %s was stopped; %s became active only %v after SIGCONT", victim.host.name, succ.host.name, tSucc.Sub(tCont).Round(time.Millisecond))
	}
	t.Logf("%s active %v after %s was stopped (epoch %d -> %d)", succ.host.name, tSucc.Sub(tStop).Round(time.Millisecond), victim.host.name, victimEpoch, c.epoch())
	// "Within a few seconds": it notices at its next session check.
	const stepDownBound = 5 * time.Second
	testenv.Eventually(t, stepDownBound, victim.host.name+" to step down (404 on /readyz/active) after SIGCONT", func() bool {
		return victim.readyActive() == http.StatusNotFound
	})
	stepDown := time.Since(tCont)
	// An answer the stopped server gave is legitimate only if its write
	// committed before the successor raised the epoch (then the successor
	// restored it): acknowledged leases and registrations joined the
	// ledger and are checked with the others below.
	t.Logf("requests queued at the stopped %s, by answer: %s", victim.host.name, staleDone())
	time.Sleep(time.Second) // let its stragglers try to write: the deposed process's own timing
	fenced1, err := victim.metric("repool_store_fenced_writes_total")
	if err != nil {
		t.Fatalf("metric of %s: %v", victim.host.name, err)
	}
	if n := c.writesBy(t, victim.host.addr, tSucc); n != 0 {
		t.Errorf("writes of the deposed leader %s accepted after %s took over = %d, want 0", victim.host.name, succ.host.name, n)
	}
	t.Logf("%s stepped down %v after SIGCONT; writes it tried that the fence refused: %v", victim.host.name, stepDown.Round(time.Millisecond), fenced1-fenced0)
	time.Sleep(time.Second) // load on the new leader in real time, between the steps

	// A long step (b) can spend the sidecar's retry budget and open its
	// breaker: the LB steps are measured from a closed breaker.
	testenv.Eventually(t, 30*time.Second, "the sidecar's breaker to close", sidecarBreakerClosed)

	// (c) kill -9 HAProxy on the MASTER LB host.
	master, backup := vipMaster(t, lb1, lb2)
	mark("c: kill -9 HAProxy on the MASTER " + master.host.name)
	t0 := time.Now()
	tHAProxyKill := t0
	master.haproxy.kill9()
	vipMoveHAProxy := waitVIP(t, t0, backup.host)
	t.Logf("%s VIP on %s %v after HAProxy on %s died", time.Now().Format("15:04:05.000"), backup.host.name, vipMoveHAProxy.Round(time.Millisecond), master.host.name)
	time.Sleep(2 * time.Second) // load through the backup LB alone, in real time, before HAProxy returns
	// What the alerts read (deploy/monitoring): keepalived ran notify.sh,
	// which rewrote each host's state file.
	wantKeepalivedState(t, backup, "MASTER")
	wantKeepalivedState(t, master, "FAULT")
	c.startHAProxy(master)
	tBack := time.Now()
	t.Logf("%s HAProxy on %s restarted", tBack.Format("15:04:05.000"), master.host.name)
	// nopreempt: the recovered host, though of higher priority, does not
	// take the VIP back (no second interruption). Its track script needs
	// track_rise (2) checks a second apart, then the VRRP adverts: 5 s is
	// well past the moment a preempting host would have taken it.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if h := vipHolders(hostLB1, hostLB2); len(h) != 1 || h[0] != backup.host.name {
			t.Fatalf("VIP holders %v after HAProxy on %s recovered = want %s only: the VIP moved back (nopreempt)", h, master.host.name, backup.host.name)
		}
		time.Sleep(100 * time.Millisecond) // watching for nothing to happen, in keepalived's real time
	}
	t.Logf("%s VIP still on %s %v after HAProxy on %s restarted (nopreempt)", time.Now().Format("15:04:05.000"), backup.host.name, time.Since(tBack).Round(time.Millisecond), master.host.name)

	// (d) cut the MASTER LB host's link (its veth's switch end).
	master, backup = vipMaster(t, lb1, lb2)
	mark("d: link of the MASTER " + master.host.name + " down")
	t0 = time.Now()
	tLinkCut := t0
	ip(t, "-n", switchNS, "link", "set", master.host.port(), "down")
	vipMoveLink := waitVIP(t, t0, backup.host)
	t.Logf("%s VIP on %s %v after %s's link went down", time.Now().Format("15:04:05.000"), backup.host.name, vipMoveLink.Round(time.Millisecond), master.host.name)
	time.Sleep(3 * time.Second) // load through the backup LB alone, in real time

	// The cut host's link back: it returns as BACKUP (nopreempt).
	mark("d': link of " + master.host.name + " back up")
	ip(t, "-n", switchNS, "link", "set", master.host.port(), "up")
	wantKeepalivedState(t, master, "BACKUP")

	// (e) a partition that leaves the link up: the MASTER's veth taken
	// off the bridge. Until its HAProxy sees neither a server nor its
	// peer (the monitor fails) and Keepalived puts it in FAULT, it keeps
	// the VIP; its peer takes the VIP after three missed adverts.
	master, backup = vipMaster(t, lb1, lb2)
	mark("e: partition of the MASTER " + master.host.name + " (link up)")
	t0 = time.Now()
	ip(t, "-n", switchNS, "link", "set", master.host.port(), "nomaster")
	splitBrain, vipMovePartition := watchPartition(t, t0, master.host, backup.host)
	t.Logf("%s VIP on %s %v after %s was cut off; both held it for %v", time.Now().Format("15:04:05.000"), backup.host.name, vipMovePartition.Round(time.Millisecond), master.host.name, splitBrain.Round(time.Millisecond))
	if splitBrain > 0 {
		t.Errorf("lb1 and lb2 both held the VIP for %v during %s's partition, want never", splitBrain.Round(time.Millisecond), master.host.name)
	}
	wantKeepalivedState(t, master, "FAULT")
	time.Sleep(2 * time.Second) // load through the new MASTER alone, in real time
	mark("e': partition of " + master.host.name + " healed")
	tHeal := time.Now()
	ip(t, "-n", switchNS, "link", "set", master.host.port(), "master", bridge)
	wantKeepalivedState(t, master, "BACKUP")
	// The healed host, of higher priority or not, does not take the VIP
	// back: a second interruption would be a flap.
	flapBack := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if h := vipHolders(hostLB1, hostLB2); len(h) != 1 || h[0] != backup.host.name {
			flapBack++
			t.Errorf("VIP holders %v %v after %s's partition healed = want %s only: the VIP moved back or is held twice", h, time.Since(tHeal).Round(time.Millisecond), master.host.name, backup.host.name)
			break
		}
		time.Sleep(100 * time.Millisecond) // watching for nothing to happen, in keepalived's real time
	}
	mark("end")
	endLoad()

	// A bearer token of the test's own, used through the VIP: the
	// sidecar's tokens are not known to the test, this one is.
	bearer := c.tokenThroughVIP(t)
	c.checkCapture(t, cp, []secret{
		{"the API key", c.apiKey, c.apiKey}, {"a bearer token", bearer, "Bearer " + bearer},
		{"resource id r-000", "r-000", ""}, {"resource id r-039", "r-039", ""},
	})

	// Verification.
	calls, leases := b.snapshot()
	t.Logf("HAProxy on %s:\n%s", backup.host.name, c.haproxyStatus(backup))
	t.Logf("epochs: %s", c.epochAuthors(t))
	t.Logf("load: %d calls, %d leases, %d iterations dropped (more than %d in flight)", len(calls), len(leases), b.dropped.Load(), maxInFlight)
	logPhases(t, tl.phases, calls)
	t.Logf("latency of successful calls in the warm-up (steady state, through sidecar, VIP and HAProxy): %s", latencies(calls, tl.phases[0].at, tl.phases[1].at))

	b.mu.Lock()
	for _, a := range b.anomalies {
		t.Errorf("sidecar answer: %s", a)
	}
	b.mu.Unlock()
	violations := capacityViolations(leases)
	for _, v := range violations {
		t.Errorf("capacity violation: %v", v)
	}
	stale, audited := c.staleWrites(t)
	for _, w := range stale {
		t.Errorf("stale leader write accepted: %v", w)
	}
	t.Logf("write audit: %d writes to fenced tables, %d not by the holder of their epoch", audited, len(stale))
	lost := c.lostRegistrations(t, b.registeredIDs())
	for _, id := range lost {
		t.Errorf("registration of %s was acknowledged but the resource is gone", id)
	}
	var late []call
	var longest time.Duration
	for _, cl := range calls {
		if cl.late {
			late = append(late, cl)
		}
		longest = max(longest, cl.end.Sub(cl.start))
	}
	for _, cl := range late {
		t.Errorf("backend call not answered within its %v deadline: %v", callDeadline, cl)
	}
	t.Logf("longest backend call: %v (deadline %v; the sidecar's timeout is the shipped one)", longest.Round(time.Millisecond), callDeadline)

	// The server failover's window: the calls that could meet the kill
	// (started at most a deadline before it) and could not meet the
	// CPU hog of step (a') (started at least a deadline before it).
	failedKill := count(calls, func(cl call) bool {
		return cl.outcome == failed && !cl.start.Before(tKill.Add(-callDeadline)) && cl.start.Before(tl.phases[2].at.Add(-callDeadline))
	})
	firstSuccess := firstSuccessAfter(calls, leases, tKill, oldEpoch)

	fmt.Printf("measure: vip_move_haproxy_kill_s=%.3f\n", vipMoveHAProxy.Seconds())
	fmt.Printf("measure: vip_move_link_cut_s=%.3f\n", vipMoveLink.Seconds())
	fmt.Printf("measure: first_success_after_server_kill_s=%.3f\n", firstSuccess.Seconds())
	fmt.Printf("measure: failed_backend_calls=%d\n", failedKill)
	fmt.Printf("measure: standby_nolb_after_restart_s=%.3f\n", standbyNOLB.Seconds())
	// The planned move's window: calls that could meet the SIGTERM and
	// not the SIGSTOP. A measure, judged by its target (0, docs/ha.md) as
	// the server kill's is: how many calls a handover costs depends on
	// how long the machine takes to hand over, which a loaded machine
	// stretches; the stop's own promise (no stream holds it) is
	// internal/server's TestShutdownHandsOverPastIdleStreams.
	// A call answered before the signal did not fail for it (a run had
	// the CPU hog's last failures counted here too).
	failedTerm := count(calls, func(cl call) bool {
		return cl.outcome == failed && cl.end.After(tTerm) && cl.start.Before(tTermEnd)
	})
	fmt.Printf("measure: sigterm_failed_calls=%d\n", failedTerm)
	fmt.Printf("measure: sigterm_first_success_s=%.3f\n", firstSuccessAfter(calls, leases, tTerm, termEpoch).Seconds())
	// The directed switchover's window, after the SIGTERM's.
	failedSwitch := count(calls, func(cl call) bool {
		return cl.outcome == failed && cl.end.After(tSw) && cl.start.Before(tSwEnd)
	})
	fmt.Printf("measure: switchover_failed_calls=%d\n", failedSwitch)
	// Each handover's gap: from the last success the old leader gave to
	// the first lease the new one granted.
	fmt.Printf("measure: switchover_gap_s=%.3f\n", serviceGap(calls, leases, tSw, swEpoch).Seconds())
	fmt.Printf("measure: sigterm_gap_s=%.3f\n", serviceGap(calls, leases, tTerm, termEpoch).Seconds())
	fmt.Printf("measure: kill_gap_s=%.3f\n", serviceGap(calls, leases, tKill, oldEpoch).Seconds())
	// The LB tier's steps: calls started in step (c) (HAProxy killed on
	// the VIP's holder) and in step (d) (its link cut), to the end.
	failedIn := func(prefix string) int {
		for i, p := range tl.phases[:len(tl.phases)-1] {
			if strings.HasPrefix(p.name, prefix) {
				return count(calls, func(cl call) bool {
					return cl.outcome == failed && !cl.start.Before(p.at) && cl.start.Before(tl.phases[i+1].at)
				})
			}
		}
		return -1
	}
	fmt.Printf("measure: lb_stop_failed_calls=%d\n", failedIn("c:"))
	fmt.Printf("measure: lb_cut_failed_calls=%d\n", failedIn("d:"))
	// From the VIP's arrival on the other LB host (as the test saw it) to
	// the first call answered after it (target 0.3 s).
	fmt.Printf("measure: resume_after_vip_s{step=haproxy_kill}=%.3f\n", resumeAfter(calls, tHAProxyKill.Add(vipMoveHAProxy)).Seconds())
	fmt.Printf("measure: resume_after_vip_s{step=link_cut}=%.3f\n", resumeAfter(calls, tLinkCut.Add(vipMoveLink)).Seconds())
	fmt.Printf("measure: vip_move_partition_s=%.3f\n", vipMovePartition.Seconds())
	fmt.Printf("measure: split_brain_s=%.3f\n", splitBrain.Seconds())
	fmt.Printf("measure: flap_back=%d\n", flapBack)
	fmt.Printf("measure: lb_partition_failed_calls=%d\n", failedIn("e:"))
	fmt.Printf("measure: false_down_under_load=%d\n", len(falseDowns))
	fmt.Printf("measure: failed_calls_under_load=%d\n", count(calls, func(cl call) bool {
		return cl.outcome == failed && !cl.start.Before(tHog) && cl.start.Before(tHogEnd)
	}))
	fmt.Printf("measure: stale_leader_writes_accepted=%d\n", len(stale))
	fmt.Printf("measure: capacity_violations=%d\n", len(violations))
	fmt.Printf("measure: lost_registrations=%d\n", len(lost))
	t.Logf("whole test %v", time.Since(began).Round(time.Millisecond))
}

// switchover runs the directed switchover to the standby named to, as
// docs/ha.md says to: "server switchover --to NAME" on a host with the
// store's URL, waiting up to 20 s.
func (c *cluster) switchover(to string) ([]byte, error) {
	if c.rb != nil {
		return c.rb.switchover(to)
	}
	return exec.Command(c.serverBin, "switchover", "--to", to, "--store", c.dsn, "--timeout", "20s").CombinedOutput()
}

// tokenThroughVIP obtains a bearer token through the VIP with the API key,
// and makes one call with it through the VIP.
func (c *cluster) tokenThroughVIP(tb testing.TB) string {
	tb.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", vipAddr, grpcPort), grpc.WithTransportCredentials(c.creds()))
	if err != nil {
		tb.Fatalf("grpc.NewClient(VIP) = got error %v, want nil", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", c.apiKey), 10*time.Second)
	defer cancel()
	tok, err := repoolv1.NewAuthServiceClient(conn).IssueToken(ctx, &repoolv1.IssueTokenRequest{})
	if err != nil {
		tb.Fatalf("IssueToken through the VIP = got error %v, want nil", err)
	}
	ctx, cancel = context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok.GetToken()), 10*time.Second)
	defer cancel()
	if _, err := repoolv1.NewPoolServiceClient(conn).GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r-000"}); err != nil {
		tb.Fatalf("GetResource with the bearer token through the VIP = got error %v, want nil", err)
	}
	return tok.GetToken()
}

// vipMaster returns the LB host holding the VIP and the other one; it
// fails tb unless exactly one holds it.
func vipMaster(tb testing.TB, a, b *lb) (master, backup *lb) {
	tb.Helper()
	h := vipHolders(a.host, b.host)
	switch {
	case len(h) != 1:
		tb.Fatalf("VIP holders = %v, want exactly one", h)
	case h[0] == a.host.name:
		return a, b
	}
	return b, a
}

// wantKeepalivedState waits until l's state_metrics file says state (the
// one of MASTER, BACKUP, FAULT, STOP that is 1) and, for MASTER only, that
// it holds the VIP.
func wantKeepalivedState(tb testing.TB, l *lb, state string) {
	tb.Helper()
	master := "0"
	if state == "MASTER" {
		master = "1"
	}
	want := []string{
		`repool_keepalived_state{vrrp_instance="repool",state="` + state + `"} 1` + "\n",
		`repool_keepalived_master{vrrp_instance="repool"} ` + master + "\n",
	}
	var last string
	defer func() {
		if tb.Failed() {
			tb.Logf("%s:\n%s", l.stateMetrics, last)
		}
	}()
	testenv.Eventually(tb, 10*time.Second, l.host.name+"'s keepalived state file to say "+state, func() bool {
		raw, _ := os.ReadFile(l.stateMetrics)
		last = string(raw)
		for _, w := range want {
			if !strings.Contains(last, w) {
				return false
			}
		}
		return true
	})
}

// watchPartition samples the VIP's holders from t0, the moment cut was
// partitioned off, until other holds the VIP and cut does not: it returns
// how long both held it (split brain: two hosts answering ARP for it) and
// when other had it alone. A sample is two ip calls, a few milliseconds
// apart; overlap shorter than that is not seen.
func watchPartition(tb testing.TB, t0 time.Time, cut, other host) (both, moved time.Duration) {
	tb.Helper()
	last := time.Now()
	for {
		h := vipHolders(cut, other)
		now := time.Now()
		if len(h) == 2 {
			both += now.Sub(last)
		}
		last = now
		if len(h) == 1 && h[0] == other.name {
			return both, now.Sub(t0)
		}
		if now.Sub(t0) > 20*time.Second {
			tb.Fatalf("VIP holders %v 20 s after %s was cut off, want %s alone", h, cut.name, other.name)
		}
		time.Sleep(10 * time.Millisecond) // sampling the holders, in keepalived's real time
	}
}

// resumeAfter is how long after at the first call that succeeded after it
// ended, or -1 if none did.
func resumeAfter(calls []call, at time.Time) time.Duration {
	best := time.Duration(-1)
	for _, cl := range calls {
		if cl.outcome == ok && cl.end.After(at) && (best < 0 || cl.end.Sub(at) < best) {
			best = cl.end.Sub(at)
		}
	}
	return best
}

// waitVIP waits until h holds the VIP and returns the time since t0.
func waitVIP(tb testing.TB, t0 time.Time, h host) time.Duration {
	tb.Helper()
	testenv.Eventually(tb, 20*time.Second-time.Since(t0), "the VIP to reach "+h.name, func() bool { return len(vipHolders(h)) == 1 })
	return time.Since(t0)
}

// firstSuccessAfter is how long after t0 (the active server's death) the
// first backend call succeeded that the dead server cannot have served:
// one started after t0, or an acquire whose fencing token carries a later
// epoch than the dead server's.
func firstSuccessAfter(calls []call, leases []lease, t0 time.Time, deadEpoch uint64) time.Duration {
	best := time.Duration(-1)
	better := func(d time.Duration) {
		if best < 0 || d < best {
			best = d
		}
	}
	for _, cl := range calls {
		if cl.outcome == ok && !cl.start.Before(t0) {
			better(cl.end.Sub(t0))
		}
	}
	for _, l := range leases {
		if l.token>>40 > deadEpoch && l.acked.After(t0) {
			better(l.acked.Sub(t0))
		}
	}
	return best
}

// slowHandover is how long after a planned stop a successor is active
// before the test logs both servers' logs: the usual is 30-60 ms.
const slowHandover = 500 * time.Millisecond

// serviceGap is the longest a handover that began at t0 left the backend
// without a success: the longest stretch between two successful calls'
// answers, from the last one before t0 up to the first lease the new
// leader granted (under an epoch above oldEpoch). -1 if it granted none.
// Every handover is measured alike: a directed switchover's outage starts
// when the leader sees the request, after t0, between two successes, so
// a fault's gap starts at the success before it too, not at the fault.
func serviceGap(calls []call, leases []lease, t0 time.Time, oldEpoch uint64) time.Duration {
	var first time.Time
	for _, l := range leases {
		if l.token>>40 > oldEpoch && l.acked.After(t0) && (first.IsZero() || l.acked.Before(first)) {
			first = l.acked
		}
	}
	if first.IsZero() {
		return -1
	}
	var before time.Time // the last success's answer before t0
	for _, cl := range calls {
		if cl.outcome == ok && !cl.end.After(t0) && cl.end.After(before) {
			before = cl.end
		}
	}
	if before.IsZero() {
		before = t0
	}
	ends := []time.Time{before, first}
	for _, cl := range calls {
		if cl.outcome == ok && cl.end.After(t0) && cl.end.Before(first) {
			ends = append(ends, cl.end)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	for i := 1; i < len(ends); i++ {
		gap = max(gap, ends[i].Sub(ends[i-1]))
	}
	return gap
}

// logPhases logs, per step of the scenario, the backend calls by outcome
// and the failed ones in detail.
func logPhases(tb testing.TB, phases []phase, calls []call) {
	tb.Helper()
	for i, p := range phases[:len(phases)-1] {
		end := phases[i+1].at
		byOutcome := map[string]int{}
		var failures []string
		var firstFail, lastFail time.Time
		for _, cl := range calls {
			if cl.start.Before(p.at) || !cl.start.Before(end) {
				continue
			}
			byOutcome[cl.op+" "+cl.outcome.String()]++
			if cl.outcome == failed {
				failures = append(failures, cl.String())
				if firstFail.IsZero() || cl.start.Before(firstFail) {
					firstFail = cl.start
				}
				if cl.end.After(lastFail) {
					lastFail = cl.end
				}
			}
		}
		keys := slices.Sorted(maps.Keys(byOutcome))
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%d ", k, byOutcome[k])
		}
		tb.Logf("calls started in %q (%v): %s", p.name, end.Sub(p.at).Round(time.Millisecond), b.String())
		if len(failures) > 0 {
			tb.Logf("  failed calls started from +%.3fs, answered until +%.3fs", firstFail.Sub(p.at).Seconds(), lastFail.Sub(p.at).Seconds())
		}
		const show = 15
		for j, f := range failures {
			if j == show {
				tb.Logf("  ... and %d more failed calls", len(failures)-show)
				break
			}
			tb.Logf("  failed: %s", f)
		}
	}
}

// latencies returns p50/p95/p99 per operation of the successful calls
// started in [from, to).
func latencies(calls []call, from, to time.Time) string {
	byOp := map[string][]time.Duration{}
	for _, cl := range calls {
		if cl.outcome == ok && !cl.start.Before(from) && cl.start.Before(to) {
			byOp[cl.op] = append(byOp[cl.op], cl.end.Sub(cl.start))
		}
	}
	ops := slices.Sorted(maps.Keys(byOp))
	var b strings.Builder
	for _, op := range ops {
		ds := byOp[op]
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(100 * time.Microsecond) }
		fmt.Fprintf(&b, "%s p50=%v p95=%v p99=%v (n=%d); ", op, q(0.5), q(0.95), q(0.99), len(ds))
	}
	return b.String()
}

func count(calls []call, pred func(call) bool) int {
	n := 0
	for _, c := range calls {
		if pred(c) {
			n++
		}
	}
	return n
}

// lostRegistrations lists the acknowledged registrations that the cluster
// no longer has, read with ListResources through the VIP (and GetResource
// for every id the listing misses, to be sure).
func (c *cluster) lostRegistrations(tb testing.TB, ids []string) []string {
	tb.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", vipAddr, grpcPort), grpc.WithTransportCredentials(c.creds()))
	if err != nil {
		tb.Fatalf("grpc.NewClient(VIP) = got error %v, want nil", err)
	}
	defer conn.Close()
	pool := repoolv1.NewPoolServiceClient(conn)
	// The route entry steers the calls to the demo tenant's group
	// (TestGroups); with one group HAProxy has no route to take.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", c.apiKey, repoolv1.TenantRouteKey, c.tenantID())

	// retry rides out a moment without an active server.
	retry := func(f func(ctx context.Context) error) error {
		deadline := time.Now().Add(20 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := f(cctx)
			cancel()
			if err == nil || status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded || time.Now().After(deadline) {
				return err
			}
			time.Sleep(100 * time.Millisecond) // a retry's pause against the real cluster
		}
	}
	have := map[string]bool{}
	token := ""
	for {
		var resp *repoolv1.ListResourcesResponse
		err := retry(func(ctx context.Context) (err error) {
			resp, err = pool.ListResources(ctx, &repoolv1.ListResourcesRequest{PageSize: 1000, PageToken: token})
			return err
		})
		if err != nil {
			tb.Fatalf("ListResources through the VIP = got error %v, want nil", err)
		}
		for _, r := range resp.GetResources() {
			have[r.GetId()] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	var lost []string
	for _, id := range ids {
		if have[id] {
			continue
		}
		err := retry(func(ctx context.Context) error {
			_, err := pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: id})
			return err
		})
		if err != nil {
			lost = append(lost, id)
		}
	}
	tb.Logf("registrations: %d acknowledged, %d resources listed, %d lost", len(ids), len(have), len(lost))
	return lost
}
