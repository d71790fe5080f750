package crash

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// A store in a directory of its own, served by the real binary one run at
// a time: the tests of issue 32's "corruption is never forgotten quietly".

type storeRuns struct {
	t          *testing.T
	bin        string
	dir, db    string
	grpc, http string
	key        string
}

func newStoreRuns(t *testing.T) *storeRuns {
	dir := filepath.Join(t.TempDir(), "data")
	return &storeRuns{t: t, bin: buildServer(t), dir: dir, db: filepath.Join(dir, "repool.db")}
}

// start runs the server on the store with new ports; the test's end kills
// it if it still runs.
func (r *storeRuns) start() *server {
	r.t.Helper()
	r.grpc, r.http = freeAddr(r.t), freeAddr(r.t)
	cmd := exec.Command(r.bin, "run", "--store", "sqlite:"+r.db, "--grpc-addr", r.grpc, "--http-addr", r.http,
		"--checkpoint-interval", "1h", "--log-level", "info")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("starting %s = got error %v, want nil", r.bin, err)
	}
	s := &server{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	r.t.Cleanup(s.kill)
	return s
}

// ready waits until s serves (and, on a first start, printed the demo
// key), and fails with its output if it exits first.
func (r *storeRuns) ready(s *server) {
	r.t.Helper()
	h := &harness{t: r.t, httpAddr: r.http}
	h.ready(s)
	if r.key == "" {
		testenv.Eventually(r.t, 30*time.Second, "the first start to print the demo API key", func() bool {
			m := keyRE.FindStringSubmatch(s.out.String())
			if m != nil {
				r.key = m[1]
			}
			return m != nil
		})
	}
}

// stop ends s with SIGTERM (a clean stop: the lease log is folded into
// the database and emptied) and waits for it.
func (r *storeRuns) stop(s *server) {
	r.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("the server did not stop within 30 s of SIGTERM:\n%s", s.out.String())
	}
}

func (r *storeRuns) client() (repoolv1.PoolServiceClient, context.Context) {
	r.t.Helper()
	conn, err := grpc.NewClient(r.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { conn.Close() })
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", r.key)
	return repoolv1.NewPoolServiceClient(conn), ctx
}

// acquire takes n leases, one call at a time (each its own journal
// commit), and returns their fencing tokens.
func (r *storeRuns) acquire(n int) []uint64 {
	r.t.Helper()
	c, ctx := r.client()
	var tokens []uint64
	for range n {
		resp, err := c.Acquire(ctx, &repoolv1.AcquireRequest{Context: "c", TtlSeconds: 3600})
		if err != nil {
			r.t.Fatalf("Acquire = got error %v, want a lease", err)
		}
		tokens = append(tokens, resp.GetLease().GetFencingToken())
	}
	return tokens
}

func (r *storeRuns) register(n int) {
	r.t.Helper()
	c, ctx := r.client()
	var res []*repoolv1.Resource
	for i := range n {
		res = append(res, &repoolv1.Resource{Id: fmt.Sprintf("r-%d", i), Capacity: 1})
	}
	if _, err := c.Register(ctx, &repoolv1.RegisterRequest{Resources: res}); err != nil {
		r.t.Fatalf("Register = got error %v, want nil", err)
	}
}

