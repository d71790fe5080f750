package topology

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/repool/repool/internal/clock"
)

// proc is a child process this package started. Its owner stops it; the
// kernel kills it if this process dies first (see sysProcAttr).
type proc struct {
	name  string
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited
	err   error         // Wait's result, set before done closes
	clock clock.Clock   // times stop's grace
}

// start starts cmd with its output appended to logPath. When hello is set,
// the child's first stdout line is decoded into it before start returns (a
// child that exits or stays silent for timeout on clk is an error).
func start(ctx context.Context, clk clock.Clock, name string, cmd *exec.Cmd, logPath string, hello any, timeout time.Duration) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr(cmd.SysProcAttr)
	var stdout io.ReadCloser
	if hello != nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), clock: clk}
	lines := make(chan []byte, 1)
	if stdout != nil {
		go func() {
			r := bufio.NewReader(stdout)
			line, err := r.ReadBytes('\n')
			if err == nil {
				lines <- line
			}
			close(lines)
			_, _ = io.Copy(io.Discard, r) // keep the pipe drained until the child exits
		}()
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if hello == nil {
		return p, nil
	}
	t := clk.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-lines:
		if !ok {
			<-p.done
			return nil, fmt.Errorf("%s exited before it was ready (%v); %s", name, p.err, seeLog(logPath))
		}
		if err := json.Unmarshal(line, hello); err != nil {
			p.kill()
			if len(line) == 0 || line[0] != '{' {
				err = errNoChild
			}
			return nil, fmt.Errorf("%s: reading its ready line %q: %w", name, line, err)
		}
		return p, nil
	case <-t.Chan():
		p.kill()
		return nil, fmt.Errorf("%s was not ready within %v; %s", name, timeout, seeLog(logPath))
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends sig and waits up to grace for the exit, then kills.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	t := p.clock.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.Chan():
		p.kill()
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	if p.running() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// exitErr is the process's exit, nil while it runs or after a clean exit.
func (p *proc) exitErr() error {
	if p.running() {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && !ee.Exited() {
		return nil // killed by a signal we sent
	}
	return p.err
}

// logTailLines is how many of a log's last lines seeLog quotes.
const logTailLines = 15

// seeLog names a child's log and quotes its last lines, so that an error
// about the child still says what went wrong once the log's directory (a
// test's TempDir) is gone.
func seeLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "see " + path + " (unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "see " + path + " (empty)"
	}
	return fmt.Sprintf("see %s, which ends:\n\t%s", path, strings.Join(lines, "\n\t"))
}
