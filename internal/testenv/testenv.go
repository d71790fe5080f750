// Package testenv starts real services for tests: a throwaway PostgreSQL 15
// cluster (one fresh database per call) and Redis servers. Nothing is
// mocked and nothing is skipped: if a service's binaries are missing the
// test fails and says to run scripts/test, which installs them.
//
// A package whose tests use Postgres must run them through Main:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// State: a test binary is one process and its PostgreSQL cluster is shared
// by all of its tests, so this package keeps one process-wide registry of
// started services (and of the ports FreePort handed out), guarded by a
// mutex. That is the only package-level mutable state, and it exists
// because testing.M offers no other place to hang it. Every service also
// gets a watchdog process that stops it if the test binary dies without
// cleaning up (a panic or a -timeout kill), so no server outlives its
// tests.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/pgcluster"
)

// scriptHint is appended to every "binary missing" failure.
const scriptHint = "run scripts/test, which installs the services the tests need"

// env is the process-wide registry of started services.
type env struct {
	mu      sync.Mutex
	main    bool               // Main is running the tests
	pg      *pgcluster.Cluster // started on first use
	pgErr   error              // why starting it failed, reported to every caller
	stopper []func()           // run by Main after the tests, last first
	ports   map[int]bool       // handed out by FreePort
}

var global env

// Main runs the tests of m, then stops every service this package started
// (PostgreSQL gets an immediate shutdown and its directory is removed) and
// exits with the tests' exit code. Call it from TestMain.
func Main(m *testing.M) {
	global.mu.Lock()
	global.main = true
	global.mu.Unlock()

	code := m.Run()

	global.mu.Lock()
	stoppers := global.stopper
	global.stopper, global.pg = nil, nil
	global.mu.Unlock()
	for i := len(stoppers) - 1; i >= 0; i-- {
		stoppers[i]()
	}
	os.Exit(code)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago: it
// listens on port 0, takes the port the kernel chose and closes the
// listener. It never returns a port twice in one test binary: the kernel
// hands a port just released out again at once, and a test that takes
// several ports before it binds them got one port twice. Another process
// may take the port before the caller does, so callers retry on "address
// in use".
func FreePort(tb testing.TB) int {
	tb.Helper()
	for range 100 {
		port, err := pgcluster.FreePort()
		if err != nil {
			tb.Fatalf("testenv: free port on 127.0.0.1 = got error %v, want nil", err)
		}
		global.mu.Lock()
		seen := global.ports[port]
		if !seen {
			if global.ports == nil {
				global.ports = map[int]bool{}
			}
			global.ports[port] = true
		}
		global.mu.Unlock()
		if !seen {
			return port
		}
	}
	tb.Fatalf("testenv: no free port on 127.0.0.1 not handed out before in 100 tries")
	return 0
}

// lookPath fails tb with the scripts/test hint if a binary is missing.
func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("testenv: %s not found (%v): %s", name, err, scriptHint)
	}
	return p
}

// watchdog starts a detached shell that runs cleanup (a shell command) as
// soon as this process is gone. The returned function stops the watchdog
// without running cleanup; call it after stopping the service normally.
func watchdog(cleanup string) (func(), error) {
	script := `while kill -0 "$1" 2>/dev/null; do sleep 1; done; ` + cleanup
	cmd := exec.Command("/bin/sh", "-c", script, "testenv-watchdog", strconv.Itoa(os.Getpid()))
	// Own session: signals aimed at the test's process group (Ctrl-C) do not
	// kill the watchdog before it has cleaned up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}, nil
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, `'\''`...)
		} else {
			out = append(out, s[i])
		}
	}
	return string(append(out, '\''))
}

// Eventually polls cond every 10 ms until it holds, and fails tb naming
// what was awaited if it does not within timeout. It is for conditions
// that other processes or goroutines bring about in real time (a server
// started, a port closed); a wait for time itself to pass takes a
// clock.Fake instead.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited %v for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // a poll interval, not a wait for time to pass
	}
}
