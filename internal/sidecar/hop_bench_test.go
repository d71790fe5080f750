package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/testenv"
)

// haproxy runs a real HAProxy in the foreground as an h2c (gRPC) proxy
// from a free loopback port to backend, with the given server timeout,
// until the test or benchmark ends, and returns the port's address.
func haproxy(tb testing.TB, backend string, serverTimeout time.Duration) string {
	tb.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		tb.Fatalf("haproxy is not installed (%v): run scripts/test, which installs it", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(tb)))
	cfg := filepath.Join(tb.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(`global
    maxconn 1000
defaults
    mode http
    retries 0
    timeout connect 1s
    timeout client 30s
    timeout server `+strconv.FormatInt(serverTimeout.Milliseconds(), 10)+`ms
frontend grpc
    bind `+addr+` proto h2
    default_backend servers
backend servers
    server s1 `+backend+` proto h2
`), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-f", cfg, "-db")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting haproxy: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tb.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	// Real time: polls another process until it listens, keeping its
	// output for the failure (testenv.Eventually would not).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		select {
		case err := <-exited:
			tb.Fatalf("haproxy exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("haproxy did not listen on %s within 10s:\n%s", addr, out.String())
		}
	}
}

// grpcRound is one Acquire+Release over gRPC with a bearer token.
func grpcRound(ctx context.Context, c repoolv1.PoolServiceClient) error {
	acq, err := c.Acquire(ctx, &repoolv1.AcquireRequest{Context: "hop", TtlSeconds: 30})
	if err != nil {
		return err
	}
	_, err = c.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: acq.GetLease().GetLeaseId(),
		FencingToken: acq.GetLease().GetFencingToken(), Outcome: repoolv1.Outcome_SUCCESS})
	return err
}

// sidecarRound is one Acquire+Release through the sidecar's HTTP API, as a
// backend does it: JSON in, JSON out, decoded once.
func sidecarRound(client *http.Client, base string) error {
	var body struct {
		Lease struct {
			LeaseID      string `json:"lease_id"`
			FencingToken string `json:"fencing_token"`
		} `json:"lease"`
	}
	if err := post(client, base+"/acquire", `{"context":"hop","ttl_seconds":30}`, &body); err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if err := post(client, base+"/leases/"+body.Lease.LeaseID+"/release",
		`{"fencing_token":"`+body.Lease.FencingToken+`","outcome":"SUCCESS"}`, nil); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// post sends a JSON body and decodes a 200 answer into out (if not nil).
func post(client *http.Client, url, body string, out any) error {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%d %s", resp.StatusCode, raw)
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// roundPath is one way to run an Acquire+Release round.
type roundPath struct {
	name  string
	round func() error
}

// interleave warms the paths up (connections, tokens and caches: 200
// rounds each), then runs one round of each path per b.Loop iteration,
// rotating the order so that none always goes first. It returns each
// path's p50 and p99, and the rounds per path.
func interleave(b *testing.B, paths []roundPath) (p50, p99 []time.Duration, rounds int) {
	for range 200 {
		for _, p := range paths {
			if err := p.round(); err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
		}
	}
	samples := make([][]time.Duration, len(paths))
	i := 0
	for b.Loop() {
		for k := range paths {
			j := (i + k) % len(paths)
			start := time.Now()
			if err := paths[j].round(); err != nil {
				b.Fatalf("%s: %v", paths[j].name, err)
			}
			samples[j] = append(samples[j], time.Since(start))
		}
		i++
	}
	b.StopTimer()
	p50, p99 = make([]time.Duration, len(paths)), make([]time.Duration, len(paths))
	for j := range paths {
		slices.Sort(samples[j])
		p50[j], p99[j] = percentile(samples[j], 0.50), percentile(samples[j], 0.99)
	}
	return p50, p99, len(samples[0])
}

// poolClient dials addr with creds, takes a token for key and registers
// the resource hop-1 with capacity; it returns the client and a context
// that carries the token.
func poolClient(b *testing.B, addr, key string, creds credentials.TransportCredentials, capacity int32) (repoolv1.PoolServiceClient, context.Context) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	tok, err := repoolv1.NewAuthServiceClient(conn).IssueToken(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key), &repoolv1.IssueTokenRequest{})
	if err != nil {
		b.Fatalf("IssueToken(%s) = %v", addr, err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok.GetToken())
	pool := repoolv1.NewPoolServiceClient(conn)
	if _, err := pool.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: "hop-1", Capacity: capacity}}}); err != nil {
		b.Fatalf("Register(%s) = %v", addr, err)
	}
	return pool, ctx
}

// BenchmarkHop measures what a hop costs a backend: one Acquire+Release
// against the real server directly over gRPC, through HAProxy (h2c, a real
// haproxy process), and through the sidecar's HTTP/JSON API, interleaved in
// the same run. It reports the latency the sidecar and HAProxy add over the
// direct call at p50 and p99, and their ratio. Target: the sidecar adds no
// more than HAProxy at p50.
func BenchmarkHop(b *testing.B) {
	addr, key := realServer(b)
	hp := haproxy(b, addr, 30*time.Second)

	direct, ctx := poolClient(b, addr, key, insecure.NewCredentials(), 100)
	conn, err := grpc.NewClient(hp, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	viaHAProxy := repoolv1.NewPoolServiceClient(conn)
	h := start(b, config.Config{Providers: map[string]config.Provider{"demo": {Endpoint: addr, APIKey: key}}}, sidecar.Options{})

	paths := []roundPath{
		{"direct", func() error { return grpcRound(ctx, direct) }},
		{"haproxy", func() error { return grpcRound(ctx, viaHAProxy) }},
		{"sidecar", func() error { return sidecarRound(h.client, h.base+"/v1/providers/demo") }},
	}
	p50, p99, rounds := interleave(b, paths)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	sidecar50, sidecar99 := us(p50[2]-p50[0]), us(p99[2]-p99[0])
	haproxy50, haproxy99 := us(p50[1]-p50[0]), us(p99[1]-p99[0])
	b.ReportMetric(sidecar50, "sidecar-added-p50-µs")
	b.ReportMetric(haproxy50, "haproxy-added-p50-µs")
	b.ReportMetric(sidecar99, "sidecar-added-p99-µs")
	b.ReportMetric(haproxy99, "haproxy-added-p99-µs")
	fmt.Printf("\nBenchmarkHop: %d rounds of Acquire+Release per path\n", rounds)
	fmt.Printf("  %-8s %10s %10s\n", "path", "p50", "p99")
	for j, p := range paths {
		fmt.Printf("  %-8s %10v %10v\n", p.name, p50[j].Round(time.Microsecond), p99[j].Round(time.Microsecond))
	}
	fmt.Printf("  added by the sidecar: p50 %.0fµs, p99 %.0fµs\n", sidecar50, sidecar99)
	fmt.Printf("  added by HAProxy:     p50 %.0fµs, p99 %.0fµs\n", haproxy50, haproxy99)
	if haproxy50 > 0 && haproxy99 > 0 {
		fmt.Printf("  ratio sidecar/HAProxy: p50 %.2f, p99 %.2f (target: ≤ 1 at p50 and at p99)\n", sidecar50/haproxy50, sidecar99/haproxy99)
	}
}
