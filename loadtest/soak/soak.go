// Package soak runs a churning workload against a real repool server
// binary for a long time and reads, at intervals, what must stay flat
// once retention holds the store: the server's resident memory,
// goroutines and open descriptors, and the store's size and audit rows
// (store.Usage, through a read-only handle). loadtest/cmd/soak is its command line; the CI-sized
// variant is internal/server's TestSoakRetention.
//
// Each worker loops: acquire a lease and release it with an outcome
// (BLOCKED, which quarantines the resource and so writes audit entries
// for the quarantine and the recovery, at the configured share; SUCCESS
// otherwise), straight to the server over gRPC; every ChurnEvery
// iterations it also registers a resource of its own and removes its
// oldest (an audit entry each).
package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/pgcluster"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
)

// Config is one soak run.
type Config struct {
	// Server is the server binary to run.
	Server string
	// Args are more flags for "Server run" (retention settings, ...).
	Args []string
	// Store is the server's store URL (--store). Empty: a SQLite store
	// in Dir.
	Store string
	// Dir holds the SQLite store and the server's log.
	Dir string
	// For is how long the workload runs; Every how often it is sampled.
	For, Every time.Duration
	// Workers run the loop at once.
	Workers int
	// BlockedShare is the share of outcomes that are BLOCKED.
	BlockedShare float64
	// ChurnEvery: a worker registers a new resource every ChurnEvery
	// iterations and removes its oldest once it holds more than 4.
	ChurnEvery int
	// Out receives the samples as a table.
	Out io.Writer
	// Clock paces the samples. Nil means clock.Real{}.
	Clock clock.Clock
}

// Sample is what is read at one moment.
type Sample struct {
	At           time.Duration
	Calls        int64 // calls answered since the start
	RSS          int64 // the server's resident memory, bytes
	Goroutines   int64
	FDs          int
	StoreBytes   int64 // the store's size (store.Usage: a SQLite store's files, a PostgreSQL store's tables)
	WALBytes     int64 // of which a SQLite store's write-ahead log
	AuditRows    int64
	CallsPerSecS float64 // since the previous sample
}

var keyRE = regexp.MustCompile(`demo API key:\s+(\S+)`)

// Run runs the soak and returns its samples.
func Run(ctx context.Context, c Config) ([]Sample, error) {
	ports, err := pgcluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	grpcPort, httpPort := ports[0], ports[1]
	db := "" // the SQLite database file, whose -wal the samples show
	storeURL := c.Store
	if storeURL == "" {
		db = filepath.Join(c.Dir, "data", "repool.db")
		storeURL = "sqlite:" + db
	}
	u, err := open.ParseURL(storeURL)
	if err != nil {
		return nil, err
	}
	grpcAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", grpcPort), fmt.Sprintf("127.0.0.1:%d", httpPort)
	args := append([]string{"run", "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--store", storeURL}, c.Args...)
	logf, err := os.Create(filepath.Join(c.Dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(c.Server, args...)
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	key, err := demoKey(stdout)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w (its log: %s)", c.Server, err, logf.Name())
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// The banner came after the server created the store: it is there.
	ro, err := u.Open(ctx, store.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer ro.Close()

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	pool := repoolv1.NewPoolServiceClient(conn)
	cctx := metadata.AppendToOutgoingContext(wctx, "x-api-key", key)
	for w := range c.Workers {
		wg.Go(func() { work(cctx, pool, w, c, &calls, &failed) })
	}
	clk := c.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	start := clk.Now()
	var samples []Sample
	fmt.Fprintf(c.Out, "%8s %9s %9s %10s %5s %12s %11s %10s\n", "at", "calls/s", "rss MiB", "goroutines", "fds", "store bytes", "wal bytes", "audit rows")
	tick := clk.NewTicker(c.Every)
	defer tick.Stop()
	var prev Sample
	for {
		s, err := sample(ctx, cmd.Process.Pid, httpAddr, db, ro)
		if err != nil {
			return samples, err
		}
		s.At, s.Calls = clk.Now().Sub(start).Round(time.Second), calls.Load()
		if s.At > prev.At {
			s.CallsPerSecS = float64(s.Calls-prev.Calls) / (s.At - prev.At).Seconds()
		}
		fmt.Fprintf(c.Out, "%8v %9.0f %9.1f %10d %5d %12d %11d %10d\n", s.At, s.CallsPerSecS, float64(s.RSS)/(1<<20), s.Goroutines, s.FDs, s.StoreBytes, s.WALBytes, s.AuditRows)
		samples, prev = append(samples, s), s
		if s.At >= c.For {
			break
		}
		select {
		case <-ctx.Done():
			return samples, ctx.Err()
		case <-tick.Chan():
		}
	}
	stop()
	wg.Wait()
	fmt.Fprintf(c.Out, "calls %d, failed %d\n", calls.Load(), failed.Load())
	return samples, nil
}

func demoKey(stdout io.Reader) (string, error) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := keyRE.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return m[1], nil
		}
	}
	return "", errors.New("exited before printing the demo key")
}

func work(ctx context.Context, pool repoolv1.PoolServiceClient, w int, c Config, calls, failed *atomic.Int64) {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	count := func(err error) bool {
		if ctx.Err() != nil {
			return false
		}
		calls.Add(1)
		if err != nil {
			failed.Add(1)
		}
		return true
	}
	var held []string // this worker's resources, oldest first
	for i := 0; ctx.Err() == nil; i++ {
		if i%c.ChurnEvery == 0 {
			id := fmt.Sprintf("w%d-%d", w, i)
			_, err := pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id, Capacity: 1}}})
			if !count(err) {
				return
			}
			held = append(held, id)
			if len(held) > 4 {
				_, err = pool.Deregister(ctx, &repoolv1.DeregisterRequest{ResourceIds: held[:1]})
				if !count(err) {
					return
				}
				held = held[1:]
			}
		}
		a, err := pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "c", TtlSeconds: 30})
		if !count(err) {
			return
		}
		if err == nil {
			out := repoolv1.Outcome_SUCCESS
			if rng.Float64() < c.BlockedShare {
				out = repoolv1.Outcome_BLOCKED
			}
			_, err = pool.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: a.Lease.LeaseId, FencingToken: a.Lease.FencingToken, Outcome: out})
			if !count(err) {
				return
			}
		}
	}
}

func sample(ctx context.Context, pid int, httpAddr, db string, ro store.Store) (Sample, error) {
	var s Sample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			s.RSS = kb << 10
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.FDs = len(fds)
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return s, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := regexp.MustCompile(`(?m)^go_goroutines (\S+)$`).FindSubmatch(body); m != nil {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		s.Goroutines = int64(v)
	}
	if db != "" {
		if fi, err := os.Stat(db + "-wal"); err == nil {
			s.WALBytes = fi.Size()
		}
	}
	u, err := ro.Usage(ctx)
	if err != nil {
		return s, err
	}
	s.StoreBytes, s.AuditRows = u.Bytes, u.AuditRows
	return s, nil
}
