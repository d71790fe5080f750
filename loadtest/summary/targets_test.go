package summary

import (
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/loadtest/arrival"
	"github.com/repool/repool/loadtest/scenario"
)

// TestTargets: each target from a run whose numbers are known. The
// scenario of run: rate 10/s (VU bound 2), us down from 2s to 8s; the run
// had 2 dropped iterations and 3 VUs.
func TestTargets(t *testing.T) {
	ms := time.Millisecond
	target := func(s *Summary, name string) Target {
		t.Helper()
		for _, tg := range s.Targets {
			if tg.Name == name {
				return tg
			}
		}
		t.Fatalf("no target %s in %+v", name, s.Targets)
		return Target{}
	}
	t.Run("met", func(t *testing.T) {
		samples := []Sample{ok(time.Second, 10*ms, 0), ok(1500*ms, 10*ms, 0), ok(3*time.Second, 11*ms, 0), ok(4*time.Second, 12*ms, 0),
			// us: slow failures before it is known bad, then fast ones.
			failed(2*time.Second, time.Second, 1, "timeout"), failed(2500*ms, 2*ms, 1, "bulkhead-full")}
		for i := range 1000 {
			samples = append(samples, failed(2600*ms+time.Duration(i)*ms, ms, 1, "circuit-open"))
		}
		s := run(t, "sidecar", `{}`, samples...)
		if got := s.Providers["us"].ErrorCodes; got["bulkhead_full"] != 1 || got["unavailable"] != 1001 {
			t.Errorf("us error codes = %v, want the bulkhead's rejection apart: 1 bulkhead_full, 1001 unavailable", got)
		}
		for name, want := range map[string]string{"known_bad_within_1s": "0.50s", "fast_fail_once_known_bad": "100.00% of 1001", "healthy_p95": "11.95ms vs 9.97ms (1.20×)"} {
			if got := target(s, name); !got.OK || !strings.HasPrefix(got.Got, strings.Split(want, " ")[0]) {
				t.Errorf("%s = %+v, want met, got %q", name, got, want)
			}
		}
	})
	t.Run("known bad when the answer came, not when the call started", func(t *testing.T) {
		// A call that started at 2.1 s waited to retry and was refused
		// circuit-open at 2.9 s; the calls started in between failed slowly
		// (they waited too) and are not counted as after it.
		samples := []Sample{ok(time.Second, 10*ms, 0), failed(2100*ms, 800*ms, 1, "circuit-open")}
		for i := range 10 {
			samples = append(samples, failed(2200*ms+time.Duration(i)*50*ms, 300*ms, 1, ""))
		}
		for i := range 1000 {
			samples = append(samples, failed(3*time.Second+time.Duration(i)*ms, ms, 1, "circuit-open"))
		}
		s := run(t, "sidecar", `{}`, samples...)
		if got := target(s, "known_bad_within_1s"); !got.OK || got.Got != "0.90s" {
			t.Errorf("known_bad_within_1s = %+v, want met with 0.90s (2.9 s, the answer, minus 2 s)", got)
		}
		if got := target(s, "fast_fail_once_known_bad"); !got.OK || got.Got != "100.00% of 1000" {
			t.Errorf("fast_fail_once_known_bad = %+v, want the 1000 calls started from 2.9 s, all fast", got)
		}
		if us := s.Providers["us"]; us.BreakerOpenedS == nil || *us.BreakerOpenedS != 2.9 {
			t.Errorf("breaker_opened_s = %v, want 2.9 (the answer)", us.BreakerOpenedS)
		}
	})
	t.Run("missed", func(t *testing.T) {
		samples := []Sample{ok(time.Second, 10*ms, 0), ok(3*time.Second, 30*ms, 0),
			failed(2*time.Second, time.Second, 1, "timeout"), failed(3500*ms, 2*ms, 1, "circuit-open"),
			failed(3600*ms, 500*ms, 1, "")}
		for i := range 999 {
			samples = append(samples, failed(3700*ms+time.Duration(i)*ms, ms, 1, "circuit-open"))
		}
		s := run(t, "sidecar", `{}`, samples...)
		for name, want := range map[string]string{
			"known_bad_within_1s": "1.50s", "fast_fail_once_known_bad": "99.90% of 1000", "healthy_p95": "30.00ms vs 10.00ms (3.00×)",
			"dropped_iterations": "2", "max_vus": "3"} {
			got := target(s, name)
			if name == "fast_fail_once_known_bad" {
				// 999 of 1000 is exactly the target: met.
				if !got.OK || got.Got != want {
					t.Errorf("%s = %+v, want met with %q", name, got, want)
				}
				continue
			}
			if got.OK || got.Got != want {
				t.Errorf("%s = %+v, want missed with %q", name, got, want)
			}
		}
	})
	t.Run("failures that never failed fast", func(t *testing.T) {
		s := run(t, "sidecar", `{}`, failed(3*time.Second, 900*ms, 1, "upstream"))
		if got := target(s, "known_bad_within_1s"); got.OK || !strings.Contains(got.Got, "none failed fast") {
			t.Errorf("known_bad_within_1s = %+v, want missed: none failed fast", got)
		}
	})
}

