// Package clients runs the "use it from your backend" clients of
// docs/backend.md (docs/clients: Python with its standard library, Node
// with its built-in fetch, Go with its standard library) against a real
// server and sidecar, so that the page's code works as written.
package clients

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
)

var demoKeyRE = regexp.MustCompile(`demo API key:\s+(\S+)`)

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
// trips, and for Node the registered events it read from the stream.
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
		{"python", []string{"python3", "docs/clients/backend.py"}, []string{"python: 50 uses in 50 round trips", "py-0 quarantine none", "first page 2 resources"}},
		{"node", []string{"node", "docs/clients/backend.mjs"}, []string{"node: 50 uses in 50 round trips", "3 registered events", "js-0 quarantine none"}},
		{"go", []string{"go", "run", "./docs/clients/go"}, []string{"go: 50 uses in 50 round trips", "go-0 quarantine none"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.argv[0]); err != nil {
				t.Fatalf("%s is not installed (scripts/test installs it): %v", c.argv[0], err)
			}
			base := stack(t)
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
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s printed %q, want it to say %q", c.name, out, w)
				}
			}
		})
	}
}
