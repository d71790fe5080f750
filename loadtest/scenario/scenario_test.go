package scenario_test

import (
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/scenarios"
)

// shipped returns the names of the scenario files of loadtest/scenarios.
func shipped(tb testing.TB) []string {
	tb.Helper()
	files, err := fs.Glob(scenarios.FS, "*.json")
	if err != nil || len(files) == 0 {
		tb.Fatalf("scenario files = %v, %v; want some", files, err)
	}
	return files
}

func TestShippedScenariosLoad(t *testing.T) {
	files := shipped(t)
	for _, want := range []string{"baseline", "provider-down", "blackhole", "brownout", "failover", "rebalance"} {
		found := false
		for _, f := range files {
			found = found || f == want+".json"
		}
		if !found {
			t.Errorf("scenario %s.json is missing", want)
		}
	}
	for _, f := range files {
		name := strings.TrimSuffix(f, ".json")
		for _, short := range []bool{false, true} {
			s, err := scenario.Load(scenarios.FS, name, short)
			if err != nil {
				t.Errorf("Load(%s, short=%v) = %v", name, short, err)
				continue
			}
			if s.Name != name {
				t.Errorf("Load(%s).Name = %q, want the file's name", name, s.Name)
			}
			if short && s.Duration.D() > 10*time.Second {
				t.Errorf("Load(%s, short).Duration = %v, want a CI-sized run (<= 10s)", name, s.Duration.D())
			}
			if len(s.ParsedThresholds()) == 0 {
				t.Errorf("Load(%s) has no thresholds", name)
			}
		}
	}
}

func TestShortReplacesFields(t *testing.T) {
	raw := `{"name":"x","rate":10,"duration":"60s","pre_allocated_vus":1,"providers":[{"name":"a"}],
		"faults":[{"provider":"a","kind":"down","at":"10s","for":"40s"}],
		"short":{"duration":"5s","faults":[{"provider":"a","kind":"down","at":"1s","for":"2s"}]}}`
	full, err := scenario.Parse([]byte(raw), false)
	if err != nil {
		t.Fatalf("Parse(full) = %v", err)
	}
	short, err := scenario.Parse([]byte(raw), true)
	if err != nil {
		t.Fatalf("Parse(short) = %v", err)
	}
	if full.Duration.D() != time.Minute || short.Duration.D() != 5*time.Second {
		t.Errorf("durations = %v and %v, want 1m0s and 5s", full.Duration.D(), short.Duration.D())
	}
	if got := short.Faults[0].At.D(); got != time.Second {
		t.Errorf("short fault at = %v, want 1s", got)
	}
	if short.Rate != 10 || !short.IsShort || full.IsShort {
		t.Errorf("short = rate %d IsShort %v, full IsShort %v; want rate kept and only short marked", short.Rate, short.IsShort, full.IsShort)
	}
}

