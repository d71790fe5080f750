package sidecarcmd

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/gctune"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/fakeserver"
	"github.com/repool/repool/internal/testenv"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(`{"context":"c","ttl_seconds":30}`))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestSIGHUPReloadsTheFile(t *testing.T) {
	a := fakeserver.Start(t, fakeserver.Config{})
	b := fakeserver.Start(t, fakeserver.Config{})
	path := filepath.Join(t.TempDir(), "sidecar.yaml")
	writeConfig(t, path, "providers:\n  a: {endpoint: "+a.Addr()+", api_key_env: KEY_A}\n")
	getenv := env(map[string]string{"KEY_A": fakeserver.DefaultAPIKey})

	var logs testenv.Output
	ready := make(chan *sidecar.Sidecar, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--config", path, "--listen", "127.0.0.1:0"}, Env{Getenv: getenv, Stdout: io.Discard, Stderr: &logs}, func(s *sidecar.Sidecar) { ready <- s })
	}()
	var s *sidecar.Sidecar
	select {
	case s = <-ready:
	case err := <-done:
		t.Fatalf("Run() = %v before the sidecar was ready", err)
	}
	base := "http://" + s.Addr() + "/v1/providers/"
	if got := status(t, base+"a/acquire"); got != 200 {
		t.Fatalf("acquire on a = %d, want 200", got)
	}

	// A broken file: rejected, logged, and the running configuration stays.
	writeConfig(t, path, "providers:\n  a: {endpoint: [\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the rejected reload to be logged", func() bool { return strings.Contains(logs.String(), "configuration reload rejected") })
	if got := status(t, base+"a/acquire"); got != 200 {
		t.Fatalf("acquire on a after a rejected reload = %d, want 200", got)
	}

	// A good file: provider b added, a removed.
	writeConfig(t, path, "providers:\n  b: {endpoint: "+b.Addr()+", api_key: "+fakeserver.DefaultAPIKey+"}\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "provider b after SIGHUP", func() bool { _, ok := s.Config().Providers["b"]; return ok })
	if got := status(t, base+"b/acquire"); got != 200 {
		t.Fatalf("acquire on b = %d, want 200", got)
	}
	if got := status(t, base+"a/acquire"); got != 404 {
		t.Fatalf("acquire on the removed a = %d, want 404", got)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v, want nil after the context ended", err)
	}
}

func TestRunRefuses(t *testing.T) {
	fake := fakeserver.Start(t, fakeserver.Config{})
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no API key", nil, map[string]string{}, "REPOOL_API_KEY"},
		{"non-loopback listen", []string{"--listen", "0.0.0.0:0"}, map[string]string{"REPOOL_API_KEY": "k", "REPOOL_ENDPOINT": fake.Addr()}, "not a loopback address"},
		{"non-loopback listen from the environment", nil, map[string]string{"REPOOL_API_KEY": "k", "REPOOL_SIDECAR_LISTEN": "10.0.0.1:7070"}, "not a loopback address"},
		{"missing file", []string{"--config", "/nonexistent/sidecar.yaml"}, map[string]string{}, "config file"},
		{"bad log level", []string{"--log-level", "chatty"}, map[string]string{"REPOOL_API_KEY": "k"}, "log_level"},
		{"stray argument", []string{"serve"}, map[string]string{}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Run(context.Background(), tt.args, Env{Getenv: env(tt.env), Stdout: io.Discard, Stderr: io.Discard}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}

}

func TestRunNoFileMode(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // a known target before the sidecar runs
	fake := fakeserver.Start(t, fakeserver.Config{})
	ready := make(chan *sidecar.Sidecar, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--listen", "127.0.0.1:0"},
			Env{Getenv: env(map[string]string{"REPOOL_ENDPOINT": fake.Addr(), "REPOOL_API_KEY": fakeserver.DefaultAPIKey}),
				Stdout: io.Discard, Stderr: io.Discard}, func(s *sidecar.Sidecar) { ready <- s })
	}()
	var s *sidecar.Sidecar
	select {
	case s = <-ready:
	case err := <-done:
		t.Fatalf("Run() = %v before the sidecar was ready", err)
	}
	if got := status(t, "http://"+s.Addr()+"/v1/providers/default/acquire"); got != 200 {
		t.Fatalf("acquire on provider default = %d, want 200", got)
	}
	// The sidecar's own garbage-collector target, GOGC being unset.
	if got := debug.SetGCPercent(gctune.DefaultPercent); got != gctune.DefaultPercent {
		t.Errorf("GC percent while the sidecar runs = %d, want %d", got, gctune.DefaultPercent)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run() = %v", err)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent after the sidecar stopped = %d, want 100 as before it", got)
	}
}

// TestHelp: -h, --help and "help" print the usage with every flag to
// stdout and end with flag.ErrHelp (exit status 0).
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		var stdout, stderr strings.Builder
		err := Run(context.Background(), args, Env{Getenv: env(nil), Stdout: &stdout, Stderr: &stderr}, nil)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("Run(%q) = got error %v, want flag.ErrHelp", args, err)
		}
		for _, want := range []string{"usage: sidecar", "-config", "-listen", "-allow-remote", "-log-level"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("Run(%q) = got stdout %q, want it to contain %q", args, stdout.String(), want)
			}
		}
		if stderr.Len() > 0 {
			t.Errorf("Run(%q) = got stderr %q, want nothing", args, stderr.String())
		}
	}
}

// TestVersion: --version prints the build on stdout and starts nothing.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}} {
		var stdout, stderr strings.Builder
		if err := Run(context.Background(), args, Env{Getenv: env(nil), Stdout: &stdout, Stderr: &stderr}, nil); err != nil {
			t.Fatalf("Run(%q) = %v, want nil", args, err)
		}
		if out := stdout.String(); !strings.HasPrefix(out, "repool sidecar ") || !strings.Contains(out, "(commit ") || stderr.Len() > 0 {
			t.Fatalf("Run(%q) printed %q (stderr %q), want the build line", args, out, stderr.String())
		}
	}
}
