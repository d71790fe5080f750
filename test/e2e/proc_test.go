package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a process the test started in a network namespace, in its own
// process group, with its output in a log file of the run directory.
type proc struct {
	name string
	log  string // path of its stdout+stderr
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // its exit status, once done
}

// procs starts and tracks every process of a run, for log dumps.
type procs struct {
	tb  testing.TB
	dir string // log files go here

	mu  sync.Mutex
	all []*proc
	n   map[string]int // starts per name, to number restarts
}

// start runs argv in namespace ns (ip netns exec) as name. Cleanup kills its
// process group. env adds to the test's environment.
func (ps *procs) start(name, ns string, env []string, argv ...string) *proc {
	ps.tb.Helper()
	ps.mu.Lock()
	if ps.n == nil {
		ps.n = map[string]int{}
	}
	ps.n[name]++
	logName := name
	if k := ps.n[name]; k > 1 {
		logName = fmt.Sprintf("%s.%d", name, k)
	}
	ps.mu.Unlock()

	logPath := filepath.Join(ps.dir, "logs", logName+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		ps.tb.Fatal(err)
	}
	f, err := os.Create(logPath)
	if err != nil {
		ps.tb.Fatal(err)
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Dir = ps.dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group, so that kill reaches its children (postgres
	// backends, keepalived's VRRP process); SIGKILL if the test dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		ps.tb.Fatalf("start %s (%s) = got error %v, want nil", name, strings.Join(argv, " "), err)
	}
	f.Close()
	p := &proc{name: logName, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	ps.tb.Cleanup(p.stop)
	return p
}

// pid is the process id (= its process group id).
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process itself (not its group).
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return errors.New(p.name + " has exited")
	}
	return syscall.Kill(p.pid(), sig)
}

// kill9 SIGKILLs the whole process group and waits for the process.
func (p *proc) kill9() {
	syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// stop ends the process group: SIGCONT (it may be stopped) and SIGKILL.
// Nothing of a run needs a graceful stop.
func (p *proc) stop() {
	syscall.Kill(-p.pid(), syscall.SIGCONT)
	p.kill9()
}

// output returns what the process wrote so far.
func (p *proc) output() string {
	raw, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.log, err)
	}
	return string(raw)
}

// maxDump bounds each log in a failure dump: the tail is kept.
const maxDump = 256 << 10

// dump writes every process's log, and the other files of the run worth
// reading (notify logs, configs), into the test log.
func (ps *procs) dump(extra ...string) {
	ps.mu.Lock()
	all := append([]*proc(nil), ps.all...)
	ps.mu.Unlock()
	for _, p := range all {
		status := "running"
		if p.exited() {
			status = fmt.Sprintf("exited: %v", p.err)
		}
		ps.tb.Logf("===== %s (%s) log %s =====\n%s", p.name, status, p.log, tail(p.output()))
	}
	for _, path := range extra {
		raw, err := os.ReadFile(path)
		if err != nil {
			ps.tb.Logf("===== %s: %v", path, err)
			continue
		}
		ps.tb.Logf("===== %s =====\n%s", path, tail(string(raw)))
	}
}

func tail(s string) string {
	if len(s) <= maxDump {
		return s
	}
	return fmt.Sprintf("(%d bytes cut)\n%s", len(s)-maxDump, s[len(s)-maxDump:])
}
