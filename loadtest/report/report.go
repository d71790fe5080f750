// Package report writes a load-test run's HTML report: one self-contained
// page (no scripts, no external files) with the summaries, the
// before/after table and inline SVG charts of latency, error rate and VUs
// over time, the fault windows shaded.
package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"

	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/summary"
)

// Input is what the report shows.
type Input struct {
	Scenario *scenario.Scenario
	// Runs are one or two summaries of the scenario (naive, then sidecar).
	Runs []*summary.Summary
	// Comparison is the before/after table; nil with one run.
	Comparison *summary.Comparison
}

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"}

// Write writes the report.
func Write(w io.Writer, in Input) error {
	if len(in.Runs) == 0 {
		return fmt.Errorf("report: no run")
	}
	type runView struct {
		S                    *summary.Summary
		Providers            []string
		Latency, Errors, VUs template.HTML
	}
	// One latency scale for every run, so naive and sidecar compare at a
	// glance.
	lo, hi := math.Inf(1), 0.0
	xMax := 0.0
	for _, s := range in.Runs {
		xMax = math.Max(xMax, math.Max(s.ElapsedS, s.DurationS))
		for _, bs := range s.Series {
			for _, b := range bs {
				if b.Requests > 0 {
					lo, hi = math.Min(lo, b.AvgMS), math.Max(hi, b.MaxMS)
				}
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.1, 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 0.01))))
	hi = math.Pow(10, math.Ceil(math.Log10(math.Max(hi, lo*10))))
	xMax = math.Ceil(xMax)

	var views []runView
	for _, s := range in.Runs {
		v := runView{S: s, Providers: providerNames(s)}
		var lat, errs []line
		for i, p := range v.Providers {
			color := palette[i%len(palette)]
			var p95, avg, er []point
			for _, b := range s.Series[p] {
				t := b.T + 0.5
				if b.Requests == 0 {
					p95, avg, er = append(p95, point{t, math.NaN()}), append(avg, point{t, math.NaN()}), append(er, point{t, math.NaN()})
					continue
				}
				p95 = append(p95, point{t, b.P95MS})
				avg = append(avg, point{t, b.AvgMS})
				er = append(er, point{t, 100 * float64(b.Errors) / float64(b.Requests)})
			}
			lat = append(lat, line{name: p + " p95", color: color, points: p95}, line{name: p + " avg", color: color, dashed: true, points: avg})
			errs = append(errs, line{name: p, color: color, points: er})
		}
		msFormat := func(v float64) string { return summary.FormatMS(v) }
		v.Latency = template.HTML(chart{
			title: "latency per second (" + s.Mode + ")", yLabel: "latency (log scale)", width: 1100, height: 300,
			xMax: xMax, yMin: lo, yMax: hi, log: true, yFormat: msFormat, lines: lat, windows: s.Faults,
		}.svg())
		v.Errors = template.HTML(chart{
			title: "error rate per second (" + s.Mode + ")", yLabel: "failed requests %", width: 1100, height: 240,
			xMax: xMax, yMin: 0, yMax: 100, yFormat: func(v float64) string { return fmt.Sprintf("%.0f%%", v) }, lines: errs, windows: s.Faults,
		}.svg())
		var act, alloc []point
		vmax := 5.0
		for _, p := range s.VUs {
			act = append(act, point{p.T, float64(p.Active)})
			alloc = append(alloc, point{p.T, float64(p.Allocated)})
			vmax = math.Max(vmax, float64(p.Allocated))
		}
		v.VUs = template.HTML(chart{
			title: "VUs (" + s.Mode + ")", yLabel: "VUs", width: 1100, height: 200,
			xMax: xMax, yMin: 0, yMax: niceCeil(vmax), yFormat: func(v float64) string { return fmt.Sprintf("%.0f", v) },
			lines:   []line{{name: "busy", color: "#2ca02c", points: act}, {name: "allocated", color: "#7f7f7f", dashed: true, points: alloc}},
			windows: s.Faults,
		}.svg())
		views = append(views, v)
	}
	return page.Execute(w, map[string]any{"Scenario": in.Scenario, "Runs": views, "Comparison": in.Comparison})
}

