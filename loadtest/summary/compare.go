package summary

import (
	"fmt"
	"io"
	"math"

	"github.com/repool/repool/loadtest/scenario"
)

// Both is the result of -mode both: the naive run, then the sidecar run,
// on the same scenario and faults, and the before/after table.
type Both struct {
	Mode        string      `json:"mode"`
	Scenario    string      `json:"scenario"`
	Runs        []*Summary  `json:"runs"`
	BeforeAfter *Comparison `json:"before_after"`
}

// Comparison is the before/after table: naive client against sidecar.
type Comparison struct {
	// Provider is the faulted provider that the fault-window rows are
	// about; empty when the scenario has no fault.
	Provider string `json:"provider,omitempty"`
	Rows     []Row  `json:"rows"`
	// Targets are the targets that need both runs (the sidecar's success
	// rate against the naive client's).
	Targets []Target `json:"targets,omitempty"`
}

// Row is one line of the table.
type Row struct {
	Name string `json:"name"`
	// Unit is ms, count or share.
	Unit    string  `json:"unit"`
	Naive   float64 `json:"naive"`
	Sidecar float64 `json:"sidecar"`
	// Ratio is naive/sidecar; null for shares and when sidecar is 0.
	Ratio *float64 `json:"ratio"`
}

// Compare builds the before/after table of two runs of one scenario.
func Compare(naive, sidecar *Summary) *Comparison {
	c := &Comparison{}
	add := func(name, unit string, n, s float64) {
		r := Row{Name: name, Unit: unit, Naive: n, Sidecar: s}
		if unit != "share" && s > 0 {
			v := n / s
			r.Ratio = &v
		}
		c.Rows = append(c.Rows, r)
	}
	if len(sidecar.Faults) > 0 {
		c.Provider = sidecar.Faults[0].Provider
		pn, ps := naive.Providers[c.Provider], sidecar.Providers[c.Provider]
		if pn != nil && ps != nil && pn.Fault != nil && ps.Fault != nil {
			where := c.Provider + " in fault window"
			add("avg, "+where, "ms", pn.Fault.AvgMS, ps.Fault.AvgMS)
			add("p95, "+where, "ms", pn.Fault.P95MS, ps.Fault.P95MS)
			add("p99, "+where, "ms", pn.Fault.P99MS, ps.Fault.P99MS)
			add("error rate, "+where, "share", pn.Fault.ErrorRate, ps.Fault.ErrorRate)
			add("fast-fail ≤10ms, "+where, "share", pn.Fault.FastFailWithin10ms, ps.Fault.FastFailWithin10ms)
			add("fast-fail ≤100ms, "+where, "share", pn.Fault.FastFailWithin100ms, ps.Fault.FastFailWithin100ms)
			// A brownout is judged by its success rate; a provider that is
			// down, silent or slow by its fast failures (the naive
			// client's few successes there are calls that waited past the
			// window's end: the error rate row shows them).
			if t := SuccessRateTarget(naive, sidecar, c.Provider); t != nil && brownoutOnly(sidecar.Faults, c.Provider) {
				c.Targets = append(c.Targets, *t)
			}
		}
		for _, name := range sidecar.providerOrder {
			if name == c.Provider {
				continue
			}
			if a, b := naive.Providers[name], sidecar.Providers[name]; a != nil && b != nil {
				add("p95, "+name+" (healthy), whole run", "ms", a.P95MS, b.P95MS)
			}
		}
	}
	add("avg, all calls", "ms", naive.Latency.AvgMS, sidecar.Latency.AvgMS)
	add("p95, all calls", "ms", naive.Latency.P95MS, sidecar.Latency.P95MS)
	add("error rate, all calls", "share", ratio(failedOf(naive), naive.Requests), ratio(failedOf(sidecar), sidecar.Requests))
	add("dropped_iterations", "count", float64(naive.DroppedIterations), float64(sidecar.DroppedIterations))
	add("max VUs (vus_max)", "count", float64(naive.MaxVUs), float64(sidecar.MaxVUs))
	add("peak busy VUs", "count", float64(naive.PeakActiveVUs), float64(sidecar.PeakActiveVUs))
	add("iterations completed", "count", float64(naive.Iterations), float64(sidecar.Iterations))
	return c
}

func failedOf(s *Summary) int64 {
	n := int64(0)
	for _, p := range s.Providers {
		n += p.Errors
	}
	return n
}

// WriteText prints the table of a run of sc, headed by the naive client's
// policy (sc.Naive).
func (c *Comparison) WriteText(w io.Writer, sc *scenario.Scenario) {
	fmt.Fprintf(w, "\n  before/after · %s · naive client (walks hosts, retries %d×%v per host) vs sidecar behind HAProxy\n\n",
		sc.Name, sc.Naive.AttemptsPerHost, sc.Naive.RetryDelay.D())
	fmt.Fprintf(w, "   %-44s %12s %12s %14s\n", "", "naive", "sidecar", "naive/sidecar")
	for _, r := range c.Rows {
		fmt.Fprintf(w, "   %-44s %12s %12s %14s\n", r.Name, r.format(r.Naive), r.format(r.Sidecar), r.ratio())
	}
	for _, t := range c.Targets {
		fmt.Fprintf(w, "\n   target %s\n", t.line())
	}
	fmt.Fprintln(w)
}

func (r Row) format(v float64) string {
	switch r.Unit {
	case "ms":
		return FormatMS(v)
	case "share":
		return fmt.Sprintf("%.2f%%", v*100)
	}
	return fmt.Sprintf("%.0f", v)
}

func (r Row) ratio() string {
	switch {
	case r.Unit == "share":
		return "—"
	case r.Ratio == nil && r.Naive > 0:
		return "∞ (sidecar 0)"
	case r.Ratio == nil:
		return "—"
	case *r.Ratio >= 10:
		return fmt.Sprintf("%.0f×", math.Round(*r.Ratio))
	}
	return fmt.Sprintf("%.2f×", *r.Ratio)
}

// brownoutOnly reports whether every fault window of provider is a
// brownout.
func brownoutOnly(wins []Window, provider string) bool {
	any := false
	for _, w := range wins {
		if w.Provider == provider {
			if w.Kind != "brownout" {
				return false
			}
			any = true
		}
	}
	return any
}
