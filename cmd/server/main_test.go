package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain runs main itself when the test binary is started as the
// command (see exitStatus).
func TestMain(m *testing.M) {
	if os.Getenv("REPOOL_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"server"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// exitStatus runs this test binary as the server command with args (in an
// empty directory) and returns its exit status and output.
func exitStatus(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// No race-detector exit delay (1 s by default) in the child.
	cmd.Env = append(os.Environ(), "REPOOL_TEST_RUN_MAIN=1", "GORACE=atexit_sleep_ms=0")
	cmd.Dir = t.TempDir()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running %q = got error %v, want it to run", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
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
		{"unknown command", []string{"bogus"}, 1, "", "server: unknown command \"bogus\": want run, admin-token, haproxy, keepalived, help\n"},
		{"unknown haproxy command", []string{"haproxy", "bogus"}, 1, "", "server: unknown command \"haproxy bogus\""},
		{"admin-token without --role", []string{"admin-token"}, 1, "", "server: --role is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, stdout, stderr := exitStatus(t, tt.args...)
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
