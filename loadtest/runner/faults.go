package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/summary"
	"github.com/repool/repool/loadtest/topology"
)

// Faults is the part of a topology the fault plan drives; *topology.Topology
// implements it.
type Faults interface {
	StopServers(provider string) error
	StartServers(ctx context.Context, provider string) error
	KillActive(ctx context.Context, provider string) (string, error)
	StartServer(ctx context.Context, provider, name string) error
	AddToxics(provider string, toxics ...topology.Toxic) (remove func(), err error)
	SetBrownout(provider string, share float64) error
	MoveTenant(ctx context.Context, provider, group string) (topology.Move, error)
}

var _ Faults = (*topology.Topology)(nil)

// plan runs a scenario's fault plan against a topology on the run's clock.
// A fault that fails to apply is an event and an error (see err): a run
// without its fault does not measure what the scenario describes.
type plan struct {
	faults   []scenario.Fault
	duration time.Duration
	target   Faults
	event    func(at time.Duration, text string)
	clock    clock.Clock

	mu      sync.Mutex
	pending map[int]func()       // reverts of applied faults, by index
	errs    []error              // faults that failed to apply
	moves   map[int]summary.Move // what the applied moves measured, by index
	wg      sync.WaitGroup
}

// newPlan returns sc's fault plan against target, scheduled on clk, with
// its events sent to event.
func newPlan(sc *scenario.Scenario, target Faults, event func(time.Duration, string), clk clock.Clock) *plan {
	return &plan{faults: sc.Faults, duration: sc.Duration.D(), target: target, event: event, clock: clk, pending: map[int]func(){}, moves: map[int]summary.Move{}}
}

// since is the time on the plan's clock since t0.
func (p *plan) since(t0 time.Time) time.Duration { return p.clock.Now().Sub(t0) }

// windows returns the faults' planned spans; a move's is the window it
// measured (from its request until the tenant was served again), once
// applied.
func (p *plan) windows() []summary.Window {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]summary.Window, 0, len(p.faults))
	for i, f := range p.faults {
		end := f.End(p.duration)
		if f.Kind == scenario.KindMove {
			end = f.At.D()
			if m, ok := p.moves[i]; ok {
				end = min(f.At.D()+time.Duration(m.WindowS*float64(time.Second)), p.duration)
			}
		}
		out = append(out, summary.Window{Provider: f.Provider, Kind: f.Kind, Start: f.At.D(), End: end,
			StartS: f.At.D().Seconds(), EndS: end.Seconds()})
	}
	return out
}

// start schedules every fault from t0 until ctx ends. Wait for it with
// finish.
func (p *plan) start(ctx context.Context, t0 time.Time) {
	type step struct {
		at     time.Duration
		index  int
		revert bool
	}
	var steps []step
	for i, f := range p.faults {
		steps = append(steps, step{f.At.D(), i, false})
		if f.For.D() > 0 && f.At.D()+f.For.D() < p.duration {
			steps = append(steps, step{f.At.D() + f.For.D(), i, true})
		}
	}
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].at < steps[j].at })
	// A revert waits for its fault's apply, which may still be running.
	applied := make([]chan struct{}, len(p.faults))
	for i := range applied {
		applied[i] = make(chan struct{})
	}
	p.wg.Go(func() {
		for _, s := range steps {
			if err := clock.Sleep(ctx, p.clock, t0.Add(s.at).Sub(p.clock.Now())); err != nil {
				return
			}
			if s.revert {
				p.wg.Go(func() {
					<-applied[s.index]
					p.revert(s.index, p.since(t0))
				})
				continue
			}
			// Apply in the background: stopping or starting servers takes
			// time that must not delay the next step.
			p.wg.Go(func() {
				defer close(applied[s.index])
				p.apply(ctx, s.index, t0)
			})
		}
	})
}

// movesMeasured returns what the applied moves measured, in plan order.
func (p *plan) movesMeasured() []summary.Move {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []summary.Move
	for i := range p.faults {
		if m, ok := p.moves[i]; ok {
			out = append(out, m)
		}
	}
	return out
}

func (p *plan) apply(ctx context.Context, i int, t0 time.Time) {
	f := p.faults[i]
	at := p.since(t0)
	if f.Kind == scenario.KindMove {
		p.move(ctx, i, at, t0)
		return
	}
	undo, what, err := p.inject(ctx, f)
	if err != nil {
		p.event(p.since(t0), fmt.Sprintf("fault %s on %s failed: %v", f.Kind, f.Provider, err))
		if ctx.Err() == nil { // else the plan was stopped: the run is over
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Errorf("fault %s on %s at %v: %w", f.Kind, f.Provider, f.At.D(), err))
			p.mu.Unlock()
		}
		return
	}
	p.event(at, fmt.Sprintf("fault on: %s %s (took %v)", f.Provider, what, (p.since(t0)-at).Round(time.Millisecond)))
	p.mu.Lock()
	p.pending[i] = undo
	p.mu.Unlock()
}

