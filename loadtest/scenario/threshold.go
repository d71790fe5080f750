package scenario

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Threshold is one parsed k6 threshold: "p(95)<100" on
// "http_req_duration{provider:eu}".
type Threshold struct {
	// Key is the metric as written, with its tag filter.
	Key string
	// Metric is the metric's name.
	Metric string
	// Tags filter the metric's samples; empty means all.
	Tags map[string]string
	// Expr is the expression as written.
	Expr string
	// Agg is avg, min, max, med, count, rate, value or p(N); P is N.
	Agg string
	P   float64
	// Op is <, <=, >, >=, == or !=.
	Op string
	// Value is the bound (milliseconds for durations, as in k6).
	Value float64
}

var (
	thresholdKey  = regexp.MustCompile(`^([a-z_][a-z0-9_]*)(\{([^{}]*)\})?$`)
	thresholdExpr = regexp.MustCompile(`^\s*(avg|min|max|med|count|rate|value|p\(\s*([0-9.]+)\s*\))\s*(<=|>=|==|!=|<|>)\s*([-+0-9.eE]+)\s*$`)
)

func parseThresholds(m map[string][]string) ([]Threshold, error) {
	var out []Threshold
	for key, exprs := range m {
		km := thresholdKey.FindStringSubmatch(strings.TrimSpace(key))
		if km == nil {
			return nil, fmt.Errorf("thresholds[%q]: want metric or metric{tag:value,...}", key)
		}
		tags := map[string]string{}
		if km[3] != "" {
			for _, kv := range strings.Split(km[3], ",") {
				k, v, ok := strings.Cut(kv, ":")
				if !ok || strings.TrimSpace(k) == "" {
					return nil, fmt.Errorf("thresholds[%q]: tag %q: want name:value", key, kv)
				}
				tags[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		for _, e := range exprs {
			em := thresholdExpr.FindStringSubmatch(e)
			if em == nil {
				return nil, fmt.Errorf("thresholds[%q]: %q: want AGG OP NUMBER, AGG one of avg, min, max, med, count, rate, value, p(N)", key, e)
			}
			t := Threshold{Key: key, Metric: km[1], Tags: tags, Expr: e, Agg: em[1], Op: em[3]}
			if em[2] != "" {
				p, err := strconv.ParseFloat(em[2], 64)
				if err != nil || p < 0 || p > 100 {
					return nil, fmt.Errorf("thresholds[%q]: %q: percentile %q: want 0 to 100", key, e, em[2])
				}
				t.Agg, t.P = "p", p
			}
			v, err := strconv.ParseFloat(em[4], 64)
			if err != nil {
				return nil, fmt.Errorf("thresholds[%q]: %q: %v", key, e, err)
			}
			t.Value = v
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return out[i].Expr < out[j].Expr
	})
	return out, nil
}

// Holds reports whether got satisfies the threshold.
func (t Threshold) Holds(got float64) bool {
	switch t.Op {
	case "<":
		return got < t.Value
	case "<=":
		return got <= t.Value
	case ">":
		return got > t.Value
	case ">=":
		return got >= t.Value
	case "==":
		return got == t.Value
	default:
		return got != t.Value
	}
}

// ParseThresholds parses thresholds in k6's syntax (metric{tag:value} →
// ["AGG OP NUMBER", ...]), sorted by key and expression.
func ParseThresholds(m map[string][]string) ([]Threshold, error) { return parseThresholds(m) }
