package soak

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/servercmd"
	"github.com/repool/repool/internal/testenv"
)

// TestMain makes this test binary the server binary the soak runs, when
// started as one (testenv.Command's environment, inherited).
func TestMain(m *testing.M) {
	testenv.RunAsCommand("server", func() {
		os.Exit(cli.Main(servercmd.Prog, os.Stderr, func(ctx context.Context) error {
			return servercmd.Run(ctx, os.Args[1:], servercmd.Env{Getenv: os.Getenv, Stdout: os.Stdout, Stderr: os.Stderr})
		}))
	})
	testenv.Main(m)
}

// TestRunSamples: a short soak against the real server (this binary, as
// the server) reads every figure from the server's process and store, and
// the workload gets calls through and writes audit entries.
func TestRunSamples(t *testing.T) {
	cmd := testenv.Command() // the environment that makes this binary the server
	for _, kv := range cmd.Env {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "REPOOL_TEST") || strings.HasPrefix(k, "GORACE") {
			t.Setenv(k, v)
		}
	}
	var out strings.Builder
	samples, err := Run(t.Context(), Config{Server: os.Args[0], Args: []string{"--retention-interval", "1s", "--audit-max-rows-per-tenant", "100"},
		Dir: t.TempDir(), For: 3 * time.Second, Every: time.Second, Workers: 2, BlockedShare: 0.2, ChurnEvery: 2, Out: &out})
	if err != nil {
		t.Fatalf("Run = got error %v, want nil; output:\n%s", err, out.String())
	}
	last := samples[len(samples)-1]
	if len(samples) < 2 || last.At < 3*time.Second {
		t.Fatalf("Run = got %d samples, the last at %v, want one at the start and the last at 3s or after:\n%s", len(samples), last.At, out.String())
	}
	if last.Calls == 0 || last.RSS == 0 || last.Goroutines == 0 || last.FDs == 0 || last.StoreBytes == 0 || last.AuditRows == 0 {
		t.Fatalf("last sample = got %+v, want every figure read:\n%s", last, out.String())
	}
	if !strings.Contains(out.String(), "audit rows") {
		t.Fatalf("output = got %q, want the table's header", out.String())
	}
}
