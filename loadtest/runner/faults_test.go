package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/topology"
)

// fakeFaults is a Faults whose StopServers is a function field; the other
// faults succeed and do nothing.
type fakeFaults struct {
	stopServers func(provider string) error
}

var _ Faults = (*fakeFaults)(nil)

func (f *fakeFaults) StopServers(provider string) error                   { return f.stopServers(provider) }
func (f *fakeFaults) StartServers(context.Context, string) error          { return nil }
func (f *fakeFaults) KillActive(context.Context, string) (string, error)  { return "s1", nil }
func (f *fakeFaults) StartServer(context.Context, string, string) error   { return nil }
func (f *fakeFaults) SetBrownout(string, float64) error                   { return nil }
func (f *fakeFaults) AddToxics(string, ...topology.Toxic) (func(), error) { return func() {}, nil }

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
	})
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
