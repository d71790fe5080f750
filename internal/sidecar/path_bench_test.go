package sidecar_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/repool/repool/internal/testenv"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// pathCallers is the concurrent callers of BenchmarkSidecarPath.
const pathCallers = 32

// BenchmarkSidecarPath measures a call end to end through the sidecar
// (HTTP client → sidecar → server) beside the same call made straight to
// the server over gRPC, in one run, with the shipped configuration: the
// server and the sidecar are the real binaries (cmd/server on SQLite with
// TLS, cmd/sidecar with deploy/config/sidecar.yaml, its endpoint, CA and
// key file pointed at that server), each its own process, so that each
// one's CPU is read from /proc/PID/stat; the callers are this process
// (getrusage). pathCallers callers make Acquire+Release rounds, the two
// paths in alternating 2-second rounds, three each; then, open loop, 2,000
// calls per second through the sidecar (Poisson arrivals) for 3 seconds.
// The sidecar path is measured twice: on the server's Leases streams
// (provider "default", as shipped) and with lease_streams -1 (provider
// "unary", the same configuration otherwise).
// It reports calls per second, p50 and p99 per call and CPU per call of
// each process, and the ratios the targets are written in
// (docs/sidecar.md).
func BenchmarkSidecarPath(b *testing.B) {
	dir := b.TempDir()
	serverBin, sidecarBin := filepath.Join(dir, "server"), filepath.Join(dir, "sidecar")
	for bin, pkg := range map[string]string{serverBin: "./cmd/server", sidecarBin: "./cmd/sidecar"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	ca := tlstest.NewCA(b, "bench CA")
	cert, key := ca.Issue("server", "repool.internal", "127.0.0.1").Write(b, dir, "server")
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		b.Fatal(err)
	}
	grpcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(b)))
	server := startProcess(b, serverBin, regexp.MustCompile(`demo API key:\s+(\S+)`),
		"--store", "sqlite:"+filepath.Join(dir, "repool.db"), "--grpc-addr", grpcAddr,
		"--http-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(b))),
		"--tls-cert", cert, "--tls-key", key)
	apiKey := server.match
	keyFile := filepath.Join(dir, "sidecar.key")
	if err := os.WriteFile(keyFile, []byte(apiKey+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	shipped, err := os.ReadFile("../../deploy/config/sidecar.yaml")
	if err != nil {
		b.Fatal(err)
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(b)))
	cfg := strings.NewReplacer("127.0.0.1:7070", listen, "10.0.0.100:9090", grpcAddr,
		"/etc/repool/tls/ca.crt", caFile, "/etc/repool/sidecar-default.key", keyFile).Replace(string(shipped))
	// Beside it, provider "unary": the same with lease_streams -1, the
	// sidecar's calls as unary calls.
	start, end := strings.Index(cfg, "\n  default:\n"), strings.Index(cfg, "\npolicies:")
	if start < 0 || end < start {
		b.Fatal("deploy/config/sidecar.yaml: no providers.default block before policies")
	}
	unaryBlock := strings.Replace(cfg[start:end], "\n  default:\n", "\n  unary:\n    lease_streams: -1\n", 1)
	cfg = cfg[:end] + unaryBlock + cfg[end:]
	cfgFile := filepath.Join(dir, "sidecar.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	sidecarProc := startProcess(b, sidecarBin, nil, "--config", cfgFile)
	testenv.Eventually(b, 20*time.Second, "the sidecar is ready", func() bool {
		resp, err := http.Get("http://" + listen + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	direct, ctx := poolClient(b, grpcAddr, apiKey, credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "repool.internal"}), 1_000_000)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: pathCallers, MaxConnsPerHost: pathCallers}}
	base := "http://" + listen + "/v1/providers/"
	paths := []roundPath{
		{"direct gRPC", func() error { return grpcRound(ctx, direct) }},
		{"sidecar", func() error { return sidecarRound(client, base+"default") }},
		{"sidecar unary", func() error { return sidecarRound(client, base+"unary") }},
	}
	for _, p := range paths { // connections, tokens, streams
		for range 200 {
			if err := p.round(); err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
		}
	}
	procs := []*process{server, sidecarProc}
	for b.Loop() {
		got := make([]pathRun, len(paths))
		for rep := range 3 * len(paths) {
			j := rep % len(paths)
			got[j].add(closedLoop(b, paths[j], procs, 2*time.Second))
		}
		open := []pathResult{openLoop(b, paths[1], procs, 2000, 3*time.Second), openLoop(b, paths[2], procs, 2000, 3*time.Second)}
		fmt.Printf("\nBenchmarkSidecarPath: %d callers, Acquire+Release rounds (2 calls), TLS, shipped sidecar.yaml; load average %s\n", pathCallers, loadavg())
		fmt.Printf("  %-14s %10s %10s %10s %15s %15s %15s\n", "path", "calls/s", "p50/call", "p99/call", "server µs/call", "sidecar µs/call", "callers µs/call")
		res := make([]pathResult, len(paths))
		for j, p := range paths {
			res[j] = got[j].result()
			g := res[j]
			fmt.Printf("  %-14s %10.0f %10v %10v %15.1f %15.1f %15.1f\n", p.name, g.rate, g.p50, g.p99, g.cpu[0], g.cpu[1], g.cpu[2])
		}
		d, s, u := res[0], res[1], res[2]
		fmt.Printf("  sidecar-path throughput / direct: %.2f (target ≥ 0.75; unary %.2f); sidecar CPU per call %.1f µs (target ≤ 50; unary %.1f); server CPU per call behind the sidecar / direct %.2f\n",
			s.rate/d.rate, u.rate/d.rate, s.cpu[1], u.cpu[1], s.cpu[0]/d.cpu[0])
		for j, o := range open {
			fmt.Printf("  open loop, 2000 calls/s offered through %s: %.0f calls/s answered, p50 %v, p99 %v per call; sidecar %.1f µs CPU per call (target ≤ 120), server %.1f\n",
				paths[j+1].name, o.rate, o.p50, o.p99, o.cpu[1], o.cpu[0])
		}
		b.ReportMetric(s.rate/d.rate, "throughput-sidecar/direct")
		b.ReportMetric(s.cpu[1], "sidecar-cpu-µs/call")
		b.ReportMetric(u.cpu[1], "sidecar-unary-cpu-µs/call")
		b.ReportMetric(s.cpu[0]/d.cpu[0], "server-cpu-sidecar/direct")
		b.ReportMetric(open[0].cpu[1], "sidecar-cpu-µs/call-2000/s")
	}
}

