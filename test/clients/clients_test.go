// Package clients runs the "use it from your backend" clients of
// docs/backend.md (docs/clients: Python with its standard library, Node
// with its built-in fetch, Go with its standard library) against a real
// server and sidecar, so that the page's code works as written.
package clients

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
)

var demoKeyRE = regexp.MustCompile(`demo API key:\s+(\S+)`)

// timedRE is how a client says the latency the pool keeps for the
// resource of its last lease: a whole number of milliseconds, 2 or more.
var timedRE = regexp.MustCompile(`-\d search latency ([2-9]|[1-9]\d+) ms`)

// stack starts the real server (SQLite, loopback, its first-start demo
// tenant) and a sidecar holding the demo key as provider "default", until
// the test ends, and returns the sidecar's base URL.
func stack(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	s, err := server.New(context.Background(), server.Config{
		Store:    "sqlite:" + filepath.Join(t.TempDir(), "repool.db"),
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", CheckpointInterval: time.Hour,
	}, server.Options{Out: &out})
	if err != nil {
		t.Fatalf("server.New() = %v", err)
	}
	m := demoKeyRE.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the first start printed no demo key:\n%s", out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	srvDone := make(chan error, 1)
	go func() { srvDone <- s.Run(ctx) }()
	sc, err := sidecar.New(config.Config{Listen: "127.0.0.1:0",
		Providers: map[string]config.Provider{"default": {Endpoint: s.GRPCAddr(), APIKey: m[1]}}},
		sidecar.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		cancel()
		t.Fatalf("sidecar.New() = %v", err)
	}
	scDone := make(chan error, 1)
	go func() { scDone <- sc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for name, done := range map[string]chan error{"sidecar": scDone, "server": srvDone} {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s Run() = %v", name, err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("the %s did not stop within 20s", name)
			}
		}
	})
	return "http://" + sc.Addr()
}

// TestClients runs each client of docs/clients against its own server and
// sidecar (the clients register resources of their own names, but each
// starts from a fresh pool) and checks what it printed: 50 uses in 50 round
// trips, after each failure a next lease on another resource (the
// default exclusion), an affinity key's four uses on one resource and its
// move after a failure, and for Node the registered events it read from the
// stream. Then
// again through a proxy that answers two of the releases as a sidecar does
// when something on the way is transient: one refused before it reaches the
// server (503 unavailable, bulkhead-full, retry_after_ms), and one carried
// out whose answer is lost (504 deadline_exceeded). Each client must retry
// both, take the retried release's not_found as released, and still make
// its 50 uses, in 53 round trips (the refused release's retry; the lost
// one's retry and the acquire after it).
func TestClients(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		argv []string
		want []string
	}{
		{"python", []string{"python3", "docs/clients/backend.py"}, []string{"py-0 quarantine none, active, search success rate", "(recent ", "first page 2 resources", "the same resource 0 times"}},
		{"node", []string{"node", "docs/clients/backend.mjs"}, []string{"3 registered events", "js-0 quarantine none", "the same resource 0 times"}},
		{"go", []string{"go", "run", "./docs/clients/go"}, []string{"go-0 quarantine none", "the same resource 0 times"}},
	} {
		for _, transient := range []bool{false, true} {
			name := c.name
			if transient {
				name += "/transient releases"
			}
			t.Run(name, func(t *testing.T) {
				if _, err := exec.LookPath(c.argv[0]); err != nil {
					t.Fatalf("%s is not installed (scripts/test installs it): %v", c.argv[0], err)
				}
				base, want := stack(t), c.name+": 50 uses in 50 round trips"
				var inj *injector
				if transient {
					inj = inject(t, base)
					base, want = inj.url, c.name+": 50 uses in 53 round trips"
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, c.argv[0], c.argv[1:]...)
				cmd.Dir = root
				cmd.Env = append(os.Environ(), "SIDECAR="+base, "PROVIDER=default")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", strings.Join(c.argv, " "), err, out)
				}
				t.Logf("%s", bytes.TrimSpace(out))
				for _, w := range append(c.want, want) {
					if !strings.Contains(string(out), w) {
						t.Errorf("%s printed %q, want it to say %q", c.name, out, w)
					}
				}
				// An affinity key keeps a session on one resource and
				// moves it after a failure.
				for _, w := range []string{"affinity: the same resource 4 of 4 times, rebound after a failure"} {
					if !strings.Contains(string(out), w) {
						t.Errorf("%s printed %q, want it to say %q", c.name, out, w)
					}
				}
				// Each use sends its measured latency: the resource of the
				// last lease shows a mean of at least the 2 ms of work.
				if !timedRE.Match(out) {
					t.Errorf("%s printed %q, want it to say the last resource's search latency, at least 2 ms", c.name, out)
				}
				if inj != nil && inj.injected.Load() != 2 {
					t.Errorf("the proxy answered %d releases itself, want 2", inj.injected.Load())
				}
			})
		}
	}
}

// injector is a proxy in front of a sidecar that answers the 3rd release it
// sees with a refusal (not forwarded) and the 7th with a lost answer
// (forwarded, then answered 504).
type injector struct {
	url      string
	releases atomic.Int32
	injected atomic.Int32
}

func inject(t *testing.T, sidecar string) *injector {
	t.Helper()
	target, err := url.Parse(sidecar)
	if err != nil {
		t.Fatal(err)
	}
	inj := &injector{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/release") {
			proxy.ServeHTTP(w, r)
			return
		}
		switch inj.releases.Add(1) {
		case 3:
			inj.injected.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Repool-Fast-Fail", "bulkhead-full")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"injected: the bulkhead refused the attempt","retry_after_ms":5}}`)
		case 7:
			inj.injected.Add(1)
			rec := httptest.NewRecorder()
			proxy.ServeHTTP(rec, r) // the release happens; its answer is lost
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Repool-Fast-Fail", "timeout")
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = io.WriteString(w, `{"error":{"code":"deadline_exceeded","message":"injected: the answer was lost"}}`)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	inj.url = srv.URL
	return inj
}
