package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/loadtest/runner"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/scenarios"
	"github.com/repool/repool/loadtest/summary"
	"github.com/repool/repool/loadtest/topology"
)

// TestMain lets the test binary serve as the servers and the sidecar that
// the runner starts as child processes.
func TestMain(m *testing.M) {
	if child, code := topology.RunChild(); child {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// startPostgres starts the PostgreSQL cluster the test's runs share, and
// gives the test six minutes (TestShortScenarios runs seven scenarios).
func startPostgres(t *testing.T) (context.Context, *topology.Postgres) {
	t.Helper()
	if topology.PostgresBinDir() == "" {
		t.Fatal("PostgreSQL is not installed: run scripts/test, which installs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	pg, err := topology.StartPostgres(ctx)
	if err != nil {
		t.Fatalf("StartPostgres() = %v", err)
	}
	t.Cleanup(func() { pg.Close() })
	return ctx, pg
}

// readJSON decodes the JSON object in the file at path.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s does not decode: %v", path, err)
	}
	return doc
}

// TestShortScenarios runs the short variant of every scenario file of
// loadtest/scenarios end to end — real servers (PostgreSQL HA pairs),
// HAProxy, toxiproxy, the sidecar, the faults — and checks that each run
// applied every planned fault and produced a summary, a JSON summary with
// the required fields and evaluated thresholds, and an HTML report. It
// checks that the harness works, not that anything was fast: the
// thresholds may hold or not. provider-down also runs the naive client
// (-mode both) for the before/after table.
func TestShortScenarios(t *testing.T) {
	files, err := fs.Glob(scenarios.FS, "*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("scenario files = %v, %v; want some", files, err)
	}
	ctx, pg := startPostgres(t)

	for _, file := range files {
		name, mode := strings.TrimSuffix(file, ".json"), runner.ModeSidecar
		if name == "provider-down" {
			mode = runner.ModeBoth // the before/after table too
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var out bytes.Buffer
			o := runner.Options{
				Scenario: name, Short: true, Mode: mode, Store: runner.StorePostgres, Dir: dir,
				JSON: filepath.Join(dir, "summary.json"), HTML: filepath.Join(dir, "report.html"), Out: &out,
			}
			o.Postgres = pg
			res, err := runner.Execute(ctx, o)
			if err != nil {
				t.Fatalf("Execute(%s, %s) = %v\n%s", name, mode, err, out.String())
			}
			t.Logf("%s", out.String())
			for _, want := range []string{"http_req_duration", "dropped_iterations", "vus_max", "thresholds"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("summary lacks %q", want)
				}
			}
			doc := readJSON(t, o.JSON)
			runs := []any{doc}
			if mode == runner.ModeBoth {
				runs, _ = doc["runs"].([]any)
				if len(runs) != 2 || doc["before_after"] == nil {
					t.Fatalf("JSON of -mode both = %d runs, before_after %v; want 2 runs and a table", len(runs), doc["before_after"] != nil)
				}
				if !strings.Contains(out.String(), "naive/sidecar") {
					t.Error("summary lacks the before/after table")
				}
			}
			for _, r := range runs {
				checkRun(t, r.(map[string]any), name, res.Scenario.Names())
			}
			html, err := os.ReadFile(o.HTML)
			if err != nil || !bytes.Contains(html, []byte("<svg")) {
				t.Errorf("HTML report = %d bytes, %v; want one with SVG charts", len(html), err)
			}
			if len(res.Runs) == 0 || res.Runs[0].Iterations+res.Runs[0].DroppedIterations == 0 {
				t.Errorf("Execute() ran no iteration")
			}
			for _, r := range res.Runs {
				checkFaultsApplied(t, r, res.Scenario.Faults)
				if r.Mode != runner.ModeSidecar {
					continue
				}
				// The targets a short run on a loaded machine can show
				// (summary.Target.Short): a blackhole and an outage known
				// bad within a second.
				for _, tg := range r.Targets {
					if tg.Short && !tg.OK {
						t.Errorf("target %s{provider:%s}: want %s, got %s", tg.Name, tg.Provider, tg.Want, tg.Got)
					}
				}
				if len(res.Scenario.Groups) > 0 {
					checkRebalance(t, r, readJSON(t, o.JSON))
				}
			}
		})
	}
}

// Bounds of the short rebalance run's quiet tenants: their pooled p90
// after the move at most quietFactor × before, or quietFloor. A short run
// has about 150–250 quiet calls per phase, so its p99 is one of its two
// slowest calls: one scheduling hiccup of a loaded machine sets it (a run
// of the whole test command, packages in parallel under -race, took the
// three quiet tenants' p99 from 14.6 ms to 104 ms, every call answered, no
// failure — one stall that hit all three at once). The p90 is the 15th to
// 25th slowest: a hiccup does not move it, while what the check is there
// to catch — the move hurting the other tenants, their calls refused and
// retried, or served slowly, for seconds — moves it far above the bound;
// the floor keeps a quiet machine's few-millisecond figures from turning
// noise into a failure. It is a second, not less: with one core kept busy
// beside the whole test command (its other packages running too) the quiet
// p90 after the move went from 6.1 ms before to 259 ms, every quiet call
// answered — a busy machine, not the move — while a move that hurts the
// other tenants holds their calls for seconds. The figure itself is
// printed as a measure: line and judged by the full-length run's
// quiet_p99_after_move target, not here.
const (
	quietFactor = 4
	quietFloor  = time.Second
)

