package sidecar_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
)

var demoKeyRE = regexp.MustCompile(`demo API key:\s+(\S+)`)

// realServer starts the real repool server (SQLite, loopback, no request
// limit worth the name) until the test ends, and returns its gRPC address
// and the demo tenant's API key.
func realServer(tb testing.TB) (grpcAddr, apiKey string) {
	tb.Helper()
	return runServer(tb, serverConfig(tb.TempDir()))
}

// serverConfig is the configuration of realServer, its store in dir.
func serverConfig(dir string) server.Config {
	return server.Config{
		Store:    "sqlite:" + filepath.Join(dir, "repool.db"),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Limits:             limits.Values{}.With(limits.RatePerSecond, 1e6).With(limits.Burst, 1e6),
		CheckpointInterval: time.Hour,
	}
}

// runServer runs the real server of cfg until the test ends, and returns
// its gRPC address and the demo tenant's API key.
func runServer(tb testing.TB, cfg server.Config) (grpcAddr, apiKey string) {
	tb.Helper()
	var out bytes.Buffer
	s, err := server.New(context.Background(), cfg, server.Options{Out: &out})
	if err != nil {
		tb.Fatalf("server.New() = %v", err)
	}
	m := demoKeyRE.FindStringSubmatch(out.String())
	if m == nil {
		tb.Fatalf("the server's first start printed no demo API key:\n%s", out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("server Run() = %v", err)
			}
		case <-time.After(20 * time.Second):
			tb.Errorf("the server did not stop within 20s")
		}
	})
	return s.GRPCAddr(), m[1]
}

// TestEndToEnd runs a backend's round through the sidecar against the real
// server: register, acquire, report, renew, release, and the event stream
// with a resume.
func TestEndToEnd(t *testing.T) {
	addr, key := realServer(t)
	h := start(t, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})
	const p = "/v1/providers/demo"

	// Watch the events from the start.
	req, _ := http.NewRequest("GET", h.base+p+"/events", nil)
	resp, err := h.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET events = %v, %v", resp, err)
	}
	defer resp.Body.Close()

	r := h.do("POST", p+"/resources", `{"resources":[{"id":"proxy-1","capacity":2,"labels":{"region":"eu"}},{"id":"proxy-2","labels":{"region":"us"}}]}`)
	if r.status != 200 || r.body["registered"] != 2.0 {
		t.Fatalf("register = %d %s, want 2 registered", r.status, r.raw)
	}
	r = h.do("POST", p+"/acquire", `{"context":"product-list","ttl_seconds":30,"labels":{"region":"eu"}}`)
	lease, _ := r.body["lease"].(map[string]any)
	if r.status != 200 || lease["resource_id"] != "proxy-1" || lease["context"] != "product-list" {
		t.Fatalf("acquire = %d %s, want a lease on proxy-1", r.status, r.raw)
	}
	id, fencing := lease["lease_id"].(string), lease["fencing_token"].(string)
	if id == "" || fencing == "" || lease["expires_at"] == "" {
		t.Fatalf("lease = %v, want an id, a fencing token (string) and an expiry", lease)
	}
	r = h.do("POST", p+"/reports", fmt.Sprintf(`{"resource_id":"proxy-1","context":"product-list","outcome":"SUCCESS","lease_id":%q,"fencing_token":%q}`, id, fencing))
	if r.status != 200 {
		t.Fatalf("report = %d %s", r.status, r.raw)
	}
	r = h.do("POST", p+"/leases/"+id+"/renew", fmt.Sprintf(`{"fencing_token":%q,"ttl_seconds":60}`, fencing))
	if r.status != 200 {
		t.Fatalf("renew = %d %s", r.status, r.raw)
	}
	r = h.do("POST", p+"/leases/"+id+"/release", fmt.Sprintf(`{"fencing_token":%q,"outcome":"SUCCESS"}`, fencing))
	if r.status != 200 || r.raw != "{}\n" {
		t.Fatalf("release = %d %s, want 200 {}", r.status, r.raw)
	}
	// Business errors come back with their status, and never trip the breaker.
	r = h.do("POST", p+"/leases/"+id+"/release", fmt.Sprintf(`{"fencing_token":%q}`, fencing))
	if r.status != 404 || r.errCode() != "not_found" {
		t.Fatalf("second release = %d %s, want 404 not_found", r.status, r.raw)
	}
	r = h.do("POST", p+"/acquire", `{"context":"","ttl_seconds":30}`)
	if r.status != 400 || r.errCode() != "invalid_argument" {
		t.Fatalf("acquire without a context = %d %s, want 400 invalid_argument", r.status, r.raw)
	}

	evs := readEvents(t, bufio.NewScanner(resp.Body), 2)
	if evs[0].event != "registered" || evs[1].event != "registered" || evs[0].id == "" {
		t.Fatalf("events = %+v, want two registered events with ids", evs)
	}
	// Resume after the first event: the second comes again.
	req, _ = http.NewRequest("GET", h.base+p+"/events", nil)
	req.Header.Set("Last-Event-ID", evs[0].id)
	resumed, err := h.client.Do(req)
	if err != nil || resumed.StatusCode != 200 {
		t.Fatalf("GET events with Last-Event-ID = %v, %v", resumed, err)
	}
	defer resumed.Body.Close()
	if again := readEvents(t, bufio.NewScanner(resumed.Body), 1); again[0].id != evs[1].id {
		t.Fatalf("resumed after %s = %+v, want event %s", evs[0].id, again[0], evs[1].id)
	}
	if b := h.breaker("demo"); b["state"] != "closed" {
		t.Fatalf("breaker = %v, want closed", b)
	}
}
