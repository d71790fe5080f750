package jobs

import (
	"bytes"
	"flag"
	"reflect"
	"strings"
	"testing"
)

// TestRealisticJobTargets holds the pool to the realistic job's targets on
// seeds 1 to 5 (simulated time; deterministic): under either objective,
// each seed's success rate within 3 points of the oracle's, at most 10%
// of failures followed by a job on the same resource, and the resource
// that turned bad left within 10 of its jobs; over the seeds, the
// success_per_time objective at least 25% more successful jobs per second
// than the success objective, at a success rate within 1 point of it.
func TestRealisticJobTargets(t *testing.T) {
	const seeds = 5
	for seed := uint64(1); seed <= seeds; seed++ {
		rep, err := Simulate(Config{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		oracle := rep.ByName("oracle")
		for _, name := range []string{"repool success", "repool success_per_time"} {
			r := rep.ByName(name)
			if r.Jobs != 3000 {
				t.Fatalf("seed %d %s: %d jobs, want 3000", seed, name, r.Jobs)
			}
			if d := oracle.SuccessRate() - r.SuccessRate(); d > 3 {
				t.Errorf("seed %d %s: success %.2f%%, %.2f points below the oracle's %.2f%%, want at most 3", seed, name, r.SuccessRate(), d, oracle.SuccessRate())
			}
			if got := r.SameAfterFailureRate(); got > 10 {
				t.Errorf("seed %d %s: %.1f%% of failures followed by the same resource, want at most 10%%", seed, name, got)
			}
			if r.TurnedBadBeforeLeft > 10 {
				t.Errorf("seed %d %s: the resource that turned bad got %d jobs before it was left, want at most 10", seed, name, r.TurnedBadBeforeLeft)
			}
		}
		// Round robin and random never leave it: the measure tells them apart.
		if rr := rep.ByName("round robin"); rr.TurnedBadBeforeLeft < 50 {
			t.Errorf("seed %d round robin: turned-bad jobs before left %d, want the measure to see it kept", seed, rr.TurnedBadBeforeLeft)
		}
	}
	ms, err := Means(Config{}, seeds)
	if err != nil {
		t.Fatal(err)
	}
	var succ, perTime Mean
	for _, m := range ms {
		switch m.Name {
		case "repool success":
			succ = m
		case "repool success_per_time":
			perTime = m
		}
	}
	if gain := perTime.SuccessesPS / succ.SuccessesPS; gain < 1.25 {
		t.Errorf("success_per_time: %.1f successful jobs/s against %.1f under success (×%.2f), want at least ×1.25", perTime.SuccessesPS, succ.SuccessesPS, gain)
	}
	if d := succ.Success - perTime.Success; d > 1 || d < -1 {
		t.Errorf("success rate %.2f%% under success_per_time against %.2f%% under success, want within 1 point", perTime.Success, succ.Success)
	}
}

func TestSimulateIsDeterministic(t *testing.T) {
	a, err := Simulate(Config{Seed: 3, Jobs: 600})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Simulate(Config{Seed: 3, Jobs: 600})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs of seed 3 differ")
	}
	c, _ := Simulate(Config{Seed: 4, Jobs: 600})
	if reflect.DeepEqual(a.Results, c.Results) {
		t.Fatal("seeds 3 and 4 gave the same results")
	}
}

func TestBadConfigIsRefused(t *testing.T) {
	for name, c := range map[string]Config{
		"too many workers": {Workers: 1000},
		"switch past end":  {Jobs: 10, SwitchAt: 11},
		"bad p":            {Resources: []Resource{{Name: "x", P: 2, Latency: 1, Capacity: 1}}},
	} {
		if _, err := Simulate(c); err == nil {
			t.Errorf("%s: Simulate accepted %+v", name, c)
		}
	}
	if _, _, err := ParseFlags(flag.NewFlagSet("jobs", flag.ContinueOnError), []string{"-seeds", "0"}); err == nil {
		t.Error("ParseFlags(-seeds 0) accepted it")
	}
}

func TestRunWritesTheTable(t *testing.T) {
	var b bytes.Buffer
	if err := Run(Config{Jobs: 600}, 1, &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"oracle", "repool success_per_time", "round robin", "random", "successes/s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Run's output lacks %q:\n%s", want, b.String())
		}
	}
}
