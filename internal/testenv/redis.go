package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// redisStartTimeout bounds how long Redis may take to answer PING.
const redisStartTimeout = 10 * time.Second

// Redis starts a redis-server on a free port of 127.0.0.1 (no persistence:
// --save "" --appendonly no) as a child process in the foreground, waits
// until it answers PING and returns its address (host:port). stop kills it
// and waits for it to exit; it is idempotent and also runs in tb.Cleanup,
// so a test may call it to simulate an outage mid-run. Each call starts a
// separate server; Main is not required.
//
// It fails tb (never skips) if redis-server is not installed.
func Redis(tb testing.TB) (addr string, stop func()) {
	tb.Helper()
	bin := lookPath(tb, "redis-server")
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		addr, stop, err := startRedis(bin, FreePort(tb))
		if err == nil {
			tb.Cleanup(stop)
			return addr, stop
		}
		lastErr = err
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	tb.Fatalf("testenv: redis-server did not start: %v", lastErr)
	return "", nil
}

// Output is a bytes.Buffer safe for concurrent writes and reads: the sink
// for a child process's output or a test's logs. The zero value is ready.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Output) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Output) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startRedis(bin string, port int) (string, func(), error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	var out Output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	stopWatchdog, err := watchdog(fmt.Sprintf("kill -9 %d", cmd.Process.Pid))
	if err != nil {
		cmd.Process.Kill()
		<-exited
		return "", nil, err
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Kill()
			<-exited
			stopWatchdog()
		})
	}

	deadline := time.Now().Add(redisStartTimeout)
	for {
		select {
		case err := <-exited:
			exited <- err // let stop's receive return
			stop()
			return "", nil, fmt.Errorf("redis-server on port %d exited: %v\n%s", port, err, out.String())
		default:
		}
		if ping(addr) == nil {
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server on port %d did not answer PING within %v\n%s", port, redisStartTimeout, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends an inline PING and expects +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q, want +PONG", line)
	}
	return nil
}
