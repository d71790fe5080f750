package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runMainEnv tells a test binary started by Command to run the command's
// main instead of its tests.
const runMainEnv = "REPOOL_TEST_RUN_MAIN"

// RunAsCommand, called first in a command's TestMain, runs main instead of
// the tests when Command started the test binary, with os.Args[0] set to
// name, and exits 0 when main returns. Otherwise it returns at once.
func RunAsCommand(name string, main func()) {
	if os.Getenv(runMainEnv) != "1" {
		return
	}
	os.Args = append([]string{name}, os.Args[1:]...)
	main()
	os.Exit(0)
}

// Command returns a command that runs this test binary as the command of
// the package under test (whose TestMain calls RunAsCommand), with args, so
// that a test sees its real exit status and output without building it.
func Command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	// No race-detector exit delay (1 s by default) in the child.
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "GORACE=atexit_sleep_ms=0")
	return cmd
}

// RunCommand runs Command(args...) in a new empty directory and returns its
// exit status, stdout and stderr.
func RunCommand(tb testing.TB, args ...string) (status int, stdout, stderr string) {
	tb.Helper()
	cmd := Command(args...)
	cmd.Dir = tb.TempDir()
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		tb.Fatalf("running %q = got error %v, want it to run", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}