// move applies move i, which has no undo, and keeps what it measured.
func (p *plan) move(ctx context.Context, i int, at time.Duration, t0 time.Time) {
	f := p.faults[i]
	m, err := p.target.MoveTenant(ctx, f.Provider, f.Group)
	if err != nil {
		p.event(p.since(t0), fmt.Sprintf("fault move on %s failed: %v", f.Provider, err))
		if ctx.Err() == nil {
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Errorf("fault move on %s at %v: %w", f.Provider, f.At.D(), err))
			p.mu.Unlock()
		}
		return
	}
	p.event(at, fmt.Sprintf("fault on: %s move: from group %s (%s) to %s", f.Provider, m.From, m.Server, m.To))
	p.mu.Lock()
	p.moves[i] = summary.Move{Tenant: f.Provider, From: m.From, To: m.To, Server: m.Server, AtS: at.Seconds(),
		RequestS: m.Request.Seconds(), RefusedS: m.Refused.Seconds(), WindowS: m.Window.Seconds()}
	p.mu.Unlock()
}

// revert undoes fault i if it was applied.
func (p *plan) revert(i int, at time.Duration) {
	p.mu.Lock()
	undo := p.pending[i]
	delete(p.pending, i)
	p.mu.Unlock()
	if undo == nil {
		return
	}
	p.event(at, fmt.Sprintf("fault off: %s %s", p.faults[i].Provider, p.faults[i].Kind))
	undo()
}

// err returns the faults that failed to apply so far, joined; nil when
// none did. Call it after finish for the whole run.
func (p *plan) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}

// finish waits for the schedule, then reverts what is still applied
// (faults that last until the end) without reporting it.
func (p *plan) finish() {
	p.wg.Wait()
	p.mu.Lock()
	undo := p.pending
	p.pending = map[int]func(){}
	p.mu.Unlock()
	for _, u := range undo {
		u()
	}
}

// inject applies one fault and returns how to undo it.
func (p *plan) inject(ctx context.Context, f scenario.Fault) (undo func(), what string, err error) {
	t := p.target
	switch f.Kind {
	case scenario.KindDown:
		if err := t.StopServers(f.Provider); err != nil {
			return nil, "", err
		}
		return func() { _ = t.StartServers(context.WithoutCancel(ctx), f.Provider) }, "down: every server stopped", nil
	case scenario.KindKillActive:
		name, err := t.KillActive(ctx, f.Provider)
		if err != nil {
			return nil, "", err
		}
		undo := func() {}
		if f.For.D() > 0 {
			undo = func() { _ = t.StartServer(context.WithoutCancel(ctx), f.Provider, name) }
		}
		return undo, "kill-active: " + name + " killed", nil
	case scenario.KindBlackhole:
		remove, err := t.AddToxics(f.Provider,
			topology.Toxic{Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}},
			topology.Toxic{Type: "timeout", Stream: "downstream", Attributes: map[string]any{"timeout": 0}})
		return remove, "blackhole: timeout toxic (0 = hang) on every link", err
	case scenario.KindSlow:
		remove, err := t.AddToxics(f.Provider, topology.Toxic{Type: "latency", Attributes: map[string]any{
			"latency": f.Latency.D().Milliseconds(), "jitter": f.Jitter.D().Milliseconds()}})
		return remove, fmt.Sprintf("slow: latency toxic %v ± %v", f.Latency.D(), f.Jitter.D()), err
	case scenario.KindBrownout:
		if err := t.SetBrownout(f.Provider, f.Share); err != nil {
			return nil, "", err
		}
		return func() { _ = t.SetBrownout(f.Provider, 0) }, fmt.Sprintf("brownout: %.0f%% of calls UNAVAILABLE", f.Share*100), nil
	case scenario.KindToxic:
		var tx topology.Toxic
		if err := json.Unmarshal(f.Toxic, &tx); err != nil {
			return nil, "", err
		}
		remove, err := t.AddToxics(f.Provider, tx)
		return remove, "toxic: " + tx.Type, err
	}
	return nil, "", fmt.Errorf("unknown fault kind %q", f.Kind)
}
