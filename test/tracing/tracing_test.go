// Package tracing_test checks trace context across the hop from a backend
// through the real sidecar to the real server: the same trace id in both
// sides' log lines, spans of both sides in one trace when OTLP export is
// on (to an OTLP/HTTP receiver in the test), and what tracing costs the
// hop (BenchmarkTracingHop, off and on side by side).
package tracing_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tracing"
)

var demoKeyRE = regexp.MustCompile(`demo API key:\s+(\S+)`)

// stack is a real server (SQLite, loopback) and a sidecar holding its demo
// key, logging at level into their own buffers, as cmd/server and
// cmd/sidecar log (JSON, tracing.LogHandler), with spans exported to otlp
// when it is set.
type stack struct {
	url               string
	serverLog, carLog *testenv.Output
}

func start(tb testing.TB, level slog.Level, otlp string) *stack {
	tb.Helper()
	st := &stack{serverLog: &testenv.Output{}, carLog: &testenv.Output{}}
	logger := func(w io.Writer) *slog.Logger {
		return slog.New(tracing.LogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})))
	}
	var out bytes.Buffer
	s, err := server.New(context.Background(), server.Config{
		Store:    "sqlite:" + filepath.Join(tb.TempDir(), "repool.db"),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", CheckpointInterval: time.Hour, OTLPEndpoint: otlp,
	}, server.Options{Out: &out, Log: logger(st.serverLog)})
	if err != nil {
		tb.Fatalf("server.New() = %v", err)
	}
	m := demoKeyRE.FindStringSubmatch(out.String())
	if m == nil {
		tb.Fatalf("the first start printed no demo key:\n%s", out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	srvDone := make(chan error, 1)
	go func() { srvDone <- s.Run(ctx) }()
	sc, err := sidecar.New(config.Config{Listen: "127.0.0.1:0", OTLPEndpoint: otlp,
		Providers: map[string]config.Provider{"default": {Endpoint: s.GRPCAddr(), APIKey: m[1]}}},
		sidecar.Options{Registry: prometheus.NewRegistry(), Log: logger(st.carLog)})
	if err != nil {
		cancel()
		tb.Fatalf("sidecar.New() = %v", err)
	}
	scDone := make(chan error, 1)
	go func() { scDone <- sc.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		for name, done := range map[string]chan error{"sidecar": scDone, "server": srvDone} {
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("%s Run() = %v", name, err)
				}
			case <-time.After(20 * time.Second): // a test timeout, not a measure
				tb.Errorf("the %s did not stop within 20s", name)
			}
		}
	})
	st.url = "http://" + sc.Addr() + "/v1/providers/default"
	return st
}

// post sends body to the sidecar's path with headers and expects 200.
func (st *stack) post(tb testing.TB, path, body string, headers map[string]string) {
	tb.Helper()
	req, _ := http.NewRequest("POST", st.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("POST %s = got %d %s, want 200", path, resp.StatusCode, b)
	}
}

// line is one JSON log line.
type line map[string]any

// calls returns the log's "call" lines with their trace and span ids, but
// the server's of AuthService (the sidecar's token, fetched apart from any
// call).
func calls(out *testenv.Output) []line {
	var ls []line
	for _, s := range strings.Split(out.String(), "\n") {
		var l line
		if json.Unmarshal([]byte(s), &l) == nil && l["msg"] == "call" && l["method"] != "/repool.v1.AuthService/IssueToken" {
			ls = append(ls, l)
		}
	}
	return ls
}

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID = "00f067aa0ba902b7"
)

