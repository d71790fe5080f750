package summary

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/loadtest/arrival"
	"github.com/repool/repool/loadtest/scenario"
)

// run builds a summary from samples of providers eu (index 0) and us (1).
func run(t *testing.T, mode string, thresholds string, samples ...Sample) *Summary {
	t.Helper()
	sc, err := scenario.Parse([]byte(`{"name":"t","rate":10,"duration":"10s","pre_allocated_vus":2,"max_vus":9,
		"providers":[{"name":"eu"},{"name":"us"}],
		"faults":[{"provider":"us","kind":"down","at":"2s","for":"6s"}],
		"thresholds":`+thresholds+`}`), false)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	rec := NewRecorder(sc.Names())
	for _, s := range samples {
		rec.Add(s)
	}
	rec.AddIteration(0, 3*time.Millisecond)
	return Compute(Input{Mode: mode, Scenario: sc, Recorder: rec, Windows: newPlanWindows(sc),
		Stats: arrival.Stats{Iterations: 1, Dropped: 2, MaxVUs: 3, PeakActive: 3, Elapsed: 10 * time.Second}})
}

func newPlanWindows(sc *scenario.Scenario) []Window {
	var out []Window
	for _, f := range sc.Faults {
		end := f.End(sc.Duration.D())
		out = append(out, Window{Provider: f.Provider, Kind: f.Kind, Start: f.At.D(), End: end, StartS: f.At.D().Seconds(), EndS: end.Seconds()})
	}
	return out
}

func ok(start, dur time.Duration, provider int) Sample {
	return Sample{Start: start, Dur: dur, Provider: provider, Status: 200}
}

func failed(start, dur time.Duration, provider int, fastFail string) Sample {
	return Sample{Start: start, Dur: dur, Provider: provider, Failed: true, Status: 503, Code: "unavailable", FastFail: fastFail}
}

func TestComputeProviderStats(t *testing.T) {
	s := run(t, "sidecar", `{}`,
		ok(time.Second, 2*time.Millisecond, 0), ok(time.Second, 4*time.Millisecond, 0),
		ok(time.Second, time.Millisecond, 1),
		failed(3*time.Second, 300*time.Millisecond, 1, ""),
		failed(4*time.Second, time.Millisecond, 1, "circuit-open"),
		failed(5*time.Second, 2*time.Millisecond, 1, "circuit-open"),
		failed(6*time.Second, 50*time.Millisecond, 1, "circuit-open"),
	)
	us := s.Providers["us"]
	if us.Requests != 5 || us.Errors != 4 || us.ErrorRate != 0.8 {
		t.Errorf("us = %d requests, %d errors, rate %v; want 5, 4, 0.8", us.Requests, us.Errors, us.ErrorRate)
	}
	if us.FastFailWithin10ms != 0.5 || us.FastFailWithin100ms != 0.75 || us.FastFailMarked != 0.75 {
		t.Errorf("us fast-fail shares = %v, %v, %v; want 0.5, 0.75, 0.75 of failed calls", us.FastFailWithin10ms, us.FastFailWithin100ms, us.FastFailMarked)
	}
	if us.Fault == nil || us.Fault.Requests != 4 {
		t.Fatalf("us.Fault = %+v, want the 4 requests started in 2s..8s", us.Fault)
	}
	// The first circuit-open answer came at 4.001 s: the calls that
	// started from then on are the 5 s and 6 s ones.
	if us.BreakerOpenedS == nil || *us.BreakerOpenedS != 4.001 || us.AfterOpenRequests != 2 {
		t.Errorf("us breaker = opened %v with %d requests after, want 4.001s and 2", deref(us.BreakerOpenedS), us.AfterOpenRequests)
	}
	if eu := s.Providers["eu"]; eu.AvgMS != 3 || eu.Errors != 0 || eu.Fault != nil {
		t.Errorf("eu = %+v, want avg 3ms, no errors, no fault stats", eu)
	}
	if s.Requests != 7 || s.DroppedIterations != 2 || s.MaxVUs != 3 {
		t.Errorf("summary = %d requests, %d dropped, %d max VUs; want 7, 2, 3", s.Requests, s.DroppedIterations, s.MaxVUs)
	}
}

