//go:build unix

package quickstart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
)

// The addresses the README's examples use: scripts/run's defaults.
var defaults = map[string]string{"grpc": "127.0.0.1:9090", "http": "127.0.0.1:8081", "sidecar": "127.0.0.1:7070"}

// TestREADME starts ./scripts/run on free ports in a temporary data
// directory, runs every console block of README.md in order in one bash (as
// a newcomer at the repository root would, with the free ports in place of
// the defaults), and compares each command's exit status and answer with
// the transcript. It builds the binaries (scripts/run does), so it takes a
// while on a cold build cache.
func TestREADME(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := Transcripts(string(raw))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if len(steps) < 10 {
		t.Fatalf("README.md has %d console commands, want the quick start's (at least 10)", len(steps))
	}

	ports := map[string]int{}
	addrs := map[string]string{}
	for _, name := range []string{"grpc", "http", "sidecar"} {
		ports[name] = testenv.FreePort(t)
		addrs[name] = "127.0.0.1:" + strconv.Itoa(ports[name])
	}
	rewrite := func(s string) string {
		for name, d := range defaults {
			s = strings.ReplaceAll(s, d, addrs[name])
		}
		return s
	}
	data := t.TempDir()
	env := append(os.Environ(),
		"REPOOL_GRPC_PORT="+strconv.Itoa(ports["grpc"]),
		"REPOOL_HTTP_PORT="+strconv.Itoa(ports["http"]),
		"REPOOL_SIDECAR_PORT="+strconv.Itoa(ports["sidecar"]),
		"REPOOL_DATA_DIR="+data,
		// As the README says to with REPOOL_DATA_DIR set.
		"REPOOL_STORE=sqlite:"+filepath.Join(data, "repool.db"),
	)
	startRun(t, root, env)

	var script strings.Builder
	script.WriteString("cd " + strconv.Quote(root) + "\n")
	for i, st := range steps {
		fmt.Fprintf(&script, "{ %s\n} 2>&1\nst=$?; printf '\\n@@quickstart %d %%d\\n' \"$st\"\n", rewrite(st.Command), i)
	}
	path := filepath.Join(t.TempDir(), "readme.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", path)
	sh.Dir, sh.Env = root, env
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("bash running README.md's console blocks = got error %v, want it to finish; output:\n%s", err, out)
	}

	answers := answersOf(t, string(out), len(steps))
	for i, st := range steps {
		a := answers[i]
		if a.status != 0 {
			t.Errorf("README.md:%d: $ %s\nexited %d, want 0; answered:\n%s", st.Line, st.Command, a.status, a.text)
			continue
		}
		var got []string
		for _, l := range strings.Split(a.text, "\n") {
			if strings.TrimSpace(l) != "" {
				got = append(got, l)
			}
		}
		ok := len(got) == len(st.Want)
		for j := 0; ok && j < len(got); j++ {
			ok = Match(rewrite(st.Want[j]), got[j])
		}
		if !ok {
			t.Errorf("README.md:%d: $ %s\nanswered:\n%s\nwant (… is any text):\n%s", st.Line, st.Command, strings.Join(got, "\n"), strings.Join(st.Want, "\n"))
		}
	}
}

type answer struct {
	status int
	text   string
}

var marker = regexp.MustCompile(`(?m)^@@quickstart (\d+) (\d+)$`)

// answersOf splits the script's output at its markers.
func answersOf(t *testing.T, out string, n int) []answer {
	t.Helper()
	answers := make([]answer, n)
	rest := out
	for i := range n {
		loc := marker.FindStringSubmatchIndex(rest)
		if loc == nil {
			t.Fatalf("the output of README.md's console blocks stops before command %d:\n%s", i, out)
		}
		if got, _ := strconv.Atoi(rest[loc[2]:loc[3]]); got != i {
			t.Fatalf("the output of README.md's console blocks has command %d's answer where %d's belongs:\n%s", got, i, out)
		}
		status, _ := strconv.Atoi(rest[loc[4]:loc[5]])
		answers[i] = answer{status: status, text: rest[:loc[0]]}
		rest = rest[loc[1]:]
	}
	return answers
}

// startRun starts ./scripts/run with env in its own process group and
// waits until it says the system is running; it returns a function that
// stops the group (the script, the server and the sidecar), which the
// test's cleanup also calls.
func startRun(t *testing.T, root string, env []string) (stop func()) {
	t.Helper()
	var out testenv.Output
	cmd := exec.Command("./scripts/run")
	cmd.Dir, cmd.Env = root, env
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting ./scripts/run = got error %v, want it started", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			pgid := cmd.Process.Pid
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-exited
				t.Errorf("./scripts/run did not stop within 30s of SIGTERM; output:\n%s", out.String())
			}
		})
	}
	t.Cleanup(stop)
	// scripts/run builds both binaries first: minutes on a cold cache.
	deadline := time.Now().Add(10 * time.Minute)
	for !strings.Contains(out.String(), "repool is running") {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("./scripts/run exited (%v) before it said it was running; output:\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("./scripts/run did not say it was running within 10 minutes; output:\n%s", out.String())
		}
	}
	return stop
}