// process is a binary started by startProcess.
type process struct {
	pid   int
	match string // the first submatch of the pattern it printed
}

// startProcess runs bin with args until the benchmark ends; with a
// pattern, it waits for a line of its output to match it.
func startProcess(b *testing.B, bin string, pattern *regexp.Regexp, args ...string) *process {
	b.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	found := make(chan string, 1)
	go func() {
		defer func() { cmd.Wait(); close(exited) }()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if pattern != nil {
				if m := pattern.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case found <- m[1]:
					default:
					}
				}
			}
		}
	}()
	p := &process{pid: cmd.Process.Pid}
	if pattern != nil {
		select {
		case p.match = <-found:
		case <-exited:
			b.Fatalf("%s exited before printing %v", bin, pattern)
		case <-time.After(30 * time.Second):
			b.Fatalf("%s did not print %v within 30s", bin, pattern)
		}
	}
	return p
}

// cpuTime returns the CPU time (user + system) of pid from /proc.
func cpuTime(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command (in parentheses, which may hold
	// spaces): utime and stime are the 14th and 15th fields.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// selfCPU returns this process's CPU time (the callers).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpus reads the CPU time of each process and of this one.
func cpus(b *testing.B, procs []*process) [3]time.Duration {
	return [3]time.Duration{cpuTime(b, procs[0].pid), cpuTime(b, procs[1].pid), selfCPU()}
}

// pathRun is what a path did over one or more rounds.
type pathRun struct {
	calls   int64
	elapsed time.Duration
	lat     []time.Duration // per round
	cpu     [3]time.Duration
}

func (r *pathRun) add(o pathRun) {
	r.calls += o.calls
	r.elapsed += o.elapsed
	r.lat = append(r.lat, o.lat...)
	for i := range r.cpu {
		r.cpu[i] += o.cpu[i]
	}
}

// pathResult is a pathRun's figures: calls per second, p50 and p99 per
// call (half a round's), CPU µs per call of the server, the sidecar and
// the callers.
type pathResult struct {
	rate     float64
	p50, p99 time.Duration
	cpu      [3]float64
}

func (r *pathRun) result() pathResult {
	slices.Sort(r.lat)
	res := pathResult{rate: float64(r.calls) / r.elapsed.Seconds()}
	if len(r.lat) > 0 {
		res.p50, res.p99 = (percentile(r.lat, 0.50) / 2).Round(time.Microsecond), (percentile(r.lat, 0.99) / 2).Round(time.Microsecond)
	}
	for i, c := range r.cpu {
		res.cpu[i] = float64(c) / float64(time.Microsecond) / float64(max(r.calls, 1))
	}
	return res
}

// closedLoop runs pathCallers callers of p for d, each making rounds back
// to back; a failed round fails the benchmark.
func closedLoop(b *testing.B, p roundPath, procs []*process, d time.Duration) pathRun {
	var rounds atomic.Int64
	lats := make([][]time.Duration, pathCallers)
	var failed atomic.Pointer[error]
	c0 := cpus(b, procs)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range pathCallers {
		wg.Go(func() {
			for time.Since(start) < d {
				t := time.Now()
				if err := p.round(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lats[w] = append(lats[w], time.Since(t))
				rounds.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	c1 := cpus(b, procs)
	if err := failed.Load(); err != nil {
		b.Fatalf("%s: %v", p.name, *err)
	}
	r := pathRun{calls: 2 * rounds.Load(), elapsed: elapsed}
	for _, l := range lats {
		r.lat = append(r.lat, l...)
	}
	for i := range r.cpu {
		r.cpu[i] = c1[i] - c0[i]
	}
	return r
}

// openLoop offers rate calls per second (rate/2 rounds) to p for d at
// Poisson arrivals, each round on its own goroutine.
func openLoop(b *testing.B, p roundPath, procs []*process, rate float64, d time.Duration) pathResult {
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	c0 := cpus(b, procs)
	start := time.Now()
	for next := start; next.Sub(start) < d; {
		next = next.Add(time.Duration(rng.ExpFloat64() / (rate / 2) * float64(time.Second)))
		time.Sleep(time.Until(next)) // the arrival's moment: open loop
		wg.Go(func() {
			t := time.Now()
			if err := p.round(); err != nil {
				errs.Add(1)
				return
			}
			took := time.Since(t)
			mu.Lock()
			lat = append(lat, took)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	c1 := cpus(b, procs)
	if n := errs.Load(); n > 0 {
		b.Fatalf("open loop through %s: %d rounds failed", p.name, n)
	}
	r := pathRun{calls: 2 * int64(len(lat)), elapsed: elapsed, lat: lat}
	for i := range r.cpu {
		r.cpu[i] = c1[i] - c0[i]
	}
	return r.result()
}

// loadavg returns the first three fields of /proc/loadavg.
func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:3], " ")
}
