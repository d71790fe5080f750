// Package k6js runs a k6 script — its own code: requests, checks, custom
// metrics, thresholds, setup, teardown and handleSummary — in an embedded
// JavaScript engine (github.com/dop251/goja), for the subset of k6's API
// that loadtest/k6/repool.js uses:
//
//   - modules k6/http (get, post, request; params headers, tags, timeout;
//     responses with status, body, headers, timings.duration, error,
//     json(selector)), k6 (check, sleep), k6/execution
//     (scenario.iterationInTest, vu.idInTest), k6/metrics (Counter, Gauge,
//     Rate, Trend), and textSummary of jslib's k6-summary;
//   - the init context's open() and __ENV;
//   - options.scenarios with one constant-arrival-rate scenario (rate,
//     timeUnit, duration, preAllocatedVUs, maxVUs, gracefulStop), run by
//     loadtest/arrival with k6's semantics; options.thresholds;
//   - k6's built-in metrics http_reqs, http_req_duration, http_req_failed,
//     checks, iterations, iteration_duration, dropped_iterations, vus,
//     vus_max;
//   - ES module syntax: import x from, import { a, b } from, export
//     const/let/var, export function, export default function.
//
// Each VU is a goja runtime of its own that ran the script's init code, as
// in k6. Anything outside the subset fails loudly (an unknown module, an
// executor other than constant-arrival-rate), so a script never half-runs.
package k6js

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/loadtest/arrival"
	"github.com/repool/repool/loadtest/scenario"
)

// K6Version is the k6 release whose API the subset follows, and the one
// the script is written for.
const K6Version = "v0.54.0"

// Options configure Run.
type Options struct {
	// Script is the path of the k6 script.
	Script string
	// Env is the script's __ENV.
	Env map[string]string
	// Stdout receives handleSummary's "stdout" (and the default summary).
	Stdout io.Writer
	// Stderr receives the script's console output and errors.
	Stderr io.Writer
	// Dir is where handleSummary's files with relative paths are written.
	// Default the working directory.
	Dir string
	// Clock schedules the iterations and sleep() and times the requests.
	// Default the wall clock (clock.Real), as k6 has it.
	Clock clock.Clock
}

// Result is a finished run.
type Result struct {
	// ThresholdsOK is false when a threshold was crossed (k6 exits 99).
	ThresholdsOK bool
	// Data is the summary data handed to handleSummary.
	Data map[string]any
}

// script is a compiled script with the run's shared state.
type script struct {
	opts    Options
	prog    *goja.Program
	dir     string
	reg     *registry
	client  *http.Client
	stderr  io.Writer
	vuIDs   atomic.Int64
	initErr sync.Once
}

