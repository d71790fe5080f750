package sidecar_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// BenchmarkTLSCost measures what TLS costs, in the same run: one
// Acquire+Release straight to the server over gRPC and through the
// sidecar, to a plaintext server and to a TLS one (same configuration,
// each its own SQLite store), interleaved; then the Acquire+Release
// throughput of 8 concurrent gRPC clients against each, in alternating
// 2-second rounds. It reports the TLS/plaintext ratios.
func BenchmarkTLSCost(b *testing.B) {
	ca := tlstest.NewCA(b, "bench CA")
	plainAddr, plainKey := realServer(b)
	tlsAddr, tlsKey := tlsServer(b, ca, nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	tlsCreds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "repool.test"})

	type target struct {
		pool repoolv1.PoolServiceClient
		ctx  context.Context
	}
	var plain, secure target
	plain.pool, plain.ctx = poolClient(b, plainAddr, plainKey, insecure.NewCredentials(), 1000)
	secure.pool, secure.ctx = poolClient(b, tlsAddr, tlsKey, tlsCreds, 1000)
	h := start(b, config.Config{Providers: map[string]config.Provider{
		"plain":  {Endpoint: plainAddr, APIKey: plainKey},
		"secure": tlsProvider(tlsAddr, tlsKey, ca, "repool.test", nil),
	}}, sidecar.Options{})

	paths := []roundPath{
		{"gRPC plaintext", func() error { return grpcRound(plain.ctx, plain.pool) }},
		{"gRPC TLS", func() error { return grpcRound(secure.ctx, secure.pool) }},
		{"sidecar plaintext", func() error { return sidecarRound(h.client, h.base+"/v1/providers/plain") }},
		{"sidecar TLS", func() error { return sidecarRound(h.client, h.base+"/v1/providers/secure") }},
	}
	p50, p99, rounds := interleave(b, paths)
	fmt.Printf("\nBenchmarkTLSCost: %d rounds of Acquire+Release per path, interleaved\n", rounds)
	fmt.Printf("  %-18s %10s %10s\n", "path", "p50", "p99")
	for j, p := range paths {
		fmt.Printf("  %-18s %10v %10v\n", p.name, p50[j].Round(time.Microsecond), p99[j].Round(time.Microsecond))
	}
	ratio := func(a, c time.Duration) float64 { return float64(a) / float64(c) }
	fmt.Printf("  TLS/plaintext, gRPC:    p50 %.2f, p99 %.2f\n", ratio(p50[1], p50[0]), ratio(p99[1], p99[0]))
	fmt.Printf("  TLS/plaintext, sidecar: p50 %.2f, p99 %.2f\n", ratio(p50[3], p50[2]), ratio(p99[3], p99[2]))
	b.ReportMetric(ratio(p50[1], p50[0]), "grpc-tls/plain-p50")
	b.ReportMetric(ratio(p50[3], p50[2]), "sidecar-tls/plain-p50")

	// Throughput: 8 clients for 2 s per round, plaintext and TLS
	// alternating, twice.
	const clients, round = 8, 2 * time.Second
	var done [2]int64
	for rep := range 4 {
		t := []target{plain, secure}[rep%2]
		var n atomic.Int64
		ctx, cancel := context.WithTimeout(t.ctx, round)
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for ctx.Err() == nil {
					if grpcRound(t.ctx, t.pool) == nil {
						n.Add(1)
					}
				}
			})
		}
		wg.Wait()
		cancel()
		done[rep%2] += n.Load()
	}
	secs := 2 * round.Seconds()
	fmt.Printf("  throughput, %d gRPC clients: plaintext %.0f/s, TLS %.0f/s Acquire+Release; TLS/plaintext %.2f\n",
		clients, float64(done[0])/secs, float64(done[1])/secs, float64(done[1])/float64(done[0]))
	b.ReportMetric(float64(done[1])/float64(done[0]), "throughput-tls/plain")
}