func TestSuccessRateTarget(t *testing.T) {
	naive := run(t, "naive", `{}`, ok(3*time.Second, time.Millisecond, 1), failed(4*time.Second, time.Millisecond, 1, ""))
	better := run(t, "sidecar", `{}`, ok(3*time.Second, time.Millisecond, 1), ok(4*time.Second, time.Millisecond, 1))
	worse := run(t, "sidecar", `{}`, failed(3*time.Second, time.Millisecond, 1, ""), failed(4*time.Second, time.Millisecond, 1, ""))
	if got := SuccessRateTarget(naive, better, "us"); got == nil || !got.OK || got.Got != "100.00% vs 50.00%" {
		t.Errorf("better sidecar = %+v, want met, 100%% vs 50%%", got)
	}
	if got := SuccessRateTarget(naive, worse, "us"); got == nil || got.OK {
		t.Errorf("worse sidecar = %+v, want missed", got)
	}
	// us is down in run's scenario: judged by its fast failures, not by
	// its success rate.
	if c := Compare(naive, worse); len(c.Targets) != 0 {
		t.Errorf("Compare().Targets of an outage = %+v, want none", c.Targets)
	}
	for _, s := range []*Summary{naive, worse} {
		for i := range s.Faults {
			s.Faults[i].Kind = "brownout"
		}
	}
	if c := Compare(naive, worse); len(c.Targets) != 1 || c.Targets[0].OK {
		t.Errorf("Compare().Targets of a brownout = %+v, want the missed success-rate target", c.Targets)
	}
}

// TestBrownoutTargets: a brownout (a provider that answers most calls) is
// not one to give up on, so its failed calls are not held to the known-bad
// targets; the healthy provider's and the run's targets still apply.
func TestBrownoutTargets(t *testing.T) {
	sc, err := scenario.Parse([]byte(`{"name":"t","rate":10,"duration":"10s","pre_allocated_vus":2,
		"providers":[{"name":"eu"},{"name":"us"}],
		"faults":[{"provider":"us","kind":"brownout","share":0.3,"at":"2s","for":"6s"}]}`), false)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	rec := NewRecorder(sc.Names())
	rec.Add(ok(time.Second, 10*time.Millisecond, 0))
	rec.Add(ok(3*time.Second, 10*time.Millisecond, 0))
	rec.Add(failed(3*time.Second, 400*time.Millisecond, 1, ""))
	rec.Add(ok(4*time.Second, 30*time.Millisecond, 1))
	s := Compute(Input{Mode: "sidecar", Scenario: sc, Recorder: rec, Windows: newPlanWindows(sc),
		Stats: arrival.Stats{Iterations: 4, Elapsed: 10 * time.Second}})
	names := map[string]bool{}
	for _, tg := range s.Targets {
		names[tg.Name] = true
	}
	if names["known_bad_within_1s"] || names["fast_fail_once_known_bad"] {
		t.Errorf("targets %+v: a brownout's failed calls held to the known-bad targets", s.Targets)
	}
	if !names["healthy_p95"] || !names["dropped_iterations"] {
		t.Errorf("targets %+v: want healthy_p95 and dropped_iterations still", s.Targets)
	}
}
