package summary

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// WriteJSON writes v (a Summary or a Both) as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// FormatMS formats milliseconds as k6 does: 512µs, 3.21ms, 1.2s.
func FormatMS(v float64) string {
	switch {
	case v == 0:
		return "0s"
	case v < 1:
		return fmt.Sprintf("%.0fµs", v*1000)
	case v < 1000:
		return fmt.Sprintf("%.2fms", v)
	case v < 60000:
		return fmt.Sprintf("%.2fs", v/1000)
	}
	return fmt.Sprintf("%.1fm", v/60000)
}

func pct(v float64) string { return fmt.Sprintf("%.2f%%", v*100) }

// dots pads a metric name with dots to k6's column.
func dots(name string, width int) string {
	if n := width - len([]rune(name)); n > 0 {
		return name + strings.Repeat(".", n)
	}
	return name
}

// WriteText writes the end-of-run summary in k6's style: metrics (marked ✓
// or ✗ where thresholds apply), then per provider, faults, events and
// thresholds.
func (s *Summary) WriteText(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	short := ""
	if s.Short {
		short = " (short)"
	}
	p("\n  scenario: %s%s · mode %s · %.0f iterations/s for %.0fs · VUs: %d pre-allocated\n\n",
		s.Scenario, short, s.Mode, s.TargetRate, s.DurationS, s.PreAllocatedVUs)

	marks := map[string]string{}
	for _, t := range s.Thresholds {
		m := marks[t.Metric]
		if !t.OK {
			marks[t.Metric] = "✗"
		} else if m == "" {
			marks[t.Metric] = "✓"
		}
	}
	line := func(key, value string) {
		mark := marks[key]
		if mark == "" {
			mark = " "
		}
		p("   %s %s: %s\n", mark, dots(key, 40), value)
	}
	trendLine := func(l Latency) string {
		return fmt.Sprintf("avg=%-9s min=%-9s med=%-9s max=%-9s p(90)=%-9s p(95)=%-9s p(99)=%s",
			FormatMS(l.AvgMS), FormatMS(l.MinMS), FormatMS(l.P50MS), FormatMS(l.MaxMS), FormatMS(l.P90MS), FormatMS(l.P95MS), FormatMS(l.P99MS))
	}
	failedShare := func(share float64, errors int64) string {
		return fmt.Sprintf("%-7s of %d failed", pct(share), errors)
	}

	line("checks", fmt.Sprintf("%-7s ✓ %-8d ✗ %d", pct(s.ChecksRate), s.checksOK, s.checksBad))
	line("dropped_iterations", fmt.Sprintf("%-7d %.2f/s", s.DroppedIterations, perS(float64(s.DroppedIterations), s.ElapsedS)))
	for _, key := range []string{metricFastMarked, metricFast10, metricFast100} {
		for _, name := range s.providerOrder {
			ps := s.Providers[name]
			if ps.Errors == 0 {
				continue
			}
			v := map[string]float64{metricFastMarked: ps.FastFailMarked, metricFast10: ps.FastFailWithin10ms, metricFast100: ps.FastFailWithin100ms}[key]
			line(key+"{provider:"+name+"}", failedShare(v, ps.Errors))
		}
	}
	line("http_req_duration", trendLine(s.Latency))
	for _, name := range s.providerOrder {
		ps := s.Providers[name]
		line("http_req_duration{provider:"+name+"}", trendLine(Latency{AvgMS: ps.AvgMS, P50MS: ps.P50MS, P90MS: ps.P90MS, P95MS: ps.P95MS, P99MS: ps.P99MS, MaxMS: ps.MaxMS, MinMS: minOf(s.samples, s.providerIndex(name))}))
	}
	failed := int64(0)
	for _, ps := range s.Providers {
		failed += ps.Errors
	}
	line("http_req_failed", fmt.Sprintf("%-7s ✓ %-8d ✗ %d", pct(ratio(failed, s.Requests)), failed, s.Requests-failed))
	for _, name := range s.providerOrder {
		ps := s.Providers[name]
		line("http_req_failed{provider:"+name+"}", fmt.Sprintf("%-7s ✓ %-8d ✗ %d", pct(ps.ErrorRate), ps.Errors, ps.Requests-ps.Errors))
	}
	line("http_reqs", fmt.Sprintf("%-7d %.2f/s", s.Requests, s.RequestsPerS))
	line("iteration_duration", trendLine(s.IterationDuration))
	line("iterations", fmt.Sprintf("%-7d %.2f/s (interrupted: %d)", s.Iterations, s.IterationsPerS, s.InterruptedIterations))
	line("vus", fmt.Sprintf("peak=%d", s.PeakActiveVUs))
	line("vus_max", fmt.Sprintf("%-7d pre-allocated=%d", s.MaxVUs, s.PreAllocatedVUs))

	p("\n   %-8s %8s %7s %8s %9s %9s %9s %9s %9s %9s %8s %8s %7s\n", "provider", "requests", "errors", "err%", "avg", "p50", "p90", "p95", "p99", "max", "ff≤10ms", "ff≤100ms", "marked")
	row := func(label string, st Stats) {
		p("   %-8s %8d %7d %8s %9s %9s %9s %9s %9s %9s %8s %8s %7s\n", label, st.Requests, st.Errors, pct(st.ErrorRate),
			FormatMS(st.AvgMS), FormatMS(st.P50MS), FormatMS(st.P90MS), FormatMS(st.P95MS), FormatMS(st.P99MS), FormatMS(st.MaxMS),
			pctIf(st.FastFailWithin10ms, st.Errors), pctIf(st.FastFailWithin100ms, st.Errors), pctIf(st.FastFailMarked, st.Errors))
	}
	for _, name := range s.providerOrder {
		ps := s.Providers[name]
		row(name, ps.Stats)
		if ps.Fault != nil {
			row("  fault", *ps.Fault)
		}
	}
	for _, name := range s.providerOrder {
		ps := s.Providers[name]
		if len(ps.ErrorCodes) > 0 {
			p("   %s errors: %s\n", name, codes(ps.ErrorCodes))
		}
		if ps.BreakerOpenedS != nil {
			p("   %s breaker: first circuit-open answer at %.1fs; after it, %s of %d calls in the fault window failed within 10 ms",
				name, *ps.BreakerOpenedS, pct(deref(ps.AfterOpenFailedWithin10ms)), ps.AfterOpenRequests)
			if ps.CircuitOpenWithin10ms != nil {
				p("; %s of circuit-open answers took ≤ 10 ms", pct(*ps.CircuitOpenWithin10ms))
			}
			p("\n")
		}
	}
	if r := s.Rebalance; r != nil {
		p("\n   rebalance: %s moved from group %s (%s) to %s at %.1fs; move window %s (request %s, refused by the source %s)\n",
			r.Tenant, r.From, r.Server, r.To, r.AtS, FormatMS(r.WindowS*1000), FormatMS(r.RequestS*1000), FormatMS(r.RefusedS*1000))
		p("     %-12s %-7s %8s %10s %10s %10s %7s\n", "tenant", "phase", "calls", "p50", "p99", "max", "errors")
		for _, name := range s.providerOrder {
			ph := r.Providers[name]
			label := name
			if ph.Moved {
				label += " (moved)"
			}
			for _, x := range []struct {
				phase string
				st    Stats
			}{{"before", ph.Before}, {"during", ph.During}, {"settling", ph.Settling}, {"after", ph.After}} {
				p("     %-12s %-7s %8d %10s %10s %10s %7d\n", label, x.phase, x.st.Requests, FormatMS(x.st.P50MS), FormatMS(x.st.P99MS), FormatMS(x.st.MaxMS), x.st.Errors)
				label = ""
			}
		}
	}
	if len(s.Targets) > 0 {
		met := 0
		for _, t := range s.Targets {
			if t.OK {
				met++
			}
		}
		p("\n   targets (%d of %d met; reported, not enforced):\n", met, len(s.Targets))
		for _, t := range s.Targets {
			p("     %s\n", t.line())
		}
	}
	if len(s.Faults) > 0 {
		p("\n   faults:\n")
		for _, f := range s.Faults {
			p("     %-10s %-12s %5.1fs → %5.1fs\n", f.Provider, f.Kind, f.StartS, f.EndS)
		}
	}
	if len(s.Events) > 0 {
		p("\n   events:\n")
		for _, e := range s.Events {
			p("     %6.2fs  %s\n", e.AtS, e.Text)
		}
	}
	if len(s.Thresholds) > 0 {
		verdict := "all thresholds hold"
		if !s.ThresholdsOK {
			verdict = "some thresholds were crossed"
		}
		p("\n   thresholds (%s):\n", verdict)
		for _, t := range s.Thresholds {
			mark, got := "✓", fmt.Sprintf("%.4g", t.Value)
			if !t.OK {
				mark = "✗"
			}
			if t.Error != "" {
				got = "error: " + t.Error
			}
			p("     %s %-40s %-14s (got %s)\n", mark, t.Metric, t.Expr, got)
		}
	}
	p("\n")
}

func perS(n, s float64) float64 {
	if s <= 0 {
		return 0
	}
	return n / s
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func pctIf(v float64, errors int64) string {
	if errors == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", v*100)
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func minOf(samples []Sample, pi int) float64 {
	m := math.Inf(1)
	for _, x := range samples {
		if x.Provider == pi && ms(x.Dur) < m {
			m = ms(x.Dur)
		}
	}
	if math.IsInf(m, 1) {
		return 0
	}
	return m
}

func codes(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || (m[keys[i]] == m[keys[j]] && keys[i] < keys[j]) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
