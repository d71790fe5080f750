// Package crash is the crash harness: it drives a write load against the
// real server binary from a client that keeps a ledger of every call the
// server acknowledged, kills the server with SIGKILL at random moments,
// restarts it on the same store and checks the ledger against what the
// restarted server (and the store) hold. See crash_test.go.
package crash

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// leaseState is what the ledger knows of a lease the server granted.
type leaseState int

const (
	live      leaseState = iota // acknowledged, no release sent
	releasing                   // a release was sent: the server may or may not have ended it
	released                    // the release was acknowledged
)

type lease struct {
	id, resource string
	token        uint64
	expires      time.Time
	state        leaseState
}

// regState is what the ledger knows of a resource id.
type regState int

const (
	regDoubt     regState = iota // a call was sent and not acknowledged
	regAcked                     // registration acknowledged
	deregAcked                   // deregistration acknowledged
	deregSending                 // a deregistration was sent, not acknowledged
)

// reportTally counts the acknowledged successes of one report resource
// since the last restart's reading (base).
type reportTally struct {
	base   float64     // successes the restarted server showed
	baseAt time.Time   // when base was read
	acks   []time.Time // acknowledgements since base
}

// ledger is the client's record of what the server acknowledged, and the
// violations found. Safe for concurrent use.
type ledger struct {
	mu       sync.Mutex
	regs     map[string]regState
	leases   map[string]*lease
	maxToken map[string]uint64 // per resource, the highest token granted
	reports  map[string]*reportTally

	counts counts
}

// counts are the harness's figures, printed at the end of a run.
type counts struct {
	Kills, KillsBeforeReady                             int
	Registered, Deregistered, Granted, Released, Report int
	LostRegistrations, ResurrectedDeregistrations       int
	ForgottenLeases, JournalMismatches                  int
	OverCapacity, TokenRegressions                      int
	ReportsLost, ReportsLostBeyondWindow                float64
	LeasesChecked, RegistrationsChecked                 int
}

func newLedger() *ledger {
	return &ledger{regs: map[string]regState{}, leases: map[string]*lease{}, maxToken: map[string]uint64{}, reports: map[string]*reportTally{}}
}

func (l *ledger) setReg(id string, s regState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case regAcked:
		l.counts.Registered++
	case deregAcked:
		l.counts.Deregistered++
	}
	l.regs[id] = s
}

// granted records an acknowledged lease and checks it against the ledger:
// the resource (capacity 1) must not be held by another live lease that
// had not expired when this one was acknowledged, and its token must
// exceed every token granted on the resource before.
func (l *ledger) granted(ls lease, ackedAt time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts.Granted++
	var problems []string
	for _, o := range l.leases {
		if o.resource == ls.resource && o.state == live && o.expires.After(ackedAt) {
			l.counts.OverCapacity++
			problems = append(problems, fmt.Sprintf("lease %s on %s granted while lease %s (token %d, expires %s) was live", ls.id, ls.resource, o.id, o.token, o.expires.Format(time.RFC3339Nano)))
		}
	}
	if prev := l.maxToken[ls.resource]; ls.token <= prev {
		l.counts.TokenRegressions++
		problems = append(problems, fmt.Sprintf("lease %s on %s has token %d, not above the %d granted before", ls.id, ls.resource, ls.token, prev))
	}
	l.maxToken[ls.resource] = max(l.maxToken[ls.resource], ls.token)
	ls.state = live
	l.leases[ls.id] = &ls
	return problems
}

func (l *ledger) setLease(id string, s leaseState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls, ok := l.leases[id]; ok {
		ls.state = s
		if s == released {
			l.counts.Released++
		}
	}
}

// liveLeases returns the leases acknowledged and not released that will
// still be live after margin.
func (l *ledger) liveLeases(now time.Time, margin time.Duration) []lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []lease
	for _, ls := range l.leases {
		if ls.state == live && ls.expires.After(now.Add(margin)) {
			out = append(out, *ls)
		}
	}
	return out
}

// forget drops leases that expired long ago, to keep the checks cheap.
func (l *ledger) forget(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, ls := range l.leases {
		if ls.expires.Before(now.Add(-time.Minute)) {
			delete(l.leases, id)
		}
	}
}

func (l *ledger) reported(resource string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts.Report++
	t := l.reports[resource]
	if t == nil {
		t = &reportTally{base: 1, baseAt: at} // Beta(1,1): a new context starts at one success
		l.reports[resource] = t
	}
	t.acks = append(t.acks, at)
}

// checkReports compares the successes a restarted server shows with what
// was acknowledged since the previous reading. Statistics decay with a
// one-hour half-life, so the expected value is bounded from below by the
// decay since base; only the reports acknowledged at or after
// durableBefore may be missing. It returns a problem for each resource
// that lost more.
func (l *ledger) checkReports(shown map[string]float64, durableBefore time.Time, now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var problems []string
	for res, t := range l.reports {
		got, ok := shown[res]
		if !ok {
			got = 1 // no cell yet: Beta(1,1), as a new context starts
		}
		acked := float64(len(t.acks))
		inWindow := 0.0
		for _, a := range t.acks {
			if !a.Before(durableBefore) {
				inWindow++
			}
		}
		// Decay since base over at most now-baseAt (half-life one hour).
		decay := 1 - math.Exp2(-now.Sub(t.baseAt).Hours())
		// Twice the decay, and a twentieth of one report, for the server's
		// own rounding of time: far less than one lost report.
		tolerance := 2*(t.base+acked)*decay + 0.05
		lost := max(0, t.base+acked-got)
		l.counts.ReportsLost += max(0, lost-tolerance)
		if lost > inWindow+tolerance {
			l.counts.ReportsLostBeyondWindow += lost - inWindow
			problems = append(problems, fmt.Sprintf("resource %s shows %.3f successes, want at least %.3f (%.0f acknowledged since a reading of %.3f; %.0f of them after %s, which a flush had not written)",
				res, got, t.base+acked-inWindow-tolerance, acked, t.base, inWindow, durableBefore.Format("15:04:05.000")))
		}
		t.base, t.baseAt, t.acks = got, now, nil
	}
	return problems
}
