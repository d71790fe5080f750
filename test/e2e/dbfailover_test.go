package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/test/internal/dbtier"
)

// TestDatabaseFailover runs repool on the database tier of docs/ha.md: three
// PostgreSQL nodes under Patroni with synchronous replication and three etcd
// members (package dbtier, from the shipped files), each node a host of the
// topology, behind the LB hosts' HAProxy on the VIP (the inventory's
// database section); an active and a standby server whose store is the
// VIP; and the sidecar's load of acquire → report → release and
// registrations on capacity-1 resources, with the shipped sidecar
// configuration. It breaks the database primary four ways in turn:
//
//	switchover: patronictl switchover to the synchronous standby;
//	stop:       Patroni stopped on the primary (systemctl stop patroni:
//	            it shuts PostgreSQL down and gives up the leader key);
//	crash:      kill -9 of Patroni and PostgreSQL on the primary;
//	netcut:     the primary's host cut off the network (its link down).
//
// After each, the synchronous standby is primary and exactly one server
// leads at a higher epoch; the node that was hit rejoins as a standby
// before the next fault, and `server status` (its gathering, from the
// inventory) shows the one primary and two running replicas. It asserts that no resource was leased beyond
// its capacity, that fencing tokens only grew per resource, that no
// acknowledged registration was lost and that the planned procedures (the
// switchover and the stop) failed no call, and prints measure: lines.
func TestDatabaseFailover(t *testing.T) {
	began := time.Now()
	c := claimRun(t, dbtier.Binaries...)
	c.build()
	network(t)
	if useTLS() {
		c.setupTLS()
	}
	var specs []dbtier.NodeSpec
	for _, h := range []host{hostPG1, hostPG2, hostPG3} {
		specs = append(specs, dbtier.NodeSpec{Name: h.name, Addr: h.addr, NS: h.ns()})
	}
	// HAProxy's connections to PostgreSQL come from the LB hosts.
	tier := dbtier.Start(t, dbtier.Config{Root: c.root, Dir: c.dir, Nodes: specs,
		LBAddrs: [2]string{hostLB1.addr, hostLB2.addr}, VIP: vipAddr})
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range tier.Nodes {
				t.Logf("==== %s's Patroni and PostgreSQL (tail)\n%s", n.Name, dbtier.LogTail(n.PatroniLog, 4000))
			}
		}
	})
	c.dbNodes = specs
	c.dsn = tier.DSN(vipAddr, pgPort)
	t.Logf("database tier up in %v: primary %s, synchronous standby %s", time.Since(began).Round(time.Millisecond), tier.Primary().Name, tier.SyncStandby())

	c.frontEnd()
	inv, err := inventory.Load(c.inventoryPath())
	if err != nil {
		t.Fatal(err)
	}
	c.startFirst()
	c.startStandbys(hostS2)
	b := c.client("s1")
	t.Logf("cluster up in %v: s1 active, s2 standby, VIP %s on lb1, sidecar on client", time.Since(began).Round(time.Millisecond), vipAddr)

	endLoad := startLoad(t, b)
	tl := &timeline{tb: t}
	mark := tl.mark
	mark("warm-up")
	time.Sleep(3 * time.Second) // a window of steady load on the real cluster
	if calls, _ := b.snapshot(); count(calls, func(c call) bool { return c.op == "acquire" && c.outcome == ok }) == 0 {
		t.Fatalf("no acquire succeeded in the warm-up; calls: %v", calls)
	}

	type result struct {
		name             string
		at, recovered    time.Time
		dbSwitched       time.Duration
		leaders          int
		epochBefore, now int64
	}
	var results []result
	for _, f := range []struct {
		name, what string
		do         func(primary *dbtier.Node, sync string)
		heal       func(primary *dbtier.Node)
	}{
		{"switchover", "patronictl switchover to the synchronous standby", func(p *dbtier.Node, sync string) {
			tier.Patronictl(p, "switchover", "--leader", p.Name, "--candidate", sync, "--force")
		}, func(*dbtier.Node) {}},
		{"stop", "Patroni stopped on the primary (systemctl stop patroni)", func(p *dbtier.Node, _ string) {
			tier.StopPatroni(p, 60*time.Second)
		}, func(p *dbtier.Node) { tier.StartPatroni(p) }},
		{"crash", "kill -9 of Patroni and PostgreSQL on the primary (the host dies)", func(p *dbtier.Node, _ string) {
			tier.Crash(p)
		}, func(p *dbtier.Node) { tier.StartPatroni(p) }},
		{"netcut", "the primary's host cut off the network (its link down at the switch)", func(p *dbtier.Node, _ string) {
			ip(t, "-n", switchNS, "link", "set", p.Name, "down")
		}, func(p *dbtier.Node) { ip(t, "-n", switchNS, "link", "set", p.Name, "up") }},
	} {
		old, sync := tier.Primary(), tier.SyncStandby()
		if old == nil || sync == "" {
			t.Fatalf("before %s: primary %v, synchronous standby %q; want both", f.name, old, sync)
		}
		r := result{name: f.name, epochBefore: c.dbEpoch(t)}
		mark(fmt.Sprintf("%s: %s; primary %s, synchronous standby %s", f.name, f.what, old.Name, sync))
		r.at = time.Now()
		f.do(old, sync)
		var promoted *dbtier.Node
		testenv.Eventually(t, 90*time.Second, "another node to answer /primary 200", func() bool {
			promoted = tier.Primary()
			return promoted != nil && promoted != old
		})
		r.dbSwitched = time.Since(r.at)
		if promoted.Name != sync {
			t.Errorf("%s: promoted %s, want the synchronous standby %s", f.name, promoted.Name, sync)
		}
		testenv.Eventually(t, 60*time.Second, "one server active again", func() bool { return len(c.active()) == 1 })
		r.recovered = time.Now()
		time.Sleep(2 * time.Second) // load on the new primary, in real time, before the node that was hit rejoins
		r.leaders, r.now = len(c.active()), c.dbEpoch(t)
		if r.leaders != 1 || r.now <= r.epochBefore {
			t.Errorf("%s: %d servers active at epoch %d, want exactly 1 at an epoch above %d", f.name, r.leaders, r.now, r.epochBefore)
		}
		results = append(results, r)
		mark(f.name + ": " + old.Name + " rejoins")
		f.heal(old)
		testenv.Eventually(t, 120*time.Second, "the three nodes back, two of them standbys, one synchronous", func() bool {
			return tier.SyncStandby() != "" && tier.Primary() != nil
		})
		tier.CheckStatus(t, inv)
	}
	mark("end")
	endLoad()

	calls, leases := b.snapshot()
	logPhases(t, tl.phases, calls)
	violations := capacityViolations(leases)
	for _, v := range violations {
		t.Errorf("capacity violation (a double grant): %v", v)
	}
	regressions := tokenRegressions(leases)
	for _, r := range regressions {
		t.Errorf("fencing token regression: %s", r)
	}
	lost := c.lostRegistrations(t, b.registeredIDs())
	for _, id := range lost {
		t.Errorf("registration of %s was acknowledged but the resource is gone", id)
	}
	for _, r := range results {
		var next time.Time
		for _, p := range tl.phases {
			if p.at.After(r.at) {
				next = p.at
				break
			}
		}
		gap, end := longestGap(calls, r.at, next)
		recovery := time.Duration(0)
		if !end.IsZero() {
			recovery = end.Sub(r.at)
		}
		failedHere := count(calls, func(cl call) bool {
			return cl.outcome == failed && cl.end.After(r.at) && cl.start.Before(next)
		})
		fmt.Printf("measure: db_failover_db_s{fault=%s}=%.2f\n", r.name, r.dbSwitched.Seconds())
		fmt.Printf("measure: db_failover_recovery_s{fault=%s}=%.2f\n", r.name, recovery.Seconds())
		fmt.Printf("measure: db_failover_gap_s{fault=%s}=%.2f\n", r.name, gap.Seconds())
		fmt.Printf("measure: db_failover_failed_calls{fault=%s}=%d\n", r.name, failedHere)
		if r.name == "switchover" {
			fmt.Printf("measure: db_switchover_failed_calls=%d\n", failedHere)
		}
		fmt.Printf("measure: leaders_after{fault=%s}=%d\n", r.name, r.leaders)
		if planned := r.name == "switchover" || r.name == "stop"; planned && failedHere > 0 {
			// The sidecar waits out a handover (HAProxy's 503 while a
			// standby is alive) for up to the shipped max_elapsed, 3 s.
			t.Errorf("%s (a planned procedure): %d calls failed, want 0", r.name, failedHere)
		}
		t.Logf("%s: database switched in %v; epoch %d -> %d; longest gap without a successful call %v, ended %v after the fault; %d failed calls",
			r.name, r.dbSwitched.Round(time.Millisecond), r.epochBefore, r.now, gap.Round(time.Millisecond), recovery.Round(time.Millisecond), failedHere)
	}
	fmt.Printf("measure: acked_writes_lost=%d\n", len(lost))
	fmt.Printf("measure: double_grants=%d\n", len(violations))
	fmt.Printf("measure: token_regressions=%d\n", len(regressions))
	for _, s := range c.servers {
		n := strings.Count(s.p.output(), "leader election: database unreachable")
		if n > len(results) {
			t.Errorf("server %s logged 'leader election: database unreachable' %d times over %d faults, want at most once per outage", s.host.name, n, len(results))
		}
	}
	t.Logf("whole test %v", time.Since(began).Round(time.Millisecond))
}