func TestThresholds(t *testing.T) {
	s := run(t, "sidecar", `{
		"dropped_iterations": ["count==0"],
		"vus_max": ["value<=5"],
		"http_req_failed{provider:eu}": ["rate<0.01"],
		"http_req_duration{provider:eu}": ["p(50)<3", "max<10"],
		"fast_fail_within_10ms{provider:us}": ["rate>0.9"],
		"checks": ["rate>0.5"],
		"http_req_duration{region:x}": ["avg<1"]
	}`,
		ok(time.Second, 2*time.Millisecond, 0), ok(time.Second, 4*time.Millisecond, 0),
		failed(3*time.Second, time.Millisecond, 1, "circuit-open"),
	)
	want := map[string]bool{
		"checks rate>0.5":                             true,
		"dropped_iterations count==0":                 false,
		"fast_fail_within_10ms{provider:us} rate>0.9": true,
		"http_req_duration{provider:eu} max<10":       true,
		"http_req_duration{provider:eu} p(50)<3":      false,
		"http_req_duration{region:x} avg<1":           false,
		"http_req_failed{provider:eu} rate<0.01":      true,
		"vus_max value<=5":                            true,
	}
	if len(s.Thresholds) != len(want) {
		t.Fatalf("Thresholds = %d results, want %d", len(s.Thresholds), len(want))
	}
	for _, r := range s.Thresholds {
		key := r.Metric + " " + r.Expr
		if w, found := want[key]; !found || r.OK != w {
			t.Errorf("threshold %s = ok %v (value %v, error %q), want ok %v", key, r.OK, r.Value, r.Error, w)
		}
	}
	if s.ThresholdsOK {
		t.Error("ThresholdsOK = true with crossed thresholds, want false")
	}
}

func TestPercentileInterpolatesAsK6(t *testing.T) {
	v := []float64{1, 2, 3, 4}
	for _, tt := range []struct{ p, want float64 }{{0, 1}, {50, 2.5}, {90, 3.7}, {100, 4}} {
		if got := Percentile(v, tt.p); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", v, tt.p, got, tt.want)
		}
	}
}

func TestJSONAndTextHaveTheRequiredFields(t *testing.T) {
	s := run(t, "naive", `{"dropped_iterations": ["count==0"]}`,
		ok(time.Second, 2*time.Millisecond, 0), failed(3*time.Second, time.Second, 1, ""))
	var buf bytes.Buffer
	if err := WriteJSON(&buf, s); err != nil {
		t.Fatalf("WriteJSON() = %v", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("JSON summary does not decode: %v", err)
	}
	for _, k := range []string{"mode", "scenario", "iterations", "dropped_iterations", "max_vus", "providers", "thresholds"} {
		if _, found := doc[k]; !found {
			t.Errorf("JSON summary lacks %q", k)
		}
	}
	us := doc["providers"].(map[string]any)["us"].(map[string]any)
	for _, k := range []string{"requests", "errors", "avg_ms", "p95_ms", "p99_ms", "fast_fail_within_10ms", "fast_fail_within_100ms"} {
		if _, found := us[k]; !found {
			t.Errorf("JSON summary lacks providers.us.%s", k)
		}
	}
	var text strings.Builder
	s.WriteText(&text)
	for _, want := range []string{"http_req_duration", "dropped_iterations", "vus_max", "fast_fail_within_10ms{provider:us}", "thresholds"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, text.String())
		}
	}
}

func TestCompare(t *testing.T) {
	naive := run(t, "naive", `{}`, failed(3*time.Second, time.Second, 1, ""), ok(time.Second, 2*time.Millisecond, 0))
	sidecar := run(t, "sidecar", `{}`, failed(3*time.Second, 10*time.Millisecond, 1, "circuit-open"), ok(time.Second, 2*time.Millisecond, 0))
	c := Compare(naive, sidecar)
	if c.Provider != "us" || c.Rows[0].Name != "avg, us in fault window" || c.Rows[0].Ratio == nil || *c.Rows[0].Ratio != 100 {
		t.Errorf("Compare() first row = %+v (provider %q), want avg in us's fault window with ratio 100", c.Rows[0], c.Provider)
	}
	sc := &scenario.Scenario{Name: "t", Naive: scenario.Naive{AttemptsPerHost: 2, RetryDelay: scenario.Duration(50 * time.Millisecond)}}
	var text strings.Builder
	c.WriteText(&text, sc)
	for _, want := range []string{"naive/sidecar", "retries 2×50ms per host"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("Comparison.WriteText(%+v) lacks %q:\n%s", sc.Naive, want, text.String())
		}
	}
}
