package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/summary"
)

func TestWriteDrawsChartsWithFaultWindows(t *testing.T) {
	sc := &scenario.Scenario{Name: "t", Rate: 10, Duration: scenario.Duration(10e9), PreAllocatedVUs: 1, MaxVUs: 2}
	run := func(mode string) *summary.Summary {
		return &summary.Summary{
			Mode: mode, Scenario: "t", DurationS: 10, ElapsedS: 10,
			Providers: map[string]*summary.ProviderStats{"us": {}},
			Faults:    []summary.Window{{Provider: "us", Kind: "down", StartS: 2, EndS: 8}},
			Series:    map[string][]summary.Bucket{"us": {{T: 0, Requests: 5, AvgMS: 1, P95MS: 2, MaxMS: 3}, {T: 1, Requests: 5, Errors: 5, AvgMS: 900, P95MS: 1000, MaxMS: 1100}}},
			VUs:       []summary.VUBucket{{T: 1, Active: 1, Allocated: 2}},
			Targets:   []summary.Target{{Name: "max_vus", Want: "≤ 8", Got: "12"}},
		}
	}
	naive, sidecar := run("naive"), run("sidecar")
	var buf bytes.Buffer
	if err := Write(&buf, Input{Scenario: sc, Runs: []*summary.Summary{naive, sidecar}, Comparison: &summary.Comparison{Provider: "us"}}); err != nil {
		t.Fatalf("Write() = %v", err)
	}
	html := buf.String()
	for _, want := range []string{"<svg", "latency per second (naive)", "error rate per second (sidecar)", "VUs (sidecar)", "us down", "Before / after",
		"fault windows of this run: us down 2.0s → 8.0s", "<td>max_vus</td><td></td><td>≤ 8</td><td>12</td>"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if n := strings.Count(html, "<svg"); n != 6 {
		t.Errorf("report has %d charts, want 3 per run", n)
	}
	if strings.Contains(html, "<script") {
		t.Error("report has a script; want a static page")
	}
}
