package sidecar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/sidecar/resilience"
)

// harness is a running sidecar with an HTTP client.
type harness struct {
	t      testing.TB
	s      *sidecar.Sidecar
	reg    *prometheus.Registry
	base   string
	client *http.Client
	cancel context.CancelFunc
	done   chan error
}

// start runs a sidecar on a free loopback port until the test ends.
func start(t testing.TB, cfg config.Config, opts sidecar.Options) *harness {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	s, err := sidecar.New(cfg, opts)
	if err != nil {
		t.Fatalf("sidecar.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, s: s, reg: opts.Registry, base: "http://" + s.Addr(), cancel: cancel, done: make(chan error, 1),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}}
	go func() { h.done <- s.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

// stop stops the sidecar and checks that Run ended cleanly.
func (h *harness) stop() {
	h.t.Helper()
	if h.cancel == nil {
		return
	}
	// Close the client's idle connections first: the server would wait 5s
	// for connections that never carried a request.
	h.client.CloseIdleConnections()
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		h.t.Fatal("the sidecar did not stop within 20s")
	}
	h.client.CloseIdleConnections()
}

// response is an HTTP answer with its JSON body decoded.
type response struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

// errCode returns error.code of an error answer.
func (r response) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// retryAfterMS returns error.retry_after_ms of an error answer.
// errField returns error.<name> of the body as a string, or "".
func (r response) errField(name string) string {
	e, _ := r.body["error"].(map[string]any)
	s, _ := e[name].(string)
	return s
}

func (r response) retryAfterMS() float64 {
	e, _ := r.body["error"].(map[string]any)
	v, _ := e["retry_after_ms"].(float64)
	return v
}

// do sends a request as a backend does: a body, and every POST, with
// Content-Type: application/json.
func (h *harness) do(method, path, body string) response {
	h.t.Helper()
	var header map[string]string
	if method == "POST" || body != "" {
		header = map[string]string{"Content-Type": "application/json"}
	}
	return h.request(method, path, "", header, body)
}

// request sends a request with the given Host (the base's if empty) and
// headers, and returns the answer.
func (h *harness) request(method, path, host string, header map[string]string, body string) response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Errorf("%s %s: %v", method, path, err) // may run off the test's goroutine: no Fatal
		return response{status: -1, raw: err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	checkAgainstSpec(h.t, req, resp.StatusCode, resp.Header, raw)
	r := response{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		r = h.decode(r)
	}
	return r
}

// decode decodes the JSON of r.raw into r.body.
func (h *harness) decode(r response) response {
	h.t.Helper()
	if len(bytes.TrimSpace([]byte(r.raw))) > 0 {
		if err := json.Unmarshal([]byte(r.raw), &r.body); err != nil {
			h.t.Errorf("answer is not JSON: %v: %s", err, r.raw)
		}
	}
	return r
}

// acquire calls POST /v1/providers/{p}/acquire.
func (h *harness) acquire(p string) response {
	h.t.Helper()
	return h.do("POST", "/v1/providers/"+p+"/acquire", `{"context":"search","ttl_seconds":30}`)
}

// breaker returns the /v1/breakers entry of provider p.
func (h *harness) breaker(p string) map[string]any {
	h.t.Helper()
	r := h.do("GET", "/v1/breakers", "")
	list, _ := r.body["breakers"].([]any)
	for _, b := range list {
		if m := b.(map[string]any); m["provider"] == p {
			return m
		}
	}
	h.t.Fatalf("GET /v1/breakers = %s, want provider %q", r.raw, p)
	return nil
}

// metric sums a metric family over the series whose labels include
// labels.
func (h *harness) metric(name string, labels map[string]string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatalf("Gather() = %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == k && lp.GetValue() == v)
				}
				if !found {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// fast is a provider policy for tests: quick retries, a breaker that
// needs 20 calls and trips on the ratio only, no bulkhead, no retry floor
// unless set.
func fast(fake *fakeserver.Server) config.Provider {
	return config.Provider{
		Endpoint: fake.Addr(), APIKey: fakeserver.DefaultAPIKey, Timeout: 2 * time.Second,
		Retry: resilience.RetryPolicy{MaxRetries: 2, InitialInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond},
		// The rules that count failures in a row or watch time are off:
		// the tests that use fast test something else, on a machine that
		// may stall the fake server for longer than the attempt-level
		// rules allow (the load tests run those against real servers).
		Breaker: resilience.BreakerPolicy{MinRequests: 20, OpenTimeout: time.Minute,
			ConsecutiveFailures: -1, ConsecutiveTimeouts: -1, OutageAfter: -1, SilenceAfter: -1},
		Bulkhead: resilience.BulkheadPolicy{MaxInFlight: -1},
	}
}

// one is a configuration with one provider named p.
func one(p string, pc config.Provider) config.Config {
	return config.Config{Providers: map[string]config.Provider{p: pc}}
}

// frozenClock reads one instant and schedules on the wall clock: what
// measures time by reading it (a retry budget's window) stands still,
// while timers (a retrier's waits) fire.
type frozenClock struct {
	clock.Real
	at time.Time
}

func (c frozenClock) Now() time.Time { return c.at }