func providerNames(s *summary.Summary) []string {
	names := make([]string, 0, len(s.Providers))
	for n := range s.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func niceCeil(v float64) float64 {
	s := niceStep(v / 5)
	return math.Ceil(v/s) * s
}

// phase is one phase of a rebalance's calls, for the page.
type phase struct {
	Name string
	summary.Stats
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":  summary.FormatMS,
	"sec": func(s float64) string { return summary.FormatMS(s * 1000) },
	// phases lists a rebalance's phases of one provider, in order.
	"phases": func(p *summary.Phases) []phase {
		return []phase{{"before", p.Before}, {"during the move", p.During}, {"settling (1 s)", p.Settling}, {"after", p.After}}
	},
	"pct": func(v float64) string { return fmt.Sprintf("%.2f%%", v*100) },
	"row": func(r summary.Row) []string {
		f := func(v float64) string {
			switch r.Unit {
			case "ms":
				return summary.FormatMS(v)
			case "share":
				return fmt.Sprintf("%.2f%%", v*100)
			}
			return fmt.Sprintf("%.0f", v)
		}
		ratio := "—"
		if r.Ratio != nil {
			ratio = fmt.Sprintf("%.1f×", *r.Ratio)
		}
		return []string{r.Name, f(r.Naive), f(r.Sidecar), ratio}
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>repool load test · {{.Scenario.Name}}</title>
<style>
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1140px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
.ok { color: #2a7a2a; } .bad { color: #b22222; }
h2 { margin-top: 32px; border-bottom: 1px solid #ccc; }
.muted { color: #666; font-size: 13px; }
</style></head><body>
<h1>repool load test · {{.Scenario.Name}}{{if .Scenario.IsShort}} (short){{end}}</h1>
<p>{{.Scenario.Description}}</p>
<p class="muted">{{.Scenario.Rate}} iterations per {{.Scenario.TimeUnit.D}} for {{.Scenario.Duration.D}} (k6 constant-arrival-rate), {{.Scenario.PreAllocatedVUs}} pre-allocated VUs, at most {{.Scenario.MaxVUs}}. Each iteration: one use of a resource of one provider, released with its outcome and the next lease in one call (acquire first when the VU holds no lease). Shaded: fault windows.</p>
{{with .Comparison}}
<h2>Before / after</h2>
<p class="muted">naive: calls the servers itself, walks the host list, follows "not the active server", retries every transient failure with fixed delays · sidecar: CB(Retry(call)) behind HAProxy</p>
<table><tr><th></th><th>naive</th><th>sidecar</th><th>naive/sidecar</th></tr>
{{range .Rows}}{{$r := row .}}<tr><td>{{index $r 0}}</td><td>{{index $r 1}}</td><td>{{index $r 2}}</td><td>{{index $r 3}}</td></tr>
{{end}}</table>
{{end}}
{{range .Runs}}{{$s := .S}}{{$names := .Providers}}
<h2>mode {{$s.Mode}}</h2>
{{if $s.Faults}}<p class="muted">fault windows of this run: {{range $i, $f := $s.Faults}}{{if $i}}, {{end}}{{$f.Provider}} {{$f.Kind}} {{printf "%.1f" $f.StartS}}s → {{printf "%.1f" $f.EndS}}s{{end}}</p>{{end}}
<table>
<tr><th>iterations</th><th>dropped</th><th>interrupted</th><th>max VUs</th><th>peak busy VUs</th><th>requests/s</th><th>avg</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>
<tr><td>{{$s.Iterations}}</td><td>{{$s.DroppedIterations}}</td><td>{{$s.InterruptedIterations}}</td><td>{{$s.MaxVUs}}</td><td>{{$s.PeakActiveVUs}}</td><td>{{printf "%.1f" $s.RequestsPerS}}</td>
<td>{{ms $s.Latency.AvgMS}}</td><td>{{ms $s.Latency.P50MS}}</td><td>{{ms $s.Latency.P90MS}}</td><td>{{ms $s.Latency.P95MS}}</td><td>{{ms $s.Latency.P99MS}}</td><td>{{ms $s.Latency.MaxMS}}</td></tr>
</table>
<table>
<tr><th>provider</th><th>requests</th><th>errors</th><th>error rate</th><th>avg</th><th>p95</th><th>p99</th><th>max</th><th>fast-fail ≤10ms</th><th>fast-fail ≤100ms</th><th>marked fast-fail</th></tr>
{{range .Providers}}{{$p := index $s.Providers .}}
<tr><td>{{.}}</td><td>{{$p.Requests}}</td><td>{{$p.Errors}}</td><td>{{pct $p.ErrorRate}}</td><td>{{ms $p.AvgMS}}</td><td>{{ms $p.P95MS}}</td><td>{{ms $p.P99MS}}</td><td>{{ms $p.MaxMS}}</td><td>{{pct $p.FastFailWithin10ms}}</td><td>{{pct $p.FastFailWithin100ms}}</td><td>{{pct $p.FastFailMarked}}</td></tr>
{{with $p.Fault}}<tr><td>&nbsp;&nbsp;in fault window</td><td>{{.Requests}}</td><td>{{.Errors}}</td><td>{{pct .ErrorRate}}</td><td>{{ms .AvgMS}}</td><td>{{ms .P95MS}}</td><td>{{ms .P99MS}}</td><td>{{ms .MaxMS}}</td><td>{{pct .FastFailWithin10ms}}</td><td>{{pct .FastFailWithin100ms}}</td><td>{{pct .FastFailMarked}}</td></tr>{{end}}
{{end}}</table>
{{with $s.Rebalance}}<p><b>rebalance</b>: {{.Tenant}} moved from group {{.From}} ({{.Server}}) to {{.To}} at {{printf "%.1f" .AtS}}s; move window (from the request until its calls were served through HAProxy again) {{sec .WindowS}}, request {{sec .RequestS}}, refused by the source {{sec .RefusedS}}. Calls by start: before the request, inside the move window, in the second after it (settling), after that.</p>
<table><tr><th>tenant</th><th>phase</th><th>calls</th><th>errors</th><th>p50</th><th>p99</th><th>max</th></tr>
{{$r := .}}{{range $names}}{{$ph := index $r.Providers .}}{{$name := .}}{{range phases $ph}}<tr><td>{{$name}}{{if $ph.Moved}} (moved){{end}}</td><td class="text">{{.Name}}</td><td>{{.Requests}}</td><td>{{.Errors}}</td><td>{{ms .P50MS}}</td><td>{{ms .P99MS}}</td><td>{{ms .MaxMS}}</td></tr>
{{end}}{{end}}{{range phases $r.Quiet}}<tr><td>quiet tenants, pooled</td><td class="text">{{.Name}}</td><td>{{.Requests}}</td><td>{{.Errors}}</td><td>{{ms .P50MS}}</td><td>{{ms .P99MS}}</td><td>{{ms .MaxMS}}</td></tr>
{{end}}</table>{{end}}
{{.Latency}}
{{.Errors}}
{{.VUs}}
{{if $s.Thresholds}}<p><b>thresholds</b></p><table><tr><th>metric</th><th>threshold</th><th>value</th><th></th></tr>
{{range $s.Thresholds}}<tr><td>{{.Metric}}</td><td>{{.Expr}}</td><td>{{if .Error}}{{.Error}}{{else}}{{printf "%.4g" .Value}}{{end}}</td><td>{{if .OK}}<span class="ok">✓</span>{{else}}<span class="bad">✗</span>{{end}}</td></tr>
{{end}}</table>{{end}}
{{if $s.Targets}}<p><b>targets</b> (reported, not enforced; see docs/loadtest.md)</p><table><tr><th>target</th><th>provider</th><th>want</th><th>got</th><th></th></tr>
{{range $s.Targets}}<tr><td>{{.Name}}</td><td>{{.Provider}}</td><td>{{.Want}}</td><td>{{.Got}}</td><td>{{if .OK}}<span class="ok">✓</span>{{else}}<span class="bad">✗</span>{{end}}</td></tr>
{{end}}</table>{{end}}
{{if $s.Events}}<p><b>events</b></p><table><tr><th>at</th><th>event</th></tr>
{{range $s.Events}}<tr><td>{{printf "%.2fs" .AtS}}</td><td class="text">{{.Text}}</td></tr>
{{end}}</table>{{end}}
{{end}}
</body></html>
`))
