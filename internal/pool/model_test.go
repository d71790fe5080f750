package pool

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
)

// The model test's size; raise them for a longer search, for example
// go test -run RandomOperations ./internal/pool -args -model.seeds=3000.
var (
	modelSeeds = flag.Int("model.seeds", 12, "seeds TestRandomOperationsKeepPromises runs")
	modelSteps = flag.Int("model.steps", 2500, "operations per seed")
)

// peek is what Snapshot returns, without starting a new change set, plus
// the bookkeeping a rejected call must not change either: quarantine
// states, active leases and generations, the change set's lengths, the
// lease count and the counters.
func (p *Pool) peek() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.snapshotLocked()
	var qs []string
	for idx := range p.res {
		if r := &p.res[idx]; r.live {
			qs = append(qs, fmt.Sprintf("%s:%d/%d/%d", r.id, r.q.state, r.active, r.gen))
		}
	}
	return fmt.Sprintf("%+v %v %d %d %d %d %+v", normalize(s), qs, len(p.dirtyRes), len(p.dirtyCells), len(p.removed), p.leases.len(), p.counters)
}

// TestRandomOperationsKeepPromises runs seeded random sequences of every
// operation (register and deregister with slot reuse, Acquire with and
// without selectors over dense and sparse contexts, Renew, Release and
// Report with good, stale and ended leases, time passing with and without
// Tick, SetEpoch, TakeChanges, Snapshot and Restore into the same or a new
// pool) and checks after each step: checkInvariants (capacity, one probe of
// the current round at most, the indexes), tokens that only grow and lease
// ids never reused, nothing leased for a context its cell is quarantined
// for, a rejected call that changes nothing and emits nothing, live leases
// that stay found, and change sets that replay to the snapshot.
func TestRandomOperationsKeepPromises(t *testing.T) {
	for seed := range *modelSeeds {
		if !runModel(t, uint64(seed), *modelSteps) {
			return
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int) bool {
	rng := rand.New(rand.NewPCG(seed, 99))
	fc := clock.NewFake(t0)
	cfg := Config{
		Clock: fc, Rand: rand.NewPCG(seed, 7),
		FailuresToQuarantine: 2, FailuresToQuarantineWhole: 5, CooldownBase: 2 * time.Second, CooldownMax: 30 * time.Second,
		QuarantineBelow: 0.3, QuarantineMinEvidence: 4, Leaders: 1 + rng.IntN(3), Candidates: 1 + rng.IntN(3),
		EventBuffer: 1 << 16, HalfLife: time.Minute,
		MaxQuarantinedShare: []float64{0.2, 0.5, 1}[rng.IntN(3)],
	}
	if rng.IntN(2) == 0 {
		cfg.MaxAge = time.Duration(20+rng.IntN(40)) * time.Second
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sub := p.Subscribe(0, 0)
	defer sub.Close()
	events := func() int {
		n := 0
		for {
			select {
			case _, ok := <-sub.C:
				if !ok {
					t.Fatalf("seed %d: subscription closed", seed)
				}
				n++
			default:
				return n
			}
		}
	}
	ids := []string{}
	for i := range 14 {
		ids = append(ids, fmt.Sprintf("r%d", i))
	}
	ids = append(ids, strings.Repeat("L", 40)+"1", strings.Repeat("L", 40)+"2")
	nctx := 3 + rng.IntN(12) // up to 14: dense and sparse contexts
	ctxs := []string{}
	for i := 0; i < nctx; i++ {
		ctxs = append(ctxs, fmt.Sprintf("c%d", i))
	}
	held := map[uint64]Lease{}
	var old []Lease
	seenIDs := map[uint64]bool{}
	var maxToken uint64
	model := newDurable(p.Snapshot()) // what a checkpoint store holds
	fail := func(step int, op string, format string, args ...any) bool {
		t.Errorf("seed %d step %d op %s: %s", seed, step, op, fmt.Sprintf(format, args...))
		return false
	}
	pickHeld := func() (Lease, bool) {
		if len(held) == 0 {
			return Lease{}, false
		}
		k := rng.IntN(len(held))
		for _, l := range held {
			if k == 0 {
				return l, true
			}
			k--
		}
		return Lease{}, false
	}
	outcomes := []Outcome{Success, Success, Success, Failure, Failure, Blocked}
	for step := 0; step < steps; step++ {
		op := ""
		var before string
		checkUnchanged := func(call string, err error) bool {
			if errors.Is(err, ErrStaleToken) || errors.Is(err, ErrInvalidArgument) {
				after := p.peek()
				if after != before || events() != 0 {
					return fail(step, call, "rejected call (%v) changed state:\n before %s\n after  %s", err, before, after)
				}
			}
			return true
		}
		events()
		switch x := rng.IntN(100); {
		case x < 8:
			op = "register"
			var specs []Spec
			for n := 1 + rng.IntN(3); n > 0; n-- {
				s := Spec{ID: ids[rng.IntN(len(ids))], Capacity: rng.IntN(4)}
				if rng.IntN(3) == 0 {
					s.MaxUses = 1 + rng.IntN(8)
				}
				if rng.IntN(2) == 0 {
					s.Labels = map[string]string{"k": fmt.Sprint(rng.IntN(2))}
				}
				specs = append(specs, s)
			}
			if _, _, err := p.Register(specs); err != nil {
				return fail(step, op, "%v", err)
			}
		case x < 13:
			op = "deregister"
			id := ids[rng.IntN(len(ids))]
			if _, _, err := p.Deregister([]string{id}); err != nil {
				return fail(step, op, "%v", err)
			}
			for k, l := range held {
				if l.Resource == id {
					delete(held, k)
					old = append(old, l)
				}
			}
		case x < 40:
			op = "acquire"
			ctx := ctxs[rng.IntN(len(ctxs))]
			var sel map[string]string
			if rng.IntN(5) == 0 {
				sel = map[string]string{"k": fmt.Sprint(rng.IntN(2))}
			}
			// what the cell looked like
			p.mu.RLock()
			pre := map[string]uint8{}
			for idx := range p.res {
				r := &p.res[idx]
				if !r.live {
					continue
				}
				if c, ok := p.findContext(ctx); ok {
					if slot := p.findCell(int32(idx), c); slot >= 0 {
						pre[r.id] = p.cellAt(slot).q.state
					}
				}
			}
			if now := p.clock.Now().UnixNano(); p.expiries.due(now) || p.cooldowns.due(now) {
				clear(pre) // Acquire first expires leases and ends cooldowns
			}
			p.mu.RUnlock()
			ttl := time.Duration(1+rng.IntN(20)) * time.Second
			l, err := p.Acquire(ctx, ttl, sel)
			if err != nil {
				if !errors.Is(err, ErrExhausted) {
					return fail(step, op, "%v", err)
				}
				break
			}
			if l.Token <= maxToken {
				return fail(step, op, "token %d not above %d", l.Token, maxToken)
			}
			maxToken = l.Token
			if seenIDs[l.ID] || l.ID == 0 {
				return fail(step, op, "lease id %d reused", l.ID)
			}
			seenIDs[l.ID] = true
			if st := pre[l.Resource]; st == qBlocked || st == qProbing {
				return fail(step, op, "leased %s for %s whose cell was in state %d", l.Resource, ctx, st)
			}
			held[l.ID] = l
		case x < 50:
			op = "release"
			l, ok := pickHeld()
			if !ok {
				break
			}
			o := Outcome(0)
			if rng.IntN(3) > 0 {
				o = outcomes[rng.IntN(len(outcomes))]
			}
			if rng.IntN(6) == 0 {
				before = p.peek()
				_, err := p.Release(l.ID, l.Token+1, o)
				if !errors.Is(err, ErrStaleToken) && !errors.Is(err, ErrNotFound) {
					return fail(step, op, "stale release = %v", err)
				}
				if !checkUnchanged("release-stale", err) {
					return false
				}
				break
			}
			_, err := p.Release(l.ID, l.Token, o)
			delete(held, l.ID)
			old = append(old, l)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return fail(step, op, "%v", err)
			}
		case x < 57:
			op = "renew"
			l, ok := pickHeld()
			if !ok {
				break
			}
			if rng.IntN(6) == 0 {
				before = p.peek()
				_, err := p.Renew(l.ID, l.Token^1, time.Duration(1+rng.IntN(20))*time.Second)
				if !checkUnchanged("renew-stale", err) {
					return false
				}
				break
			}
			nl, err := p.Renew(l.ID, l.Token, time.Duration(1+rng.IntN(20))*time.Second)
			if err != nil {
				if !errors.Is(err, ErrNotFound) {
					return fail(step, op, "%v", err)
				}
				delete(held, l.ID)
				old = append(old, l)
				break
			}
			if nl.Token != l.Token || nl.ID != l.ID || nl.Resource != l.Resource {
				return fail(step, op, "renew changed lease %+v -> %+v", l, nl)
			}
			held[l.ID] = nl
		case x < 75:
			op = "report"
			rep := Report{Resource: ids[rng.IntN(len(ids))], Context: ctxs[rng.IntN(len(ctxs))], Outcome: outcomes[rng.IntN(len(outcomes))]}
			if rng.IntN(3) == 0 {
				if l, ok := pickHeld(); ok {
					rep.Resource, rep.Context, rep.LeaseID, rep.Token = l.Resource, l.Context, l.ID, l.Token
					switch rng.IntN(8) {
					case 0:
						rep.Token++
					case 1:
						rep.Context = ctxs[rng.IntN(len(ctxs))]
					}
				}
			}
			before = p.peek()
			_, err := p.Report(rep)
			if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrStaleToken) && !errors.Is(err, ErrInvalidArgument) {
				return fail(step, op, "%v", err)
			}
			if !checkUnchanged("report", err) {
				return false
			}
		case x < 85:
			op = "advance"
			fc.Advance(time.Duration(rng.IntN(4000)) * time.Millisecond)
			if rng.IntN(3) == 0 {
				p.Tick()
			}
		case x < 90:
			op = "changes"
			if err := model.apply(p.TakeChanges()); err != nil {
				return fail(step, op, "%v", err)
			}
			if err := model.matches(p.Snapshot()); err != nil {
				return fail(step, op, "%v", err)
			}
		case x < 93:
			op = "restore"
			s := p.Snapshot()
			model.load(s)
			var q *Pool
			if rng.IntN(2) == 0 {
				q = p
			} else {
				q, _ = New(cfg)
				if rng.IntN(2) == 0 {
					q.SetEpoch(uint32(rng.IntN(3)))
				}
			}
			if err := q.Restore(s); err != nil {
				return fail(step, op, "%v", err)
			}
			s2 := q.Snapshot()
			n1, n2 := normalize(s), normalize(s2)
			n1.LastToken, n1.LastLease, n1.Epoch = 0, 0, 0
			n2.LastToken, n2.LastLease, n2.Epoch = 0, 0, 0
			if !reflect.DeepEqual(n1, n2) {
				return fail(step, op, "snapshot after restore differs:\n %+v\n %+v", n1, n2)
			}
			if q != p {
				sub.Close()
				p = q
				sub = p.Subscribe(0, 0)
			}
		case x < 94:
			op = "quarantine-control"
			id := ids[rng.IntN(len(ids))]
			var err error
			if rng.IntN(2) == 0 {
				_, err = p.Quarantine(id, time.Duration(1+rng.IntN(20))*time.Second, "model")
			} else {
				_, err = p.Lift(id, "model")
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				return fail(step, op, "%v", err)
			}
		case x < 95:
			op = "epoch"
			e, _ := p.Epoch()
			if err := p.SetEpoch(e + uint32(rng.IntN(2))); err != nil {
				return fail(step, op, "%v", err)
			}
		default:
			op = "stale-old"
			if len(old) == 0 {
				break
			}
			l := old[rng.IntN(len(old))]
			before = p.peek()
			switch rng.IntN(3) {
			case 0:
				_, err := p.Renew(l.ID, l.Token, time.Second)
				if err == nil {
					return fail(step, op, "renewed an ended lease %+v", l)
				}
				if !checkUnchanged(op, err) {
					return false
				}
			case 1:
				_, err := p.Release(l.ID, l.Token, Success)
				if err == nil {
					return fail(step, op, "released an ended lease %+v", l)
				}
				if !checkUnchanged(op, err) {
					return false
				}
			case 2:
				if p.leaseLive(l.ID, l.Token) {
					return fail(step, op, "ended lease %+v is live", l)
				}
			}
		}
		if err := p.checkInvariants(); err != nil {
			return fail(step, op, "invariants: %v", err)
		}
		// every lease the model holds and that has not expired is live
		for id, l := range held {
			if fc.Now().Before(l.ExpiresAt) {
				if !p.leaseLive(id, l.Token) {
					return fail(step, op, "held lease %+v is not live", l)
				}
			}
		}
	}
	return true
}