// checkRebalance checks what a short rebalance run can show: the move
// completed (its window measured, its events and the JSON's rebalance
// section there) and the quiet tenants' p99 did not get clearly worse. The
// 0 failed calls per tenant are the short targets checked above.
func checkRebalance(t *testing.T, s *summary.Summary, doc map[string]any) {
	t.Helper()
	r := s.Rebalance
	if r == nil {
		t.Fatal("the run has no rebalance section: the move did not complete")
	}
	if r.WindowS <= 0 || r.WindowS > 30 || r.To != "solo" || r.From != "default" {
		t.Errorf("move = %+v; want noisy from default to solo, its window measured (0 < s ≤ 30)", r.Move)
	}
	reb, _ := doc["rebalance"].(map[string]any)
	if reb == nil || reb["window_s"] == nil || reb["quiet"] == nil || reb["providers"] == nil {
		t.Errorf("JSON rebalance = %v; want window_s, quiet and providers", reb)
	}
	moved := 0
	for name, ph := range r.Providers {
		if ph.Before.Requests == 0 || ph.After.Requests == 0 {
			t.Errorf("%s: %d calls before the move, %d after; want calls in both phases", name, ph.Before.Requests, ph.After.Requests)
		}
		if ph.Moved {
			moved++
		}
	}
	if moved != 1 {
		t.Errorf("%d tenants marked moved, want 1", moved)
	}
	q := r.Quiet
	bound := max(quietFactor*q.Before.P90MS, float64(quietFloor.Milliseconds()))
	t.Logf("quiet tenants' p90: %.1f ms before the move, %.1f ms after (bound %.1f ms; p99 %.1f → %.1f ms); move window %.3f s",
		q.Before.P90MS, q.After.P90MS, bound, q.Before.P99MS, q.After.P99MS, r.WindowS)
	t.Logf("measure: rebalance_short_quiet_p90_before_ms=%.1f", q.Before.P90MS)
	t.Logf("measure: rebalance_short_quiet_p90_after_ms=%.1f", q.After.P90MS)
	t.Logf("measure: rebalance_short_move_window_s=%.3f", r.WindowS)
	if q.After.P90MS > bound {
		t.Errorf("quiet tenants' p90 after the move = %.1f ms, want ≤ max(%d × %.1f ms before, %v)", q.After.P90MS, quietFactor, q.Before.P90MS, quietFloor)
	}
}

// TestScriptMatchesGoRunner runs loadtest/k6/repool.js itself (run -script:
// its requests, checks, thresholds and handleSummary, in k6js) and the Go
// runner on the short provider-down scenario, and compares the two JSON
// summaries: the script's has the Go runner's shape (every field it writes
// is one of the Go runner's, with the same meaning), and the numbers agree
// as two runs of one scenario on one machine can.
func TestScriptMatchesGoRunner(t *testing.T) {
	ctx, pg := startPostgres(t)
	dir := t.TempDir()
	var out bytes.Buffer
	o := runner.Options{Scenario: "provider-down", Short: true, Mode: runner.ModeSidecar, Store: runner.StorePostgres, Dir: dir,
		JSON: filepath.Join(dir, "k6.json"), Out: &out}
	o.Postgres = pg
	if _, err := runner.RunScript(ctx, o, filepath.Join("..", "k6", "repool.js")); err != nil {
		t.Fatalf("RunScript() = %v\n%s", err, out.String())
	}
	t.Logf("script:\n%s", out.String())
	for _, want := range []string{"checks", "http_req_duration{provider:us}", "fast_fail_within_10ms{provider:us}", "dropped_iterations"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the script's summary (handleSummary's stdout) lacks %q", want)
		}
	}
	o.JSON = filepath.Join(dir, "go.json")
	if _, err := runner.Execute(ctx, o); err != nil {
		t.Fatalf("Execute() = %v", err)
	}
	k6, goRun := readJSON(t, filepath.Join(dir, "k6.json")), readJSON(t, filepath.Join(dir, "go.json"))
	if k6["mode"] != "k6" || k6["scenario"] != "provider-down" || k6["short"] != true {
		t.Fatalf("script's summary = mode %v, scenario %v, short %v; want k6, provider-down, true", k6["mode"], k6["scenario"], k6["short"])
	}
	var sameShape func(path string, a, b map[string]any)
	sameShape = func(path string, a, b map[string]any) {
		for k, v := range a {
			w, ok := b[k]
			if !ok {
				t.Errorf("%s%s: in the script's summary, not in the Go runner's", path, k)
				continue
			}
			if am, ok := v.(map[string]any); ok {
				bm, ok := w.(map[string]any)
				if !ok {
					t.Errorf("%s%s: an object in the script's summary, %T in the Go runner's", path, k, w)
					continue
				}
				sameShape(path+k+".", am, bm)
			}
		}
	}
	sameShape("", k6, goRun)
	num := func(doc map[string]any, keys ...string) float64 {
		var v any = doc
		for _, k := range keys {
			v = v.(map[string]any)[k]
		}
		f, _ := v.(float64)
		return f
	}
	// Both ran 8 s at 50 iterations/s; us was down for 4 s of them.
	for _, doc := range []map[string]any{k6, goRun} {
		it := num(doc, "iterations") + num(doc, "dropped_iterations")
		// Not eu's health: on a loaded machine the healthy provider's
		// HA pair can lose its leader for a second; that is the topology's,
		// not a difference between the runners.
		us := num(doc, "providers", "us", "error_rate")
		if it < 300 || it > 420 || us < 0.1 || num(doc, "providers", "us", "fast_fail_marked") < 0.9 {
			t.Errorf("%s run: %v iterations, us error rate %.3f, us fast-fail marked %.3f; want about 400, the outage's failures (> 10%%) marked fast-fail (> 90%%)",
				doc["mode"], it, us, num(doc, "providers", "us", "fast_fail_marked"))
		}
	}
	if a, b := num(k6, "providers", "us", "error_rate"), num(goRun, "providers", "us", "error_rate"); a > 2*b+0.05 || b > 2*a+0.05 {
		t.Errorf("us error rate: script %.3f, Go runner %.3f; want them within 2× of each other", a, b)
	}
}

