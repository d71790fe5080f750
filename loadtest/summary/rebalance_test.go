package summary

import (
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/loadtest/arrival"
	"github.com/repool/repool/loadtest/scenario"
)

// rebalanceRun builds a summary of a run with a move of noisy (index 0)
// at 4s whose window measured 1s, with quiet (index 1) beside it.
func rebalanceRun(t *testing.T, moves []Move, samples ...Sample) *Summary {
	t.Helper()
	sc, err := scenario.Parse([]byte(`{"name":"rebalance","rate":10,"duration":"10s","pre_allocated_vus":2,
		"groups":["default","solo"],
		"providers":[{"name":"noisy","weight":3},{"name":"quiet"}],
		"faults":[{"provider":"noisy","kind":"move","at":"4s","group":"solo"}]}`), false)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	rec := NewRecorder(sc.Names())
	for _, s := range samples {
		rec.Add(s)
	}
	wins := []Window{{Provider: "noisy", Kind: scenario.KindMove, Start: 4 * time.Second, End: 5 * time.Second, StartS: 4, EndS: 5}}
	return Compute(Input{Mode: "sidecar", Scenario: sc, Recorder: rec, Windows: wins, Moves: moves,
		Stats: arrival.Stats{Iterations: int64(len(samples)), MaxVUs: 2, Elapsed: 10 * time.Second}})
}

var noisyMove = []Move{{Tenant: "noisy", From: "default", To: "solo", Server: "default-s1", AtS: 4, RequestS: 0.2, RefusedS: 0.1, WindowS: 1}}

func TestRebalancePhases(t *testing.T) {
	s := rebalanceRun(t, noisyMove,
		ok(time.Second, 10*time.Millisecond, 0), ok(2*time.Second, 20*time.Millisecond, 0),
		ok(time.Second, 40*time.Millisecond, 1), ok(3*time.Second, 60*time.Millisecond, 1), // quiet, before
		ok(4500*time.Millisecond, 300*time.Millisecond, 0), // noisy, during the window
		ok(4600*time.Millisecond, 30*time.Millisecond, 1),  // quiet, during
		ok(6*time.Second, 5*time.Millisecond, 0),
		ok(7*time.Second, 8*time.Millisecond, 1), failed(8*time.Second, 2*time.Millisecond, 1, ""), // quiet, after
	)
	r := s.Rebalance
	if r == nil {
		t.Fatal("Rebalance = nil, want the move's phases")
	}
	if r.Move != noisyMove[0] {
		t.Errorf("Rebalance.Move = %+v, want %+v", r.Move, noisyMove[0])
	}
	noisy, quiet := r.Providers["noisy"], r.Providers["quiet"]
	if !noisy.Moved || quiet.Moved {
		t.Errorf("Moved = noisy %v, quiet %v; want true, false", noisy.Moved, quiet.Moved)
	}
	for _, c := range []struct {
		name           string
		got            Stats
		requests, errs int64
		maxMS          float64
	}{
		{"noisy before", noisy.Before, 2, 0, 20},
		{"noisy during", noisy.During, 1, 0, 300},
		{"noisy after", noisy.After, 1, 0, 5},
		{"quiet before", quiet.Before, 2, 0, 60},
		{"quiet during", quiet.During, 1, 0, 30},
		{"quiet after", quiet.After, 2, 1, 8},
		{"pooled quiet after", r.Quiet.After, 2, 1, 8},
	} {
		if c.got.Requests != c.requests || c.got.Errors != c.errs || c.got.MaxMS != c.maxMS {
			t.Errorf("%s = %d calls, %d errors, max %v ms; want %d, %d, %v", c.name, c.got.Requests, c.got.Errors, c.got.MaxMS, c.requests, c.errs, c.maxMS)
		}
	}
	// The move is not a degraded-cluster fault: no known_bad or
	// healthy_p95 targets, but the rebalance ones.
	got := map[string]Target{}
	for _, tg := range s.Targets {
		got[tg.Name+"{"+tg.Provider+"}"] = tg
	}
	for _, name := range []string{"known_bad_within_1s{noisy}", "healthy_p95{quiet}"} {
		if _, found := got[name]; found {
			t.Errorf("target %s computed for a move", name)
		}
	}
	want := map[string]bool{"failed_calls{noisy}": true, "failed_calls{quiet}": false, "quiet_p99_after_move{quiet}": true}
	for name, ok := range want {
		tg, found := got[name]
		if !found || tg.OK != ok {
			t.Errorf("target %s = %+v (found %v), want ok %v", name, tg, found, ok)
		}
	}
	if tg := got["failed_calls{quiet}"]; !tg.Short || got["quiet_p99_after_move{quiet}"].Short {
		t.Error("failed_calls must be a short target and quiet_p99_after_move not")
	}
	var b strings.Builder
	s.WriteText(&b)
	for _, want := range []string{"rebalance: noisy moved from group default (default-s1) to solo at 4.0s; move window 1.00s", "noisy (moved) before", "quiet        before"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, b.String())
		}
	}
}

func TestRebalanceQuietP99Target(t *testing.T) {
	tests := []struct {
		name    string
		afterMS time.Duration
		ok      bool
	}{
		{"better", 20, true},
		{"within the bound", 60, true}, // 1.5 × 40 ms
		{"worse", 61, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := rebalanceRun(t, noisyMove, ok(time.Second, 5*time.Millisecond, 0), ok(6*time.Second, 5*time.Millisecond, 0),
				ok(time.Second, 40*time.Millisecond, 1), ok(7*time.Second, tt.afterMS*time.Millisecond, 1))
			for _, tg := range s.Targets {
				if tg.Name == "quiet_p99_after_move" && tg.OK != tt.ok {
					t.Errorf("quiet_p99_after_move = %+v, want ok %v", tg, tt.ok)
				}
			}
		})
	}
}

func TestRebalanceWithoutMove(t *testing.T) {
	// A move that failed to apply measured nothing: no section (the runner
	// reports the failed fault as an error).
	if s := rebalanceRun(t, nil, ok(time.Second, time.Millisecond, 0)); s.Rebalance != nil {
		t.Errorf("Rebalance = %+v, want nil without a measured move", s.Rebalance)
	}
}