func TestParseRejects(t *testing.T) {
	base := `"rate":10,"duration":"10s","pre_allocated_vus":1,"providers":[{"name":"a"}]`
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field", `{"name":"x",` + base + `,"rat":1}`, "unknown field"},
		{"no rate", `{"name":"x","duration":"10s","pre_allocated_vus":1,"providers":[{"name":"a"}]}`, "rate"},
		{"bad duration", `{"name":"x","rate":1,"duration":"ten","pre_allocated_vus":1,"providers":[{"name":"a"}]}`, "duration"},
		{"max below pre-allocated", `{"name":"x",` + base + `,"max_vus":2,"pre_allocated_vus":3}`, "max_vus"},
		{"fault on unknown provider", `{"name":"x",` + base + `,"faults":[{"provider":"b","kind":"down","at":"1s"}]}`, "faults[0].provider"},
		{"fault after the end", `{"name":"x",` + base + `,"faults":[{"provider":"a","kind":"down","at":"20s"}]}`, "faults[0]"},
		{"unknown kind", `{"name":"x",` + base + `,"faults":[{"provider":"a","kind":"melt","at":"1s"}]}`, "faults[0].kind"},
		{"brownout without share", `{"name":"x",` + base + `,"faults":[{"provider":"a","kind":"brownout","at":"1s"}]}`, "share"},
		{"bad threshold", `{"name":"x",` + base + `,"thresholds":{"http_req_duration":["p95<1"]}}`, "thresholds"},
		{"bad threshold tag", `{"name":"x",` + base + `,"thresholds":{"http_req_duration{provider}":["p(95)<1"]}}`, "tag"},
		{"no short variant", `{"name":"x",` + base + `}`, ""},
		{"one group", `{"name":"x",` + base + `,"groups":["default"]}`, "groups"},
		{"groups not from default", `{"name":"x",` + base + `,"groups":["big","solo"]}`, "groups[0]"},
		{"bad group name", `{"name":"x",` + base + `,"groups":["default","Solo"]}`, "groups[1]"},
		{"duplicate group", `{"name":"x",` + base + `,"groups":["default","default"]}`, "groups[1]"},
		{"move without groups", `{"name":"x",` + base + `,"faults":[{"provider":"a","kind":"move","at":"1s","group":"solo"}]}`, "needs the scenario's groups"},
		{"move to an unknown group", `{"name":"x",` + base + `,"groups":["default","solo"],"faults":[{"provider":"a","kind":"move","at":"1s","group":"big"}]}`, "faults[0].group"},
		{"move with for", `{"name":"x",` + base + `,"groups":["default","solo"],"faults":[{"provider":"a","kind":"move","at":"1s","for":"2s","group":"solo"}]}`, "faults[0].for"},
		{"other fault with groups", `{"name":"x",` + base + `,"groups":["default","solo"],"faults":[{"provider":"a","kind":"down","at":"1s"}]}`, "only move"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scenario.Parse([]byte(tt.doc), tt.name == "no short variant")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse() = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestMixFollowsWeights(t *testing.T) {
	s := &scenario.Scenario{Providers: []scenario.Provider{{Name: "a", Weight: 2}, {Name: "b", Weight: 1}}}
	if got, want := s.Mix(), []string{"a", "b", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Mix() = %v, want %v", got, want)
	}
}

func TestFailureReportShare(t *testing.T) {
	s := &scenario.Scenario{Request: scenario.Request{FailureShare: 0.25}}
	n := 0
	for i := int64(0); i < 1000; i++ {
		if s.FailureReport(i) {
			n++
		}
	}
	if n != 250 {
		t.Errorf("FailureReport over 1000 iterations = %d failures, want 250", n)
	}
}

func TestThresholdParsing(t *testing.T) {
	s, err := scenario.Parse([]byte(`{"name":"x","rate":1,"duration":"1s","pre_allocated_vus":1,"providers":[{"name":"eu"}],
		"thresholds":{"http_req_duration{provider:eu,name:acquire}":["p(99.9)<=250"],"dropped_iterations":["count==0"]}}`), false)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	got := s.ParsedThresholds()
	if len(got) != 2 {
		t.Fatalf("ParsedThresholds() = %d thresholds, want 2", len(got))
	}
	d, p := got[0], got[1]
	if d.Metric != "dropped_iterations" || d.Agg != "count" || d.Op != "==" || d.Value != 0 {
		t.Errorf("threshold 0 = %+v, want dropped_iterations count == 0", d)
	}
	if p.Metric != "http_req_duration" || p.Agg != "p" || p.P != 99.9 || p.Op != "<=" || p.Value != 250 ||
		!reflect.DeepEqual(p.Tags, map[string]string{"provider": "eu", "name": "acquire"}) {
		t.Errorf("threshold 1 = %+v, want http_req_duration{provider:eu,name:acquire} p(99.9) <= 250", p)
	}
	if !p.Holds(250) || p.Holds(250.1) {
		t.Errorf("Holds(250), Holds(250.1) = %v, %v; want true, false", p.Holds(250), p.Holds(250.1))
	}
}

// TestShortVariantsShowTheRecovery: in every short (CI) variant, a fault
// that can open the sidecar's breaker for its provider ends early enough
// that the breaker, open at the fault's end at worst, lets its probes
// through (after breaker.open_timeout, from the scenario's sidecar
// settings or the sidecar's default) at least a second before the run
// ends: the run's end shows the provider recovered, not still failing
// fast. A short variant scales its policies' timeouts with its duration.
func TestShortVariantsShowTheRecovery(t *testing.T) {
	const shown = time.Second
	files, err := fs.Glob(scenarios.FS, "*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("scenario files = %v, %v; want some", files, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(f, ".json")
		t.Run(name, func(t *testing.T) {
			s, err := scenario.Load(scenarios.FS, name, true)
			if err != nil {
				t.Fatal(err)
			}
			for i, fault := range s.Faults {
				end := fault.End(s.Duration.D())
				if fault.For.D() == 0 || end >= s.Duration.D() {
					continue // lasts to the end: no recovery to show
				}
				p := sidecarPolicy(t, s, fault.Provider)
				if !opensBreaker(fault, p) {
					continue
				}
				if probe := end + p.Breaker.OpenTimeout; probe+shown > s.Duration.D() {
					t.Errorf("short %s: faults[%d] (%s on %s) ends at %v and breaker.open_timeout is %v: the breaker may stay open until %v, less than %v before the run's end (%v); scale open_timeout in the short variant's sidecar settings",
						name, i, fault.Kind, fault.Provider, end, p.Breaker.OpenTimeout, probe, shown, s.Duration.D())
				}
			}
		})
	}
}

// sidecarPolicy returns the provider's sidecar configuration as the
// runner generates it: the scenario's settings over the sidecar's
// defaults.
func sidecarPolicy(t *testing.T, s *scenario.Scenario, provider string) config.Provider {
	t.Helper()
	raw, err := yaml.Marshal(s.Sidecar[provider])
	if err != nil {
		t.Fatal(err)
	}
	var p config.Provider
	if err := yaml.Unmarshal(raw, &p); err != nil {
		t.Fatalf("sidecar.%s of %s: %v", provider, s.Name, err)
	}
	return config.Config{Providers: map[string]config.Provider{provider: p}}.WithDefaults().Providers[provider]
}

// opensBreaker reports whether the fault can fail enough of the
// provider's calls to open its breaker.
func opensBreaker(f scenario.Fault, p config.Provider) bool {
	switch f.Kind {
	case scenario.KindDown, scenario.KindBlackhole, scenario.KindToxic:
		return true
	case scenario.KindBrownout:
		return f.Share >= p.Breaker.FailureRatio
	case scenario.KindSlow:
		return f.Latency.D()+f.Jitter.D() >= p.Timeout
	}
	return false // kill-active: the standby takes over and the retry rides through it
}
