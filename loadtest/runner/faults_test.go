package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/topology"
)

// fakeFaults is a Faults whose StopServers and StartServers are function
// fields (a nil StartServers succeeds); the other faults succeed and do
// nothing.
type fakeFaults struct {
	stopServers  func(provider string) error
	startServers func(provider string) error
	// move, when set, is what MoveTenant returns.
	move    topology.Move
	moveErr error
}

var _ Faults = (*fakeFaults)(nil)

func (f *fakeFaults) StopServers(provider string) error { return f.stopServers(provider) }
func (f *fakeFaults) StartServers(_ context.Context, provider string) error {
	if f.startServers == nil {
		return nil
	}
	return f.startServers(provider)
}
func (f *fakeFaults) KillActive(context.Context, string) (string, error)  { return "s1", nil }
func (f *fakeFaults) StartServer(context.Context, string, string) error   { return nil }
func (f *fakeFaults) SetBrownout(string, float64) error                   { return nil }
func (f *fakeFaults) AddToxics(string, ...topology.Toxic) (func(), error) { return func() {}, nil }
func (f *fakeFaults) MoveTenant(context.Context, string, string) (topology.Move, error) {
	return f.move, f.moveErr
}

// TestPlanMove: a move applies through MoveTenant, its window in the
// summary is the one it measured (from its start), and what it measured is
// kept; a move that fails is an error and leaves an empty window.
func TestPlanMove(t *testing.T) {
	sc, err := scenario.Parse([]byte(`{"name":"t","rate":1,"duration":"10s","pre_allocated_vus":1,"groups":["default","solo"],
		"providers":[{"name":"noisy"},{"name":"quiet"}],
		"faults":[{"provider":"noisy","kind":"move","at":"0s","group":"solo"}]}`), false)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	moved := topology.Move{Tenant: "noisy", From: "default", To: "solo", Server: "default-s1",
		Request: 200 * time.Millisecond, Refused: 100 * time.Millisecond, Window: 1500 * time.Millisecond}
	var events []string
	p := newPlan(sc, &fakeFaults{move: moved}, func(_ time.Duration, text string) { events = append(events, text) }, clock.Real{})
	p.start(context.Background(), time.Now())
	p.finish()
	if err := p.err(); err != nil {
		t.Fatalf("plan.err() = %v, want nil", err)
	}
	if len(events) != 1 || !strings.HasPrefix(events[0], "fault on: noisy move: from group default (default-s1) to solo") {
		t.Errorf("events = %q, want the move's", events)
	}
	ms := p.movesMeasured()
	if len(ms) != 1 || ms[0].WindowS != 1.5 || ms[0].RefusedS != 0.1 || ms[0].RequestS != 0.2 || ms[0].To != "solo" {
		t.Errorf("movesMeasured() = %+v, want the move's figures", ms)
	}
	if w := p.windows(); len(w) != 1 || w[0].Kind != scenario.KindMove || w[0].StartS != 0 || w[0].EndS != 1.5 {
		t.Errorf("windows() = %+v, want the move's measured window 0s → 1.5s", w)
	}

	refused := errors.New("refused")
	p = newPlan(sc, &fakeFaults{moveErr: refused}, func(time.Duration, string) {}, clock.Real{})
	p.start(context.Background(), time.Now())
	p.finish()
	if err := p.err(); !errors.Is(err, refused) || !strings.Contains(err.Error(), "fault move on noisy") {
		t.Errorf("plan.err() = %v, want one wrapping %v naming the move", err, refused)
	}
	if ms := p.movesMeasured(); len(ms) != 0 {
		t.Errorf("movesMeasured() = %+v after a failed move, want none", ms)
	}
	if w := p.windows(); len(w) != 1 || w[0].EndS != w[0].StartS {
		t.Errorf("windows() = %+v after a failed move, want an empty window", w)
	}
}

// TestPlanReportsFailedFault: a fault that fails to apply is an event and
// plan.err names it; the one that applies is a "fault on" event.
func TestPlanReportsFailedFault(t *testing.T) {
	sc, err := scenario.Parse([]byte(`{"name":"t","rate":1,"duration":"10s","pre_allocated_vus":1,
		"providers":[{"name":"eu"},{"name":"us"}],
		"faults":[{"provider":"us","kind":"down","at":"0s"},{"provider":"eu","kind":"kill-active","at":"0s"}]}`), false)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	refused := errors.New("refused")
	target := &fakeFaults{stopServers: func(string) error { return refused }}
	var (
		mu     sync.Mutex
		events []string
	)
	p := newPlan(sc, target, func(_ time.Duration, text string) {
		mu.Lock()
		events = append(events, text)
		mu.Unlock()
	}, clock.Real{})
	p.start(context.Background(), time.Now())
	p.finish() // waits for both applies: both are due at once

	err = p.err()
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "fault down on us") {
		t.Errorf("plan.err() = %v, want one wrapping %v that names fault down on us", err, refused)
	}
	joined := strings.Join(events, "\n")
	for _, want := range []string{"fault down on us failed: refused", "fault on: eu kill-active: s1 killed"} {
		if !strings.Contains(joined, want) {
			t.Errorf("plan events = %q, want one with %q", events, want)
		}
	}
}

// TestPlanRunsOnItsClock: on a fake clock, a fault is applied when the
// clock reaches its start and reverted when it reaches its end, not
// before, and its events carry those times.
func TestPlanRunsOnItsClock(t *testing.T) {
	sc, err := scenario.Parse([]byte(`{"name":"t","rate":1,"duration":"10s","pre_allocated_vus":1,
		"providers":[{"name":"eu"},{"name":"us"}],
		"faults":[{"provider":"us","kind":"down","at":"2s","for":"3s"}]}`), false)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	stopped, started := make(chan string, 1), make(chan string, 1)
	target := &fakeFaults{
		stopServers:  func(p string) error { stopped <- p; return nil },
		startServers: func(p string) error { started <- p; return nil },
	}
	type event struct {
		at   time.Duration
		text string
	}
	events := make(chan event, 4)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := clock.NewFake(t0)
	p := newPlan(sc, target, func(at time.Duration, text string) { events <- event{at, text} }, fake)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.start(ctx, t0)

	step := func(d time.Duration, done <-chan string, what string, wantAt time.Duration, wantText string) {
		t.Helper()
		if err := fake.Wait(ctx, 1); err != nil {
			t.Fatalf("the plan armed no timer before %s: %v", what, err)
		}
		select {
		case <-done:
			t.Fatalf("%s before the clock reached it", what)
		default:
		}
		fake.Advance(d)
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("no %s once the clock reached it", what)
		}
		select {
		case e := <-events:
			if e.at != wantAt || !strings.HasPrefix(e.text, wantText) {
				t.Errorf("%s: event %q at %v, want %q... at %v", what, e.text, e.at, wantText, wantAt)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no event", what)
		}
	}
	step(2*time.Second, stopped, "the fault", 2*time.Second, "fault on: us down")
	step(3*time.Second, started, "the revert", 5*time.Second, "fault off: us down")
	p.finish()
	if err := p.err(); err != nil {
		t.Errorf("plan.err() = %v, want nil", err)
	}
}