// TestTraceIDInBothLogs: a call with the backend's traceparent and
// tracestate shows its trace id in the sidecar's line and in the server's,
// and the server sees the sidecar's span (a span id of the hop, not the
// backend's); a call without one gets a new trace, the same on both sides.
func TestTraceIDInBothLogs(t *testing.T) {
	st := start(t, slog.LevelDebug, "")
	st.post(t, "/resources", `{"resources":[{"id":"proxy-1"}]}`, map[string]string{
		"traceparent": "00-" + traceID + "-" + parentID + "-01", "tracestate": "vendor=abc",
	})
	car, srv := calls(st.carLog), calls(st.serverLog)
	if len(car) != 1 || len(srv) != 1 {
		t.Fatalf("call lines = got %d in the sidecar's log and %d in the server's, want 1 each\nsidecar:\n%s\nserver:\n%s", len(car), len(srv), st.carLog, st.serverLog)
	}
	if car[0]["trace_id"] != traceID || srv[0]["trace_id"] != traceID {
		t.Errorf("trace ids = got sidecar %v, server %v, want %s on both", car[0]["trace_id"], srv[0]["trace_id"], traceID)
	}
	if car[0]["span_id"] == parentID || srv[0]["span_id"] != car[0]["span_id"] {
		t.Errorf("span ids = got sidecar %v, server %v, want the sidecar's own (not the backend's %s) on both", car[0]["span_id"], srv[0]["span_id"], parentID)
	}
	if srv[0]["method"] != "/repool.v1.PoolService/Register" {
		t.Errorf("server's call line = got method %v, want Register", srv[0]["method"])
	}

	st.post(t, "/reports", `{"resource_id":"proxy-1","context":"c","outcome":"SUCCESS"}`, nil)
	car, srv = calls(st.carLog), calls(st.serverLog)
	if len(car) != 2 || len(srv) != 2 {
		t.Fatalf("call lines = got %d and %d, want 2 each", len(car), len(srv))
	}
	tid, _ := car[1]["trace_id"].(string)
	if len(tid) != 32 || tid == traceID || srv[1]["trace_id"] != tid {
		t.Errorf("trace ids of a call without traceparent = got sidecar %v, server %v, want one new id on both", car[1]["trace_id"], srv[1]["trace_id"])
	}
}

// receiver is an OTLP/HTTP trace receiver: it decodes each export
// (protobuf) and keeps the services seen per trace id.
type receiver struct {
	mu     sync.Mutex
	traces map[string]map[string]int // trace id -> service.name -> spans
}

func newReceiver(tb testing.TB) (*receiver, string) {
	r := &receiver{traces: map[string]map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var ex collectortrace.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &ex) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range ex.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					id := hex.EncodeToString(sp.GetTraceId())
					if r.traces[id] == nil {
						r.traces[id] = map[string]int{}
					}
					r.traces[id][service]++
				}
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	tb.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *receiver) services(traceID string) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.traces[traceID] {
		out[k] = v
	}
	return out
}

// TestSpansShareTheTrace: with otlp_endpoint on both sides, a call with a
// traceparent yields spans of the sidecar (its HTTP request and its gRPC
// call) and of the server in the backend's trace, exported over OTLP/HTTP.
func TestSpansShareTheTrace(t *testing.T) {
	rcv, endpoint := newReceiver(t)
	st := start(t, slog.LevelInfo, endpoint)
	st.post(t, "/resources", `{"resources":[{"id":"proxy-1"}]}`, map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"})
	// The batch exporter sends every 5 s: the spans arrive within that.
	testenv.Eventually(t, 30*time.Second, "spans of the sidecar and the server in trace "+traceID, func() bool {
		s := rcv.services(traceID)
		return s["repool-sidecar"] >= 2 && s["repool-server"] >= 1
	})
}

// BenchmarkTracingHop is one report through the sidecar to the server
// (SQLite, loopback) with a traceparent, on two stacks side by side: one
// with tracing off (trace context carried and logged only: the default),
// one with spans exported to an OTLP/HTTP receiver on loopback. Each
// iteration calls both, in alternating order, so that the machine's load
// falls on both alike; it reports each one's mean (off_us/call,
// otlp_us/call) and their ratio (otlp/off).
func BenchmarkTracingHop(b *testing.B) {
	_, endpoint := newReceiver(b)
	stacks := []*stack{start(b, slog.LevelInfo, ""), start(b, slog.LevelInfo, endpoint)}
	for _, st := range stacks {
		st.post(b, "/resources", `{"resources":[{"id":"proxy-1"}]}`, nil)
	}
	h := map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}
	var spent [2]time.Duration
	n := 0
	b.ResetTimer()
	for b.Loop() {
		for k := range 2 {
			i := (n + k) % 2
			began := time.Now()
			stacks[i].post(b, "/reports", `{"resource_id":"proxy-1","context":"c","outcome":"SUCCESS"}`, h)
			spent[i] += time.Since(began)
		}
		n++
	}
	off, on := spent[0].Seconds()*1e6/float64(n), spent[1].Seconds()*1e6/float64(n)
	b.ReportMetric(off, "off_us/call")
	b.ReportMetric(on, "otlp_us/call")
	b.ReportMetric(on/off, "otlp/off")
}