// TestUnknownStore: Execute, Serve and RunScript reject a store they do not know
// before starting anything.
func TestUnknownStore(t *testing.T) {
	o := runner.Options{Scenario: "baseline", Store: "bogus", Out: io.Discard}
	for name, run := range map[string]func() error{
		"Execute": func() error { _, err := runner.Execute(context.Background(), o); return err },
		"Serve":   func() error { return runner.Serve(context.Background(), o) },
		"RunScript": func() error {
			_, err := runner.RunScript(context.Background(), o, filepath.Join("..", "k6", "repool.js"))
			return err
		},
	} {
		if err := run(); err == nil || !strings.Contains(err.Error(), `store "bogus"`) {
			t.Errorf("%s(Store: bogus) = %v, want an error naming the store", name, err)
		}
	}
}

// checkFaultsApplied checks that run has a "fault on" event for every
// planned fault. Execute fails on a fault that failed to apply; this also
// catches one that the run ended before applying.
func checkFaultsApplied(t *testing.T, run *summary.Summary, faults []scenario.Fault) {
	t.Helper()
	planned := map[string]int{} // by the event's prefix
	for _, f := range faults {
		planned["fault on: "+f.Provider+" "+f.Kind+":"]++
	}
	for prefix, want := range planned {
		got := 0
		for _, e := range run.Events {
			if strings.HasPrefix(e.Text, prefix) {
				got++
			}
		}
		if got != want {
			t.Errorf("%s run: %d events %q, want %d (one per planned fault); events: %+v", run.Mode, got, prefix, want, run.Events)
		}
	}
}

func checkRun(t *testing.T, run map[string]any, scenarioName string, names []string) {
	t.Helper()
	for _, k := range []string{"mode", "scenario", "iterations", "dropped_iterations", "max_vus", "providers", "thresholds"} {
		if _, found := run[k]; !found {
			t.Errorf("JSON summary lacks %q", k)
		}
	}
	if run["scenario"] != scenarioName {
		t.Errorf("JSON scenario = %v, want %s", run["scenario"], scenarioName)
	}
	providers, _ := run["providers"].(map[string]any)
	if len(providers) != len(names) {
		t.Fatalf("JSON providers = %v, want %v", providers, names)
	}
	for name, p := range providers {
		for _, k := range []string{"requests", "errors", "avg_ms", "p95_ms", "p99_ms", "fast_fail_within_10ms", "fast_fail_within_100ms"} {
			if _, found := p.(map[string]any)[k]; !found {
				t.Errorf("JSON providers.%s lacks %q", name, k)
			}
		}
		if p.(map[string]any)["requests"].(float64) == 0 {
			t.Errorf("JSON providers.%s.requests = 0, want traffic", name)
		}
	}
	ths, _ := run["thresholds"].([]any)
	if len(ths) == 0 {
		t.Fatal("JSON thresholds = none, want the scenario's thresholds evaluated")
	}
	for _, th := range ths {
		m := th.(map[string]any)
		if _, found := m["ok"]; !found || m["error"] != nil {
			t.Errorf("threshold %v %v was not evaluated: %v", m["metric"], m["expr"], m["error"])
		}
	}
}
