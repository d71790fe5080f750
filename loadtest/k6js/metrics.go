package k6js

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/summary"
)

// kind is a k6 metric type.
type kind int

const (
	counter kind = iota
	gauge
	rate
	trend
)

func (k kind) String() string {
	return [...]string{"counter", "gauge", "rate", "trend"}[k]
}

type sample struct {
	v    float64
	tags map[string]string
}

type metric struct {
	name   string
	kind   kind
	isTime bool
	// Written under registry.mu.
	samples []sample
}

// registry holds every metric of a run. Safe for concurrent use.
type registry struct {
	mu sync.Mutex
	m  map[string]*metric
}

func newRegistry() *registry {
	r := &registry{m: map[string]*metric{}}
	for _, b := range []struct {
		name   string
		k      kind
		isTime bool
	}{
		{"http_reqs", counter, false}, {"http_req_duration", trend, true}, {"http_req_failed", rate, false},
		{"checks", rate, false}, {"iterations", counter, false}, {"iteration_duration", trend, true},
		{"dropped_iterations", counter, false}, {"vus", gauge, false}, {"vus_max", gauge, false},
	} {
		r.m[b.name] = &metric{name: b.name, kind: b.k, isTime: b.isTime}
	}
	return r
}

// declare returns the metric name, creating it with kind k; a name already
// declared with another kind is an error, as in k6.
func (r *registry) declare(name string, k kind, isTime bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.m[name]; ok {
		if m.kind != k {
			return fmt.Errorf("metric %q is a %v, not a %v", name, m.kind, k)
		}
		return nil
	}
	r.m[name] = &metric{name: name, kind: k, isTime: isTime}
	return nil
}

func (r *registry) add(name string, v float64, tags map[string]string) {
	r.mu.Lock()
	if m := r.m[name]; m != nil {
		m.samples = append(m.samples, sample{v: v, tags: tags})
	}
	r.mu.Unlock()
}

// values are a (sub)metric's aggregates, named as in k6's summary data.
func (r *registry) values(name string, filter map[string]string, elapsed time.Duration, extraP []float64) (kind, bool, map[string]float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m[name]
	if m == nil {
		return 0, false, nil, false
	}
	var vs []float64
	for _, s := range m.samples {
		if matches(s.tags, filter) {
			vs = append(vs, s.v)
		}
	}
	out := map[string]float64{}
	switch m.kind {
	case counter:
		sum := 0.0
		for _, v := range vs {
			sum += v
		}
		out["count"] = sum
		out["rate"] = 0
		if elapsed > 0 {
			out["rate"] = sum / elapsed.Seconds()
		}
	case gauge:
		if len(vs) > 0 {
			out["value"], out["min"], out["max"] = vs[len(vs)-1], slicesMin(vs), slicesMax(vs)
		} else {
			out["value"], out["min"], out["max"] = 0, 0, 0
		}
	case rate:
		passes := 0.0
		for _, v := range vs {
			if v != 0 {
				passes++
			}
		}
		out["passes"], out["fails"], out["rate"] = passes, float64(len(vs))-passes, 0
		if len(vs) > 0 {
			out["rate"] = passes / float64(len(vs))
		}
	case trend:
		sort.Float64s(vs)
		out["count"] = float64(len(vs))
		sum := 0.0
		for _, v := range vs {
			sum += v
		}
		out["avg"], out["min"], out["max"], out["med"] = 0, 0, 0, 0
		if len(vs) > 0 {
			out["avg"], out["min"], out["max"], out["med"] = sum/float64(len(vs)), vs[0], vs[len(vs)-1], summary.Percentile(vs, 50)
		}
		for _, p := range append([]float64{90, 95, 99}, extraP...) {
			out[fmt.Sprintf("p(%g)", p)] = summary.Percentile(vs, p)
		}
	}
	return m.kind, m.isTime, out, true
}

func matches(tags, filter map[string]string) bool {
	for k, v := range filter {
		if tags[k] != v {
			return false
		}
	}
	return true
}

func slicesMin(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func slicesMax(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// thresholdValue is the value a threshold compares, or an error when its
// aggregation does not apply to the metric's type.
func thresholdValue(t scenario.Threshold, k kind, values map[string]float64) (float64, error) {
	agg := t.Agg
	if agg == "p" {
		agg = fmt.Sprintf("p(%g)", t.P)
	}
	ok := map[kind][]string{counter: {"count", "rate"}, gauge: {"value", "min", "max"}, rate: {"rate"},
		trend: {"avg", "min", "max", "med"}}[k]
	if k == trend && t.Agg == "p" {
		ok = append(ok, agg)
	}
	for _, a := range ok {
		if a == agg {
			return values[agg], nil
		}
	}
	return 0, fmt.Errorf("%s is a %v: no %s", t.Metric, k, agg)
}

// submetricKey is k6's name of a tag-filtered metric.
func submetricKey(name string, tags map[string]string) string {
	if len(tags) == 0 {
		return name
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ":" + tags[k]
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}
