package summary

import (
	"fmt"
	"time"

	"github.com/repool/repool/loadtest/scenario"
)

// The metrics thresholds can name: k6's built-in ones and the k6 script's
// custom Rate metrics. Tags: provider, and name (acquire, report, release;
// the iterations call acquire and release)
// for request metrics.
const (
	metricDuration    = "http_req_duration"
	metricFailed      = "http_req_failed"
	metricReqs        = "http_reqs"
	metricIterations  = "iterations"
	metricIterDur     = "iteration_duration"
	metricDropped     = "dropped_iterations"
	metricVUs         = "vus"
	metricVUsMax      = "vus_max"
	metricChecks      = "checks"
	metricFast10      = "fast_fail_within_10ms"
	metricFast100     = "fast_fail_within_100ms"
	metricFastMarked  = "fast_fail"
	thresholdNoSample = "no samples"
)

// evaluate checks every threshold; it returns the results and whether all
// hold.
func evaluate(s *Summary, ths []scenario.Threshold) ([]ThresholdResult, bool) {
	out := make([]ThresholdResult, 0, len(ths))
	all := true
	for _, t := range ths {
		r := ThresholdResult{Metric: t.Key, Expr: t.Expr}
		v, err := s.value(t)
		if err != nil {
			r.Error = err.Error()
		} else {
			r.Value, r.OK = v, t.Holds(v)
		}
		all = all && r.OK
		out = append(out, r)
	}
	return out, all
}

// value computes a threshold's aggregate.
func (s *Summary) value(t scenario.Threshold) (float64, error) {
	keep, err := s.filter(t)
	if err != nil {
		return 0, err
	}
	elapsed := s.ElapsedS
	switch t.Metric {
	case metricDuration:
		return s.trendAgg(t, durations(s.samples, keep))
	case metricIterDur:
		var d []float64
		pi := s.providerIndex(t.Tags["provider"])
		for _, it := range s.iters {
			if pi < 0 || it.provider == pi {
				d = append(d, ms(it.dur))
			}
		}
		return s.trendAgg(t, d)
	case metricFailed:
		return rateAgg(t, s.samples, keep, func(x Sample) (bool, bool) { return true, x.Failed })
	case metricChecks:
		return rateAgg(t, s.samples, keep, func(x Sample) (bool, bool) { return true, !x.Failed })
	case metricFast10, metricFast100:
		limit := 10 * time.Millisecond
		if t.Metric == metricFast100 {
			limit = 100 * time.Millisecond
		}
		return rateAgg(t, s.samples, keep, func(x Sample) (bool, bool) { return x.Failed, x.Dur <= limit })
	case metricFastMarked:
		return rateAgg(t, s.samples, keep, func(x Sample) (bool, bool) { return x.Failed, x.FastFail != "" })
	case metricReqs:
		n := 0.0
		for _, x := range s.samples {
			if keep(x) {
				n++
			}
		}
		return counterAgg(t, n, elapsed)
	case metricIterations:
		return counterAgg(t, float64(s.Iterations), elapsed)
	case metricDropped:
		return counterAgg(t, float64(s.DroppedIterations), elapsed)
	case metricVUsMax:
		return gaugeAgg(t, float64(s.MaxVUs), float64(s.MaxVUs))
	case metricVUs:
		return gaugeAgg(t, 0, float64(s.PeakActiveVUs))
	}
	return 0, fmt.Errorf("unknown metric %q", t.Metric)
}

// filter returns the sample filter of the threshold's tags.
func (s *Summary) filter(t scenario.Threshold) (func(Sample) bool, error) {
	pi, op := -1, -1
	for k, v := range t.Tags {
		switch k {
		case "provider":
			if pi = s.providerIndex(v); pi < 0 {
				return nil, fmt.Errorf("no provider %q in the scenario", v)
			}
		case "name":
			for i, n := range opNames {
				if n == v {
					op = i
				}
			}
			if op < 0 {
				return nil, fmt.Errorf("tag name:%s: want acquire, report or release", v)
			}
		default:
			return nil, fmt.Errorf("tag %q: the Go runner knows provider and name", k)
		}
	}
	return func(x Sample) bool {
		return (pi < 0 || x.Provider == pi) && (op < 0 || int(x.Op) == op)
	}, nil
}

func (s *Summary) providerIndex(name string) int {
	if name == "" {
		return -1
	}
	for i, n := range s.providerOrder {
		if n == name {
			return i
		}
	}
	return -1
}

func (s *Summary) trendAgg(t scenario.Threshold, d []float64) (float64, error) {
	if len(d) == 0 {
		return 0, fmt.Errorf(thresholdNoSample)
	}
	l := trend(d)
	switch t.Agg {
	case "avg":
		return l.AvgMS, nil
	case "min":
		return l.MinMS, nil
	case "max":
		return l.MaxMS, nil
	case "med":
		return l.P50MS, nil
	case "p":
		return Percentile(d, t.P), nil // trend sorted d
	}
	return 0, fmt.Errorf("%s is a trend: use avg, min, max, med or p(N)", t.Metric)
}

// rateAgg computes a Rate metric: of the samples kept and counted, the
// share for which hit is true.
func rateAgg(t scenario.Threshold, samples []Sample, keep func(Sample) bool, f func(Sample) (counted, hit bool)) (float64, error) {
	if t.Agg != "rate" {
		return 0, fmt.Errorf("%s is a rate: use rate", t.Metric)
	}
	var n, hits float64
	for _, x := range samples {
		if !keep(x) {
			continue
		}
		if c, h := f(x); c {
			n++
			if h {
				hits++
			}
		}
	}
	if n == 0 {
		return 0, fmt.Errorf(thresholdNoSample)
	}
	return hits / n, nil
}

func counterAgg(t scenario.Threshold, n, elapsedS float64) (float64, error) {
	switch t.Agg {
	case "count":
		return n, nil
	case "rate":
		if elapsedS <= 0 {
			return 0, nil
		}
		return n / elapsedS, nil
	}
	return 0, fmt.Errorf("%s is a counter: use count or rate", t.Metric)
}

func gaugeAgg(t scenario.Threshold, value, maxV float64) (float64, error) {
	switch t.Agg {
	case "value":
		return value, nil
	case "max":
		return maxV, nil
	}
	return 0, fmt.Errorf("%s is a gauge: use value or max", t.Metric)
}
