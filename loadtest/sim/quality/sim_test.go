package quality

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/loadtest/sim/world"
)

// smallConfig is a world small enough for -race: 50 resources, 15 minutes
// of simulated requests.
func smallConfig(seed uint64) Config {
	return Config{
		World:    world.Config{Seed: seed, Resources: 50, Contexts: 2},
		Steps:    9000,
		InFlight: 6,
	}
}

func simulate(t *testing.T, cfg Config) Report {
	t.Helper()
	rep, err := Simulate(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Simulate(%+v) = %v", cfg, err)
	}
	return rep
}

func TestSimulateSameSeedSameResults(t *testing.T) {
	cfg := smallConfig(7)
	serial := cfg
	serial.Parallel = 1
	a, b := simulate(t, cfg), simulate(t, serial)
	clearElapsed(a.Results)
	clearElapsed(b.Results)
	if !reflect.DeepEqual(a.Results, b.Results) {
		t.Errorf("Simulate twice with seed 7 = different results:\n%+v\n%+v", a.Results, b.Results)
	}
	other := cfg
	other.World.Seed = 8
	c := simulate(t, other)
	clearElapsed(c.Results)
	if reflect.DeepEqual(a.Results, c.Results) {
		t.Errorf("Simulate with seeds 7 and 8 = identical results %+v, want different worlds", a.Results)
	}
}

// clearElapsed zeroes the wall times, the one nondeterministic field.
func clearElapsed(rs []Result) {
	for i := range rs {
		rs[i].Elapsed = 0
	}
}

func TestSimulateStructure(t *testing.T) {
	rep := simulate(t, smallConfig(3))
	oracle := rep.byName("oracle")
	if oracle.Name == "" {
		t.Fatalf("Simulate().Results has no oracle: %+v", rep.Results)
	}
	wantNames := []string{"oracle", "ours", "exact", "uniform", "round-robin", "fail-counter(3)", "error-score(3)"}
	var names []string
	for _, res := range rep.Results {
		names = append(names, res.Name)
	}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("Simulate() strategies = %v, want %v", names, wantNames)
	}
	for _, res := range rep.Results {
		if res.Requests != rep.Config.Steps || res.Acquired+res.Exhausted != res.Requests {
			t.Errorf("%s: requests %d, acquired %d, exhausted %d; want %d requests, each acquired or exhausted",
				res.Name, res.Requests, res.Acquired, res.Exhausted, rep.Config.Steps)
		}
		for what, v := range map[string]float64{"success": res.SuccessRate(), "E[p]": res.ExpectedRate(), "late": res.LateRate()} {
			if v < 0 || v > 100 {
				t.Errorf("%s: %s rate = %.2f, want within [0, 100]", res.Name, what, v)
			}
		}
		// The oracle leases the best free resource every time; its expected
		// rate beats any learner's by a wide margin, its realised rate too.
		if res.ExpectedRate() > oracle.ExpectedRate() || res.SuccessRate() > oracle.SuccessRate() {
			t.Errorf("%s: success %.2f%%, E[p] %.2f%%; oracle: %.2f%%, %.2f%%; want the oracle at least as good",
				res.Name, res.SuccessRate(), res.ExpectedRate(), oracle.SuccessRate(), oracle.ExpectedRate())
		}
	}
	if c := rep.byName("ours").Pool; c == nil || c.Acquired != uint64(rep.byName("ours").Acquired) || c.Cells == 0 {
		t.Errorf("ours pool counters = %+v, want Acquired = %d and some cells", c, rep.byName("ours").Acquired)
	}
}

// TestOursBeatsUniform checks the pool learns on a world with a wide spread
// of success probabilities and no drift or breakage to blur it.
func TestOursBeatsUniform(t *testing.T) {
	cfg := smallConfig(11)
	cfg.World.BaseAlpha, cfg.World.BaseBeta = 1, 1
	cfg.World.DriftSD = -1
	cfg.World.BreakEvery = -1
	rep := simulate(t, cfg)
	ours, uniform := rep.byName("ours").SuccessRate(), rep.byName("uniform").SuccessRate()
	const margin = 25
	t.Logf("seed %d: ours %.2f%%, exact %.2f%%, uniform %.2f%%, oracle %.2f%%", cfg.World.Seed, ours, rep.byName("exact").SuccessRate(), uniform, rep.byName("oracle").SuccessRate())
	if ours < uniform+margin {
		t.Errorf("ours success = %.2f%%, uniform = %.2f%%; want ours at least %d points above", ours, uniform, margin)
	}
}

func TestRunOutput(t *testing.T) {
	cfg := smallConfig(5)
	cfg.Steps = 2000
	var buf bytes.Buffer
	if err := Run(context.Background(), cfg, &buf); err != nil {
		t.Fatalf("Run() = %v", err)
	}
	out := strings.TrimRight(buf.String(), "\n")
	lines := strings.Split(out, "\n")
	last := lines[len(lines)-1]
	rep := simulate(t, cfg)
	if want := rep.SimLine(); last != want {
		t.Errorf("Run() last line = %q, want %q", last, want)
	}
	for _, want := range []string{"drift", "breakage", "recovery", "always bad", "oracle", "elapsed"} {
		if !strings.Contains(out, want) {
			t.Errorf("Run() output lacks %q:\n%s", want, out)
		}
	}
}

// TestSimulateLongLeases: leases that stay out longer than a minute (70
// in flight, a second apart) must not expire before ours releases them.
func TestSimulateLongLeases(t *testing.T) {
	cfg := Config{World: world.Config{Seed: 1, Resources: 100, Step: time.Second}, Steps: 300, InFlight: 70}
	rep := simulate(t, cfg)
	if got := rep.byName("ours").Pool.Expired; got != 0 {
		t.Errorf("ours expired %d leases, want 0", got)
	}
}

func TestFirstCause(t *testing.T) {
	boom := errors.New("boom")
	canceled := fmt.Errorf("uniform: %w", context.Canceled)
	tests := []struct {
		name string
		errs []error
		want error
	}{
		{"none", []error{nil, nil}, nil},
		{"cause after cancellations", []error{nil, canceled, boom, canceled}, boom},
		{"only cancellations", []error{canceled, fmt.Errorf("ours: %w", context.Canceled)}, canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstCause(tt.errs); got != tt.want {
				t.Errorf("firstCause(%v) = %v, want %v", tt.errs, got, tt.want)
			}
		})
	}
}

func TestSimulateCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Simulate(ctx, smallConfig(1)); err == nil {
		t.Errorf("Simulate(cancelled context) = nil error, want context.Canceled")
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{name: "defaults", args: nil},
		{name: "seed and size", args: []string{"-seed", "9", "-n", "50", "-steps", "100"}},
		{name: "static world", args: []string{"-drift-sd", "-1", "-break-every", "-1s", "-bad", "-1"}},
		{name: "too many in flight", args: []string{"-n", "10", "-inflight", "11"}, wantErr: true},
		{name: "zero steps", args: []string{"-steps", "-5"}, wantErr: true},
		{name: "tick shorter than step", args: []string{"-step", "2s"}, wantErr: true},
		{name: "leases out over a minute", args: []string{"-n", "100", "-inflight", "70", "-step", "1s"}},
		{name: "leases out beyond the pool's max TTL", args: []string{"-n", "2000", "-inflight", "1801", "-step", "1s"}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("sim", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			_, err := ParseFlags(fs, tt.args)
			if (err != nil) != tt.wantErr {
				t.Errorf("ParseFlags(%q) = %v, want error %v", tt.args, err, tt.wantErr)
			}
		})
	}
}