// Run runs the script until its scenario ends, then its teardown and
// handleSummary, and returns the thresholds' verdict.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	raw, err := os.ReadFile(o.Script)
	if err != nil {
		return nil, fmt.Errorf("k6js: %w", err)
	}
	src, err := rewrite(string(raw))
	if err != nil {
		return nil, fmt.Errorf("k6js: %s: %w", o.Script, err)
	}
	prog, err := goja.Compile(o.Script, src, false)
	if err != nil {
		return nil, fmt.Errorf("k6js: %w", err)
	}
	abs, err := filepath.Abs(o.Script)
	if err != nil {
		return nil, err
	}
	s := &script{opts: o, prog: prog, dir: filepath.Dir(abs), reg: newRegistry(), stderr: o.Stderr,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}}}
	defer s.client.CloseIdleConnections()

	main, err := s.newVU(ctx)
	if err != nil {
		return nil, err
	}
	cfg, thresholds, err := main.options()
	if err != nil {
		return nil, fmt.Errorf("k6js: options: %w", err)
	}
	cfg.Clock = o.Clock
	def, ok := goja.AssertFunction(main.exports.Get("default"))
	if !ok || def == nil {
		return nil, errors.New("k6js: the script exports no default function")
	}

	var setupData string
	if fn, ok := goja.AssertFunction(main.exports.Get("setup")); ok {
		v, err := fn(goja.Undefined())
		if err != nil {
			return nil, fmt.Errorf("k6js: setup: %w", err)
		}
		if v != nil && !goja.IsUndefined(v) {
			b, err := json.Marshal(v.Export())
			if err != nil {
				return nil, fmt.Errorf("k6js: setup's data: %w", err)
			}
			setupData = string(b)
		}
	}

	pool := make(chan *vu, cfg.MaxVUs+1)
	var failures atomic.Int64
	exec, err := arrival.New(cfg, func(ctx context.Context, iter int64) {
		var v *vu
		select {
		case v = <-pool:
		default:
			nv, err := s.newVU(ctx)
			if err != nil {
				s.logOnce(err)
				return
			}
			v = nv
		}
		start := o.Clock.Now()
		if err := v.iterate(ctx, iter, setupData); err != nil {
			if n := failures.Add(1); n <= 5 && ctx.Err() == nil {
				fmt.Fprintf(s.stderr, "k6js: iteration %d: %v\n", iter, err)
			}
		} else if ctx.Err() == nil {
			s.reg.add("iterations", 1, nil)
			s.reg.add("iteration_duration", ms(o.Clock.Now().Sub(start)), nil)
		}
		select {
		case pool <- v:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("k6js: %w", err)
	}
	t0 := o.Clock.Now()
	stats := exec.Run(ctx, nil)
	elapsed := o.Clock.Now().Sub(t0)
	s.reg.add("dropped_iterations", float64(stats.Dropped), nil)
	s.reg.add("vus", float64(stats.PeakActive), nil)
	s.reg.add("vus_max", float64(stats.MaxVUs), nil)

	if fn, ok := goja.AssertFunction(main.exports.Get("teardown")); ok {
		if _, err := fn(goja.Undefined(), main.parse(setupData)); err != nil {
			fmt.Fprintf(s.stderr, "k6js: teardown: %v\n", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, okAll := s.summaryData(thresholds, elapsed)
	if err := main.handleSummary(data); err != nil {
		return nil, err
	}
	return &Result{ThresholdsOK: okAll, Data: data}, nil
}

func (s *script) logOnce(err error) {
	s.initErr.Do(func() { fmt.Fprintf(s.stderr, "k6js: starting a VU: %v\n", err) })
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// vu is one VU's runtime.
type vu struct {
	s        *script
	rt       *goja.Runtime
	id       int64
	exports  *goja.Object
	scenario *goja.Object
	def      goja.Callable
	data     goja.Value
	dataSrc  string
	ctx      context.Context // the current iteration's, for requests
}

// newVU starts a runtime and runs the script's init code in it.
func (s *script) newVU(ctx context.Context) (*vu, error) {
	rt := goja.New()
	rt.SetFieldNameMapper(goja.TagFieldNameMapper("json", true))
	v := &vu{s: s, rt: rt, id: s.vuIDs.Add(1), exports: rt.NewObject(), scenario: rt.NewObject(), ctx: ctx}
	env := rt.NewObject()
	for k, val := range s.opts.Env {
		_ = env.Set(k, val)
	}
	must(rt.Set("__ENV", env))
	must(rt.Set("__VU", v.id))
	must(rt.Set("__exports", v.exports))
	must(rt.Set("open", func(path string) (string, error) {
		if !filepath.IsAbs(path) {
			path = filepath.Join(s.dir, path)
		}
		b, err := os.ReadFile(path)
		return string(b), err
	}))
	console := rt.NewObject()
	for _, name := range []string{"log", "info", "warn", "error", "debug"} {
		_ = console.Set(name, func(call goja.FunctionCall) goja.Value {
			parts := make([]string, len(call.Arguments))
			for i, a := range call.Arguments {
				parts[i] = a.String()
			}
			fmt.Fprintln(s.stderr, strings.Join(parts, " "))
			return goja.Undefined()
		})
	}
	must(rt.Set("console", console))
	must(rt.Set("__require", v.require))
	if _, err := rt.RunProgram(s.prog); err != nil {
		return nil, fmt.Errorf("k6js: init: %w", err)
	}
	if fn, ok := goja.AssertFunction(v.exports.Get("default")); ok {
		v.def = fn
	}
	return v, nil
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// iterate runs the default function once.
func (v *vu) iterate(ctx context.Context, iter int64, setupData string) error {
	if v.def == nil {
		return errors.New("no default function")
	}
	_ = v.scenario.Set("iterationInTest", iter)
	v.ctx = ctx
	stop := context.AfterFunc(ctx, func() { v.rt.Interrupt(ctx.Err()) })
	defer func() {
		if !stop() {
			v.rt.ClearInterrupt()
		}
	}()
	_, err := v.def(goja.Undefined(), v.parse(setupData))
	return err
}

// parse returns setup's data in this runtime, parsed once.
func (v *vu) parse(src string) goja.Value {
	if src == "" {
		return goja.Undefined()
	}
	if v.data == nil || v.dataSrc != src {
		var x any
		if err := json.Unmarshal([]byte(src), &x); err != nil {
			return goja.Undefined()
		}
		v.data, v.dataSrc = v.rt.ToValue(x), src
	}
	return v.data
}

// options reads options.scenarios (one constant-arrival-rate scenario)
// and options.thresholds.
func (v *vu) options() (arrival.Config, []scenario.Threshold, error) {
	var cfg arrival.Config
	raw := v.exports.Get("options")
	if raw == nil || goja.IsUndefined(raw) {
		return cfg, nil, errors.New("the script exports no options: a constant-arrival-rate scenario is required")
	}
	b, err := json.Marshal(raw.Export())
	if err != nil {
		return cfg, nil, err
	}
	var o struct {
		Scenarios map[string]struct {
			Executor        string `json:"executor"`
			Rate            int    `json:"rate"`
			TimeUnit        any    `json:"timeUnit"`
			Duration        any    `json:"duration"`
			PreAllocatedVUs int    `json:"preAllocatedVUs"`
			MaxVUs          int    `json:"maxVUs"`
			GracefulStop    any    `json:"gracefulStop"`
		} `json:"scenarios"`
		Thresholds map[string]json.RawMessage `json:"thresholds"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return cfg, nil, err
	}
	if len(o.Scenarios) != 1 {
		return cfg, nil, fmt.Errorf("%d scenarios: exactly one is supported", len(o.Scenarios))
	}
	for name, sc := range o.Scenarios {
		if sc.Executor != "constant-arrival-rate" {
			return cfg, nil, fmt.Errorf("scenario %s: executor %q: only constant-arrival-rate is supported", name, sc.Executor)
		}
		cfg.Rate, cfg.PreAllocatedVUs, cfg.MaxVUs = sc.Rate, sc.PreAllocatedVUs, sc.MaxVUs
		for _, f := range []struct {
			v    any
			def  time.Duration
			into *time.Duration
			name string
		}{{sc.TimeUnit, time.Second, &cfg.TimeUnit, "timeUnit"}, {sc.Duration, 0, &cfg.Duration, "duration"}, {sc.GracefulStop, 30 * time.Second, &cfg.GracefulStop, "gracefulStop"}} {
			d, err := k6Duration(f.v, f.def)
			if err != nil {
				return cfg, nil, fmt.Errorf("scenario %s: %s: %w", name, f.name, err)
			}
			*f.into = d
		}
		if cfg.MaxVUs == 0 {
			cfg.MaxVUs = cfg.PreAllocatedVUs
		}
	}
	th := map[string][]string{}
	for key, raw := range o.Thresholds {
		var list []any
		if err := json.Unmarshal(raw, &list); err != nil {
			return cfg, nil, fmt.Errorf("thresholds[%q]: want a list", key)
		}
		for _, e := range list {
			switch e := e.(type) {
			case string:
				th[key] = append(th[key], e)
			case map[string]any:
				if s, ok := e["threshold"].(string); ok {
					th[key] = append(th[key], s)
					continue
				}
				return cfg, nil, fmt.Errorf("thresholds[%q]: an object without threshold", key)
			default:
				return cfg, nil, fmt.Errorf("thresholds[%q]: %v: want a string", key, e)
			}
		}
	}
	ths, err := scenario.ParseThresholds(th)
	return cfg, ths, err
}

// k6Duration reads a k6 duration: a string ("1m30s", "500ms") or a number
// of milliseconds.
func k6Duration(v any, def time.Duration) (time.Duration, error) {
	switch v := v.(type) {
	case nil:
		if def == 0 {
			return 0, errors.New("required")
		}
		return def, nil
	case float64:
		return time.Duration(v * float64(time.Millisecond)), nil
	case string:
		return time.ParseDuration(v)
	}
	return 0, fmt.Errorf("%v: want a duration", v)
}

// require returns a module.
func (v *vu) require(name string) (*goja.Object, error) {
	rt := v.rt
	mod := rt.NewObject()
	switch name {
	case "k6/http":
		_ = mod.Set("request", func(method, url string, body goja.Value, params goja.Value) *goja.Object {
			return v.request(method, url, body, params)
		})
		_ = mod.Set("get", func(url string, params goja.Value) *goja.Object { return v.request("GET", url, nil, params) })
		_ = mod.Set("post", func(url string, body, params goja.Value) *goja.Object { return v.request("POST", url, body, params) })
		_ = mod.Set("put", func(url string, body, params goja.Value) *goja.Object { return v.request("PUT", url, body, params) })
		_ = mod.Set("del", func(url string, body, params goja.Value) *goja.Object { return v.request("DELETE", url, body, params) })
	case "k6":
		_ = mod.Set("check", v.check)
		_ = mod.Set("sleep", func(secs float64) {
			_ = clock.Sleep(v.ctx, v.s.opts.Clock, time.Duration(secs*float64(time.Second))) // returns early when the VU is interrupted
		})
	case "k6/execution":
		vuObj := rt.NewObject()
		_ = vuObj.Set("idInTest", v.id)
		_ = mod.Set("scenario", v.scenario)
		_ = mod.Set("vu", vuObj)
	case "k6/metrics":
		for _, k := range []kind{counter, gauge, rate, trend} {
			_ = mod.Set(strings.ToUpper(k.String()[:1])+k.String()[1:], v.metricConstructor(k))
		}
	case "https://jslib.k6.io/k6-summary/0.0.2/index.js":
		_ = mod.Set("textSummary", func(data map[string]any, _ goja.Value) string { return textSummary(data) })
	default:
		return nil, fmt.Errorf("module %q is not in k6js's subset of k6", name)
	}
	_ = mod.Set("default", mod)
	return mod, nil
}

// metricConstructor is new Counter/Gauge/Rate/Trend(name[, isTime]).
func (v *vu) metricConstructor(k kind) func(goja.ConstructorCall) *goja.Object {
	return func(call goja.ConstructorCall) *goja.Object {
		name := call.Argument(0).String()
		isTime := k == trend && call.Argument(1).ToBoolean()
		if err := v.s.reg.declare(name, k, isTime); err != nil {
			panic(v.rt.NewTypeError(err.Error()))
		}
		_ = call.This.Set("name", name)
		_ = call.This.Set("add", func(val goja.Value, tags goja.Value) bool {
			x := val.ToFloat()
			if k == rate {
				x = 0
				if val.ToBoolean() {
					x = 1
				}
			}
			v.s.reg.add(name, x, tagMap(tags))
			return true
		})
		return nil
	}
}

func tagMap(v goja.Value) map[string]string {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return nil
	}
	m, ok := v.Export().(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out
}

// check is k6's check(value, {name: fn}, tags): one checks sample per
// function; true when all passed.
func (v *vu) check(val goja.Value, sets *goja.Object, tags goja.Value) (bool, error) {
	all := true
	base := tagMap(tags)
	for _, name := range sets.Keys() {
		ok := false
		if fn, isFn := goja.AssertFunction(sets.Get(name)); isFn {
			r, err := fn(goja.Undefined(), val)
			if err != nil {
				return false, err
			}
			ok = r.ToBoolean()
		} else {
			ok = sets.Get(name).ToBoolean()
		}
		t := map[string]string{"check": name}
		for k, x := range base {
			t[k] = x
		}
		x := 0.0
		if ok {
			x = 1
		}
		v.s.reg.add("checks", x, t)
		all = all && ok
	}
	return all, nil
}

// request is k6/http's request: it records http_reqs, http_req_duration
// and http_req_failed with the request's tags, and returns k6's response.
func (v *vu) request(method, url string, body, params goja.Value) *goja.Object {
	rt := v.rt
	var p struct {
		Headers map[string]string
		Tags    map[string]string
		Timeout time.Duration
	}
	p.Timeout = 60 * time.Second
	if params != nil && !goja.IsUndefined(params) && !goja.IsNull(params) {
		po := params.ToObject(rt)
		if h := po.Get("headers"); h != nil && !goja.IsUndefined(h) {
			p.Headers = tagMap(h)
		}
		p.Tags = tagMap(po.Get("tags"))
		if t := po.Get("timeout"); t != nil && !goja.IsUndefined(t) {
			if d, err := k6Duration(t.Export(), 0); err == nil {
				p.Timeout = d
			}
		}
	}
	var rd io.Reader
	if body != nil && !goja.IsUndefined(body) && !goja.IsNull(body) {
		rd = strings.NewReader(body.String())
	}
	ctx, cancel := context.WithTimeout(v.ctx, p.Timeout)
	defer cancel()
	res := rt.NewObject()
	headers := rt.NewObject()
	status, respBody, errText := 0, "", ""
	start := v.s.opts.Clock.Now()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err == nil {
		for k, x := range p.Headers {
			req.Header.Set(k, x)
		}
		var resp *http.Response
		if resp, err = v.s.client.Do(req); err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, respBody, err = resp.StatusCode, string(b), rerr
			for k := range resp.Header {
				_ = headers.Set(k, resp.Header.Get(k))
			}
		}
	}
	dur := v.s.opts.Clock.Now().Sub(start)
	if err != nil {
		errText, status = err.Error(), 0
	}
	tags := map[string]string{"method": method, "name": url, "status": strconv.Itoa(status)}
	for k, x := range p.Tags {
		tags[k] = x
	}
	if v.ctx.Err() == nil { // an interrupted request is not a sample, as in k6
		failed := 0.0
		if status < 200 || status >= 400 {
			failed = 1
		}
		v.s.reg.add("http_reqs", 1, tags)
		v.s.reg.add("http_req_duration", ms(dur), tags)
		v.s.reg.add("http_req_failed", failed, tags)
	}
	timings := rt.NewObject()
	_ = timings.Set("duration", ms(dur))
	_ = res.Set("status", status)
	_ = res.Set("body", respBody)
	_ = res.Set("headers", headers)
	_ = res.Set("timings", timings)
	_ = res.Set("error", errText)
	_ = res.Set("url", url)
	_ = res.Set("json", func(selector goja.Value) (goja.Value, error) {
		var x any
		if err := json.Unmarshal([]byte(respBody), &x); err != nil {
			return nil, fmt.Errorf("response of %s %s is not JSON: %w", method, url, err)
		}
		if selector != nil && !goja.IsUndefined(selector) {
			for _, part := range strings.Split(selector.String(), ".") {
				m, ok := x.(map[string]any)
				if !ok {
					return goja.Undefined(), nil
				}
				x = m[part]
			}
		}
		return rt.ToValue(x), nil
	})
	return res
}

// summaryData builds handleSummary's data: every metric with samples or
// thresholds, and every submetric a threshold names, with their values and
// threshold verdicts.
func (s *script) summaryData(ths []scenario.Threshold, elapsed time.Duration) (map[string]any, bool) {
	metrics := map[string]any{}
	okAll := true
	extraP := map[string][]float64{}
	for _, t := range ths {
		if t.Agg == "p" {
			extraP[submetricKey(t.Metric, t.Tags)] = append(extraP[submetricKey(t.Metric, t.Tags)], t.P)
		}
	}
	entry := func(name string, tags map[string]string) map[string]any {
		key := submetricKey(name, tags)
		if e, ok := metrics[key].(map[string]any); ok {
			return e
		}
		k, isTime, values, ok := s.reg.values(name, tags, elapsed, extraP[key])
		if !ok {
			return nil
		}
		contains := "default"
		if isTime {
			contains = "time"
		}
		e := map[string]any{"type": k.String(), "contains": contains, "values": values}
		metrics[key] = e
		return e
	}
	s.reg.mu.Lock()
	var names []string
	for name, m := range s.reg.m {
		if len(m.samples) > 0 {
			names = append(names, name)
		}
	}
	s.reg.mu.Unlock()
	sort.Strings(names)
	for _, name := range names {
		entry(name, nil)
	}
	for _, t := range ths {
		e := entry(t.Metric, t.Tags)
		ok := false
		if e != nil {
			var k kind
			for _, kk := range []kind{counter, gauge, rate, trend} {
				if kk.String() == e["type"] {
					k = kk
				}
			}
			if got, err := thresholdValue(t, k, e["values"].(map[string]float64)); err == nil {
				ok = t.Holds(got)
			}
			th, _ := e["thresholds"].(map[string]any)
			if th == nil {
				th = map[string]any{}
				e["thresholds"] = th
			}
			th[t.Expr] = map[string]any{"ok": ok}
		}
		okAll = okAll && ok
	}
	return map[string]any{
		"metrics": metrics,
		"state":   map[string]any{"testRunDurationMs": ms(elapsed), "isStdOutTTY": false},
		"options": map[string]any{"summaryTrendStats": []string{"avg", "min", "med", "max", "p(90)", "p(95)", "p(99)"}},
	}, okAll
}

// handleSummary calls the script's handleSummary (or prints the default
// summary) and writes what it returns: "stdout", "stderr", or files.
func (v *vu) handleSummary(data map[string]any) error {
	fn, ok := goja.AssertFunction(v.exports.Get("handleSummary"))
	if !ok {
		_, err := io.WriteString(v.s.opts.Stdout, textSummary(data))
		return err
	}
	out, err := fn(goja.Undefined(), v.rt.ToValue(data))
	if err != nil {
		return fmt.Errorf("k6js: handleSummary: %w", err)
	}
	obj := out.ToObject(v.rt)
	for _, key := range obj.Keys() {
		text := obj.Get(key).String()
		switch key {
		case "stdout":
			_, err = io.WriteString(v.s.opts.Stdout, text)
		case "stderr":
			_, err = io.WriteString(v.s.stderr, text)
		default:
			path := key
			if !filepath.IsAbs(path) && v.s.opts.Dir != "" {
				path = filepath.Join(v.s.opts.Dir, path)
			}
			err = os.WriteFile(path, []byte(text), 0o644)
		}
		if err != nil {
			return fmt.Errorf("k6js: handleSummary's %s: %w", key, err)
		}
	}
	return nil
}

// textSummary is jslib's textSummary, plainly: every metric with its
// values, and ✓/✗ before a metric with thresholds.
func textSummary(data map[string]any) string {
	metrics, _ := data["metrics"].(map[string]any)
	keys := make([]string, 0, len(metrics))
	for k := range metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("\n")
	for _, k := range keys {
		e, _ := metrics[k].(map[string]any)
		values, _ := e["values"].(map[string]float64)
		mark := " "
		if th, ok := e["thresholds"].(map[string]any); ok {
			mark = "✓"
			for _, r := range th {
				if rr, _ := r.(map[string]any); rr["ok"] != true {
					mark = "✗"
				}
			}
		}
		vk := make([]string, 0, len(values))
		for name := range values {
			vk = append(vk, name)
		}
		sort.Strings(vk)
		parts := make([]string, len(vk))
		for i, name := range vk {
			x := values[name]
			if e["contains"] == "time" && name != "count" {
				parts[i] = fmt.Sprintf("%s=%s", name, fmtMS(x))
			} else {
				parts[i] = fmt.Sprintf("%s=%s", name, strconv.FormatFloat(x, 'f', -1, 64))
			}
		}
		fmt.Fprintf(&b, " %s %s%s: %s\n", mark, k, strings.Repeat(".", max(1, 44-len(k))), strings.Join(parts, " "))
	}
	return b.String()
}

func fmtMS(x float64) string {
	if x >= 1000 {
		return fmt.Sprintf("%.2fs", x/1000)
	}
	return fmt.Sprintf("%.2fms", x)
}
