package k6js

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// server answers POST /ok with 200 {"lease":{"id":"L<n>"}} and POST /fail
// with 503 and X-Repool-Fast-Fail, and records the iterations it saw.
func server(t *testing.T) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		switch r.URL.Path {
		case "/ok":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"lease":{"id":"L1"}}`))
		default:
			w.Header().Set("X-Repool-Fast-Fail", "circuit-open")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

const testScript = `
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
import { Rate, Trend } from 'k6/metrics';
import { textSummary } from 'https://jslib.k6.io/k6-summary/0.0.2/index.js';

const cfg = JSON.parse(open('cfg.json'));
const fastFail = new Rate('fast_fail');
const leaseLen = new Trend('lease_len');

export const options = {
  scenarios: { s: { executor: 'constant-arrival-rate', rate: cfg.rate, timeUnit: '1s', duration: '500ms',
                    preAllocatedVUs: 2, maxVUs: 4, gracefulStop: '1s' } },
  thresholds: {
    'http_req_failed{path:ok}': ['rate==0'],
    'fast_fail{path:fail}': ['rate==1'],
    'checks': ['rate>0.99'],
    'http_req_duration{path:ok}': ['p(95)<5000', 'p(42)>=0'],
  },
};

export function setup() {
  http.post(__ENV.BASE + '/setup', 'hello');
  return { token: 'T' };
}

export default function (data) {
  const i = exec.scenario.iterationInTest;
  const path = i % 2 === 0 ? 'ok' : 'fail';
  const res = http.post(__ENV.BASE + '/' + path, JSON.stringify({ i, token: data.token }), { tags: { path }, timeout: '5s' });
  check(res, { 'is 200': (r) => r.status === 200 }, { path });
  if (res.status === 200) {
    leaseLen.add(res.json('lease.id').length, { path });
  } else {
    fastFail.add(!!res.headers['X-Repool-Fast-Fail'], { path });
  }
}

export function teardown(data) {
  http.post(__ENV.BASE + '/teardown', data.token);
}

export function handleSummary(data) {
  return {
    stdout: textSummary(data, { indent: ' ' }),
    'out.json': JSON.stringify({ reqs: data.metrics['http_reqs'].values.count,
                                 ok: data.metrics['http_req_failed{path:ok}'].values.rate,
                                 p42: data.metrics['http_req_duration{path:ok}'].values['p(42)'] }),
  };
}
`

// TestRunScript runs a script that uses every part of the subset against
// a test server: setup's data reaches the iterations and teardown, the
// iterations follow the arrival rate, checks, custom metrics, submetrics and
// thresholds are evaluated, and handleSummary's outputs are written.
func TestRunScript(t *testing.T) {
	dir := t.TempDir()
	srv, seen := server(t)
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cfg.json", `{"rate": 20}`)
	write("s.js", testScript)
	var out bytes.Buffer
	res, err := Run(context.Background(), Options{Script: filepath.Join(dir, "s.js"), Env: map[string]string{"BASE": srv.URL},
		Stdout: &out, Stderr: &out, Dir: dir})
	if err != nil {
		t.Fatalf("Run() = %v\n%s", err, out.String())
	}
	// 500ms at 20/s: iterations 0..9, half of them failing, so the
	// checks threshold is crossed and the others hold.
	if res.ThresholdsOK {
		t.Errorf("ThresholdsOK = true, want false: half the checks failed\n%s", out.String())
	}
	metrics := res.Data["metrics"].(map[string]any)
	th := func(key, expr string) bool {
		e, _ := metrics[key].(map[string]any)
		r, _ := e["thresholds"].(map[string]any)[expr].(map[string]any)
		return r["ok"] == true
	}
	for key, want := range map[string]bool{"http_req_failed{path:ok}|rate==0": true, "fast_fail{path:fail}|rate==1": true,
		"checks|rate>0.99": false, "http_req_duration{path:ok}|p(95)<5000": true} {
		k, expr, _ := strings.Cut(key, "|")
		if got := th(k, expr); got != want {
			t.Errorf("threshold %s %s = %v, want %v", k, expr, got, want)
		}
	}
	if !strings.Contains(out.String(), "✗ checks") || !strings.Contains(out.String(), "✓ fast_fail{path:fail}") {
		t.Errorf("textSummary lacks the verdicts:\n%s", out.String())
	}
	raw, err := os.ReadFile(filepath.Join(dir, "out.json"))
	if err != nil {
		t.Fatalf("handleSummary's file: %v", err)
	}
	var sum struct {
		Reqs, OK, P42 float64
	}
	if err := json.Unmarshal(raw, &sum); err != nil || sum.Reqs != 12 || sum.OK != 0 || sum.P42 <= 0 {
		t.Errorf("out.json = %s (%v), want 12 requests (10 iterations, setup, teardown), ok rate 0, a p(42)", raw, err)
	}
	calls := strings.Join(*seen, "\n")
	for _, want := range []string{"POST /setup hello", `POST /ok {"i":0,"token":"T"}`, `POST /fail {"i":9,"token":"T"}`, "POST /teardown T"} {
		if !strings.Contains(calls, want) {
			t.Errorf("server saw\n%s\nwant %q", calls, want)
		}
	}
}

func TestRunRefusesWhatItDoesNotImplement(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, script, want string }{
		{"unknown module", "import ws from 'k6/ws';\nexport default function () {}\n", `module "k6/ws"`},
		{"another executor", "export const options = { scenarios: { s: { executor: 'ramping-vus' } } };\nexport default function () {}\n", "only constant-arrival-rate"},
		{"no options", "export default function () {}\n", "no options"},
		{"a bad threshold", "export const options = { scenarios: { s: { executor: 'constant-arrival-rate', rate: 1, duration: '1s', preAllocatedVUs: 1 } }, thresholds: { x: ['p95<1'] } };\nexport default function () {}\n", "want AGG OP NUMBER"},
		{"export syntax it does not read", "export { a };\n", "only `import x from`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".js")
			if err := os.WriteFile(path, []byte(tt.script), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := Run(ctx, Options{Script: path}); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestRewriteKeepsLines: the rewritten script has the file's line numbers.
func TestRewriteKeepsLines(t *testing.T) {
	src := "import http from 'k6/http';\nimport { a as b, c } from 'x';\nexport const o = 1;\nexport function f() {}\nexport default function () {}\n"
	out, err := rewrite(src)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	want := []string{`const http = __require("k6/http").default;`, `const { a: b, c } = __require("x");`, "const o = __exports.o = 1;",
		"function f() {}", "__exports.default = function () {}"}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d = %q, want %q", i+1, lines[i], w)
		}
	}
	if !strings.Contains(out, "__exports.f = f;") {
		t.Errorf("rewrite() = %q, want f exported at the end", out)
	}
}
