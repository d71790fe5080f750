package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

func TestMain(m *testing.M) {
	testenv.RunAsCommand("server", main)
	os.Exit(m.Run())
}

// TestExitStatus: help exits 0 for every command, an error exits 1 with
// one "server: " prefix.
func TestExitStatus(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantStatus int
		wantStdout string
		wantStderr string
	}{
		{"help", []string{"help"}, 0, "server admin-token", ""},
		{"-h", []string{"-h"}, 0, "server haproxy", ""},
		{"run -h", []string{"run", "-h"}, 0, "-grpc-addr", ""},
		{"admin-token --help", []string{"admin-token", "--help"}, 0, "-role", ""},
		{"haproxy -h", []string{"haproxy", "-h"}, 0, "haproxy render", ""},
		{"haproxy render -h", []string{"haproxy", "render", "-h"}, 0, "-inventory", ""},
		{"haproxy status -h", []string{"haproxy", "status", "-h"}, 0, "-socket", ""},
		{"haproxy drain -h", []string{"haproxy", "drain", "-h"}, 0, "-force", ""},
		{"haproxy ready -h", []string{"haproxy", "ready", "-h"}, 0, "-socket", ""},
		{"haproxy maint -h", []string{"haproxy", "maint", "-h"}, 0, "-force", ""},
		{"keepalived -h", []string{"keepalived", "-h"}, 0, "keepalived render", ""},
		{"keepalived render -h", []string{"keepalived", "render", "-h"}, 0, "-host", ""},
		{"help keepalived", []string{"help", "keepalived"}, 0, "keepalived render", ""},
		{"unknown command", []string{"bogus"}, 1, "", "server: unknown command \"bogus\": want run, admin-token, backup, restore, haproxy, keepalived, switchover, status, version, help\n"},
		{"unknown haproxy command", []string{"haproxy", "bogus"}, 1, "", "server: unknown command \"haproxy bogus\""},
		{"admin-token without --role", []string{"admin-token"}, 1, "", "server: --role is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, stdout, stderr := testenv.RunCommand(t, tt.args...)
			if status != tt.wantStatus {
				t.Errorf("server %s = got exit status %d (stderr %q), want %d", strings.Join(tt.args, " "), status, stderr, tt.wantStatus)
			}
			if !strings.Contains(stdout, tt.wantStdout) {
				t.Errorf("server %s = got stdout %q, want it to contain %q", strings.Join(tt.args, " "), stdout, tt.wantStdout)
			}
			if !strings.Contains(stderr, tt.wantStderr) || strings.Contains(stderr, "server: server") {
				t.Errorf("server %s = got stderr %q, want it to contain %q (and one prefix)", strings.Join(tt.args, " "), stderr, tt.wantStderr)
			}
		})
	}
}

// TestServerBinary runs this test binary as the server: a first start on
// a busy port fails with nothing on stdout (no secret spent, no tenant
// made), so the next start on free ports is still the first and prints the
// secrets; admin-token, a second process, then reads the running server's
// store (SQLite in WAL mode) and its token opens the control plane.
func TestServerBinary(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	store := "sqlite:" + filepath.Join(dir, "repool.db")

	status, stdout, stderr := testenv.RunCommand(t, "run", "--grpc-addr", busy.Addr().String(), "--http-addr", "127.0.0.1:0", "--store", store)
	if status != 1 || stdout != "" || !strings.Contains(stderr, "address already in use") {
		t.Fatalf("server run on a busy port = got exit status %d, stdout %q, stderr %q; want 1, nothing, and the port refused", status, stdout, stderr)
	}

	srv := serve(t, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--store", store, "--log-level", "error")
	srv.waitOutput(t, "repool server: gRPC on ")
	m := regexp.MustCompile(`repool server: gRPC on \S+, HTTP on (\S+) `).FindStringSubmatch(srv.out.String())
	if m == nil {
		t.Fatalf("the server's first line = got\n%s\nwant its gRPC and HTTP addresses", srv.out.String())
	}
	if !strings.Contains(srv.out.String(), "demo API key:    rpk_") || !strings.Contains(srv.out.String(), "operator token:  eyJ") {
		t.Fatalf("the first start after the failed one printed\n%s\nwant the demo API key and the operator token", srv.out.String())
	}

	status, token, stderr := testenv.RunCommand(t, "admin-token", "--role", "operator", "--store", store)
	if status != 0 || !strings.HasPrefix(token, "eyJ") {
		t.Fatalf("admin-token beside the running server = got exit status %d, stdout %q, stderr %q; want 0 and a token", status, token, stderr)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+m[1]+"/api/v1/tenants", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(token))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /api/v1/tenants = got error %v, want an answer", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/v1/tenants with admin-token's token = got %s, want 200 OK", resp.Status)
	}
}

// TestSIGHUPReloadsTLS runs the server binary over TLS and rotates its
// certificate on disk: SIGHUP makes it load the new pair (logged with its
// expiry), and a bad pair after SIGHUP is refused with the old one kept,
// without stopping the server.
func TestSIGHUPReloadsTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.Issue("server", "127.0.0.1").Write(t, dir, "server")
	srv := serve(t, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--store", "sqlite:"+filepath.Join(dir, "repool.db"),
		"--tls-cert", certFile, "--tls-key", keyFile)
	srv.waitOutput(t, ", TLS\n")

	// Files unchanged: only the signal reloads them (the watcher reloads
	// on a change).
	_ = srv.cmd.Process.Signal(syscall.SIGHUP)
	srv.waitOutput(t, `"msg":"TLS files reloaded"`)
	// A bad key: refused, and the server keeps running.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = srv.cmd.Process.Signal(syscall.SIGHUP)
	srv.waitOutput(t, "TLS files not reloaded; the previous certificate stays in use")
}

// server is this test binary running as "server run".
type server struct {
	cmd  *exec.Cmd
	out  testenv.Output
	done chan struct{} // closed when it has exited
	err  error         // its exit status, once done
}

// serve starts "server run" with args. When the test ends the server gets
// SIGTERM and must exit with status 0 within 30s; its output is logged if
// the test failed.
func serve(t *testing.T, args ...string) *server {
	t.Helper()
	s := &server{cmd: testenv.Command(append([]string{"run"}, args...)...), done: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting server run = got error %v, want nil", err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
			if s.err != nil {
				t.Errorf("server after SIGTERM = got %v, want exit status 0", s.err)
			}
		case <-time.After(30 * time.Second): // another process's shutdown: real time
			_ = s.cmd.Process.Kill()
			<-s.done
			t.Errorf("server did not stop within 30s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("server output:\n%s", s.out.String())
		}
	})
	return s
}

// waitOutput waits up to 30s for the server to print what, failing t if
// it exits first.
func (s *server) waitOutput(t *testing.T, what string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("the server to print %q", what), func() bool {
		select {
		case <-s.done:
			t.Fatalf("server exited (%v) before it printed %q", s.err, what)
		default:
		}
		return strings.Contains(s.out.String(), what)
	})
}