// TestDamagedLeaseLogStopsTheServer: one byte damaged in the middle of
// the lease log (a record that intact records follow) makes the real
// server refuse to start, with an error naming the log and the offset,
// and leaves the log byte for byte as it was; the documented repair
// (move the damaged log aside) lets it start.
func TestDamagedLeaseLogStopsTheServer(t *testing.T) {
	r := newStoreRuns(t)
	s := r.start()
	r.ready(s)
	r.register(5)
	r.acquire(5)
	s.kill() // SIGKILL: the log is not folded, its records are the leases
	logPath := r.db + "-leases"
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// The records' offsets, from their length headers.
	var starts []int
	for off := 0; off+8 <= len(b); off += 8 + int(binary.LittleEndian.Uint32(b[off:])) {
		starts = append(starts, off)
	}
	if len(starts) < 3 {
		t.Fatalf("the lease log after 5 acquisitions holds %d records (%d bytes), want at least 3", len(starts), len(b))
	}
	damageAt := starts[1] + 12 // in the second record's payload
	b[damageAt] ^= 0x40
	if err := os.WriteFile(logPath, b, 0o600); err != nil {
		t.Fatal(err)
	}

	s = r.start()
	ready := false
	testenv.Eventually(t, 30*time.Second, "the server to exit (or, wrongly, to serve)", func() bool {
		select {
		case <-s.done:
			return true
		default:
		}
		if probeReady(r.http) {
			ready = true
			return true
		}
		return false
	})
	after, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatalf("the damaged lease log after the start = got error %v, want the file kept", err)
	}
	if ready {
		t.Fatalf("the server started on a lease log damaged at offset %d (the log is now %d bytes, was %d), want it to refuse:\n%s",
			starts[1], len(after), len(b), s.out.String())
	}
	out := s.out.String()
	if code := s.cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatalf("the server on a damaged lease log exited with status 0, want an error:\n%s", out)
	}
	if want := fmt.Sprintf("offset %d ", starts[1]); !strings.Contains(out, logPath) || !strings.Contains(out, want) || !strings.Contains(out, "damaged") {
		t.Fatalf("the server's refusal = %q, want it to name %s and %q", out, logPath, want)
	}
	t.Logf("the server refused to start: %s", strings.TrimSpace(out))
	if !bytes.Equal(after, b) {
		t.Fatalf("the damaged lease log after the refused start = %d bytes, want it unchanged (%d bytes)", len(after), len(b))
	}

	// The repair docs/server.md gives: move the damaged log aside.
	if err := os.Rename(logPath, logPath+".damaged"); err != nil {
		t.Fatal(err)
	}
	s = r.start()
	r.ready(s)
	if kept, err := os.ReadFile(logPath + ".damaged"); err != nil || !bytes.Equal(kept, b) {
		t.Fatalf("the damaged log moved aside = got %d bytes, %v, want it as it was", len(kept), err)
	}
}

// probeReady reports whether the server on addr answers GET /readyz
// with 200.
func probeReady(addr string) bool {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestOlderStoreCopyKeepsTokensIncreasing: the database copied back from
// an older state (no restore procedure: an operator copies the file over)
// does not make the real server hand out fencing tokens below ones it
// already handed out.
func TestOlderStoreCopyKeepsTokensIncreasing(t *testing.T) {
	r := newStoreRuns(t)
	s := r.start()
	r.ready(s)
	r.register(4)
	older := r.acquire(1)
	r.stop(s)
	backup := t.TempDir()
	copyFiles(t, r.dir, backup)

	s = r.start()
	r.ready(s)
	handed := r.acquire(2)
	r.stop(s)

	copyFiles(t, backup, r.dir) // the older copy back
	s = r.start()
	r.ready(s)
	next := r.acquire(1)
	t.Logf("tokens: older copy %d, then %v, after the copy back %d", older[0], handed, next[0])
	if top := max(handed[0], handed[1]); next[0] <= top {
		t.Fatalf("fencing token after the store was copied back from an older state = got %d (epoch %d), want above %d (epoch %d), the highest already handed out",
			next[0], next[0]>>40, top, top>>40)
	}
}

// copyFiles makes the store files of dir to (repool.db, its -wal and
// -shm, the lease log) those of from, as an operator copying a store over
// would; the lock file and the epoch mark stay as they are.
func copyFiles(t *testing.T, from, to string) {
	t.Helper()
	for _, name := range []string{"repool.db", "repool.db-wal", "repool.db-shm", "repool.db-leases"} {
		b, err := os.ReadFile(filepath.Join(from, name))
		if errors.Is(err, fs.ErrNotExist) {
			os.Remove(filepath.Join(to, name))
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
