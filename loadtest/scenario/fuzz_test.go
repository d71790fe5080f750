package scenario_test

import (
	"encoding/json"
	"io/fs"
	"reflect"
	"testing"

	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/scenarios"
)

// FuzzParse feeds arbitrary documents to Parse, as the full and the short
// variant. A refused document yields no scenario; an accepted one is
// written back as JSON and parses again to the same scenario (parse,
// render, parse), and its request mix follows the weights. No input takes
// longer than testenv.FuzzBound.
func FuzzParse(f *testing.F) {
	for _, name := range shipped(f) {
		raw, err := fs.ReadFile(scenarios.FS, name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, false)
		f.Add(raw, true)
	}
	base := `"rate":10,"duration":"10s","pre_allocated_vus":1,"providers":[{"name":"a"}]`
	for _, doc := range []string{
		`{"name":"x",` + base + `}`,
		`{"name":"x",` + base + `,"rat":1}`,
		`{"name":"x",` + base + `,"max_vus":2,"pre_allocated_vus":3}`,
		`{"name":"x",` + base + `,"faults":[{"provider":"b","kind":"down","at":"1s"}]}`,
		`{"name":"x",` + base + `,"faults":[{"provider":"a","kind":"slow","at":"1s","latency":"100ms","jitter":"10ms"}]}`,
		`{"name":"x",` + base + `,"faults":[{"provider":"a","kind":"brownout","at":"1s","share":0.5}]}`,
		`{"name":"x",` + base + `,"faults":[{"provider":"a","kind":"toxic","at":"1s","toxic":{"type":"latency","attributes":{"latency":5}}}]}`,
		`{"name":"x",` + base + `,"thresholds":{"http_req_duration{provider:a,name:acquire}":["p(99.9)<=250"],"dropped_iterations":["count==0"]}}`,
		`{"name":"x",` + base + `,"thresholds":{"http_req_duration":["p95<1"]}}`,
		`{"name":"x",` + base + `,"thresholds":{"http_req_duration{provider}":["p(95)<1"]}}`,
		`{"name":"x",` + base + `,"sidecar":{"a":{"timeout":"1s","retry":{"max_retries":2}}}}`,
		`{"name":"x",` + base + `,"short":{"duration":"5s"}}`,
		`{"name":"x",` + base + `,"short":{"name":"y"}}`,
		`{"name":"x","rate":1,"duration":"ten","pre_allocated_vus":1,"providers":[{"name":"a"}]}`,
		`{"name":"x","rate":1,"duration":10,"pre_allocated_vus":1,"providers":[{"name":"a","weight":101}]}`,
		`null`, `[]`, `{}`, ``,
	} {
		f.Add([]byte(doc), false)
		f.Add([]byte(doc), true)
	}
	f.Fuzz(func(t *testing.T, doc []byte, short bool) {
		var s *scenario.Scenario
		var err error
		testenv.Timed(t, "Parse", func() { s, err = scenario.Parse(doc, short) })
		if err != nil {
			if s != nil {
				t.Fatalf("Parse() = %+v with error %v, want no scenario", s, err)
			}
			return
		}
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("json.Marshal(parsed scenario) = %v", err)
		}
		again, err := scenario.Parse(raw, false)
		if err != nil {
			t.Fatalf("Parse(Marshal(Parse(doc))) = %v, want the scenario again; rendered %s", err, raw)
		}
		again.IsShort = s.IsShort
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("Parse(Marshal(Parse(doc))) = %+v, want %+v; rendered %s", again, s, raw)
		}
		total := 0
		for _, p := range s.Providers {
			total += p.Weight
		}
		if mix := s.Mix(); len(mix) != total {
			t.Fatalf("len(Mix()) = %d, want the sum of the weights %d", len(mix), total)
		}
	})
}
