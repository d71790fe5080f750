package haproxymap

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/repool/repool/internal/testenv"
)

// groups is how many group backends the map names (repool_g1 ...); the
// default group's backend is repool.
const groups = 7

// config is an HAProxy configuration with one HTTP frontend whose backend
// is chosen as the gRPC frontend of a sharded deployment chooses it (a
// map from the x-repool-tenant header, default repool), or, without a
// map, always repool; every backend answers the request itself with its
// name, so that only HAProxy runs.
func config(port int, mapFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    nbthread 1
    maxconn 1000
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:%d
`, port)
	if mapFile != "" {
		fmt.Fprintf(&b, "    use_backend %%[req.hdr(x-repool-tenant),map(%s,repool)]\n", mapFile)
	}
	b.WriteString("    default_backend repool\n")
	for g := 0; g <= groups; g++ {
		name := "repool"
		if g > 0 {
			name = fmt.Sprintf("repool_g%d", g)
		}
		fmt.Fprintf(&b, "backend %s\n    http-request return status 200 content-type text/plain lf-string %%b\n", name)
	}
	return b.String()
}

// haproxy is a running HAProxy.
type haproxy struct {
	pid  int
	addr string
}

// start writes a map of n tenants (tenant-000000 ... on the group
// backends in turn; none with n = 0 and no map rule with n < 0), starts
// HAProxy on it, and returns it with the time from its start until it
// accepts connections.
func start(b *testing.B, n int) (*haproxy, time.Duration) {
	b.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		b.Fatalf("haproxy is not installed (apt-get install haproxy): %v", err)
	}
	dir := b.TempDir()
	mapFile := ""
	if n >= 0 {
		mapFile = filepath.Join(dir, "tenants.map")
		var m strings.Builder
		for i := range n {
			fmt.Fprintf(&m, "tenant-%06d repool_g%d\n", i, 1+i%groups)
		}
		if err := os.WriteFile(mapFile, []byte(m.String()), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	port := testenv.FreePort(b)
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(config(port, mapFile)), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-db", "-f", cfg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Since(began) > time.Minute {
			b.Fatalf("haproxy did not listen on %s within a minute", addr)
		}
		time.Sleep(time.Millisecond)
	}
	return &haproxy{pid: cmd.Process.Pid, addr: addr}, time.Since(began)
}

// procStat returns the process's CPU time (user + system) and resident
// memory, from /proc.
func procStat(b *testing.B, pid int) (cpu time.Duration, rssKiB int64) {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14 and stime 15, in clock ticks of 1/100 s (Linux's USER_HZ).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rssKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, rssKiB
}

// BenchmarkHAProxyMap reports, for no map rule and for maps of 0, 1,000
// and 100,000 tenants: HAProxy's resident memory (rss_MiB) and start time
// (start_ms, the map loaded), and its CPU per request (haproxy_cpu_µs/req)
// over 100,000 keep-alive requests from 8 clients, each with a tenant of
// the map (or, without one, an unknown tenant) in x-repool-tenant. Each
// answer must name the backend the map gives the tenant. Run it with
// -benchtime 1x.
func BenchmarkHAProxyMap(b *testing.B) {
	const requests, clients = 100_000, 8
	for _, n := range []int{-1, 0, 1_000, 100_000} {
		name := fmt.Sprintf("tenants=%d", n)
		if n < 0 {
			name = "no-map"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				h, took := start(b, n)
				_, rss := procStat(b, h.pid)
				tr := &http.Transport{MaxIdleConnsPerHost: clients}
				defer tr.CloseIdleConnections()
				hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
				cpu0, _ := procStat(b, h.pid)
				var next atomic.Int64
				var wrong atomic.Int64
				var wg sync.WaitGroup
				began := time.Now()
				for range clients {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > requests {
								return
							}
							tenant, want := "unknown", "repool"
							if n > 0 {
								k := int(i*7919) % n
								tenant, want = fmt.Sprintf("tenant-%06d", k), fmt.Sprintf("repool_g%d", 1+k%groups)
							}
							req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+h.addr+"/", nil)
							req.Header.Set("x-repool-tenant", tenant)
							resp, err := hc.Do(req)
							if err != nil {
								wrong.Add(1)
								continue
							}
							body, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							if string(body) != want {
								wrong.Add(1)
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(began)
				cpu1, _ := procStat(b, h.pid)
				if w := wrong.Load(); w > 0 {
					b.Fatalf("%d of %d requests failed or reached the wrong backend", w, requests)
				}
				perReq := float64(cpu1-cpu0) / float64(time.Microsecond) / requests
				b.ReportMetric(float64(rss)/1024, "rss_MiB")
				b.ReportMetric(float64(took.Milliseconds()), "start_ms")
				b.ReportMetric(perReq, "haproxy_cpu_µs/req")
				fmt.Printf("haproxy, %s: RSS %.1f MiB, listening after %v; %d requests in %v (%.0f/s), HAProxy CPU %.2f µs per request\n",
					name, float64(rss)/1024, took.Round(time.Millisecond), requests, elapsed.Round(time.Millisecond), requests/elapsed.Seconds(), perReq)
			}
		})
	}
}