// dbEpoch reads the default group's persisted epoch through the VIP,
// retrying within 30 s (the database may be changing primary).
func (c *cluster) dbEpoch(tb testing.TB) int64 {
	tb.Helper()
	var v int64
	testenv.Eventually(tb, 30*time.Second, "the epoch read through the VIP", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.dsn)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		return conn.QueryRow(ctx, `SELECT value FROM server_counters WHERE name = 'epoch'`).Scan(&v) == nil
	})
	return v
}

// longestGap is the longest time between two successful calls' answers
// from from until to (or the first success after to), and the answer that
// ended it: zero if none came.
func longestGap(calls []call, from, to time.Time) (gap time.Duration, end time.Time) {
	var ends []time.Time
	for _, cl := range calls {
		if cl.outcome == ok && !cl.end.Before(from) {
			ends = append(ends, cl.end)
		}
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	prev := from
	for _, e := range ends {
		if e.Sub(prev) > gap {
			gap, end = e.Sub(prev), e
		}
		prev = e
		if e.After(to) {
			break
		}
	}
	return gap, end
}

// tokenRegressions lists, per resource, a lease whose fencing token is not
// above that of the lease acknowledged before it on the resource: on a
// capacity-1 resource the grants are one after the other, so the tokens
// must grow in the order the acquires were answered.
func tokenRegressions(leases []lease) []string {
	by := map[string][]lease{}
	for _, l := range leases {
		by[l.resource] = append(by[l.resource], l)
	}
	var out []string
	for res, ls := range by {
		sort.Slice(ls, func(i, j int) bool { return ls[i].acked.Before(ls[j].acked) })
		for i := 1; i < len(ls); i++ {
			if ls[i].token <= ls[i-1].token {
				out = append(out, fmt.Sprintf("%s: lease %s token %d acknowledged after lease %s token %d", res, ls[i].id, ls[i].token, ls[i-1].id, ls[i-1].token))
			}
		}
	}
	return out
}
