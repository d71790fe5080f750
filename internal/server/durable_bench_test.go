package server

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/testenv"
)

// benchClient returns a PoolService client on its own connection.
func benchClient(b *testing.B, r *running) repoolv1.PoolServiceClient {
	conn, err := grpc.NewClient(r.s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return repoolv1.NewPoolServiceClient(conn)
}

// BenchmarkRegisterDurable measures registrations per second with 64
// clients, each call registering one new resource, on SQLite and on
// PostgreSQL: every acknowledged registration is in the store, so this is
// the rate of durable writes a tenant's registrations can reach.
func BenchmarkRegisterDurable(b *testing.B) {
	for _, tc := range []struct {
		name  string
		store func(testing.TB) string
	}{{"sqlite", sqliteStore}, {"postgres", testenv.Postgres}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := Config{Store: tc.store(b), Limits: requestLimit(1e9, 1<<30), GlobalResources: 10_000_000}
			defer TuneRuntime(cfg, os.Getenv)()
			r := start(b, cfg)
			ctx := withKey(r.key)
			c := benchClient(b, r)
			var next atomic.Int64
			for b.Loop() {
				rate, errs := run(*benchClients, *benchFor, func(_ context.Context, _, _ int) error {
					id := fmt.Sprintf("res-%d", next.Add(1))
					_, err := c.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id}}})
					return err
				})
				b.ReportMetric(rate, "registrations/s")
				fmt.Printf("register (%s), %d clients, %v: %.0f registrations/s (%d errors)\n", tc.name, *benchClients, *benchFor, rate, errs)
			}
		})
	}
}

// BenchmarkReportDurable measures reports per second with 64 clients,
// with the default report flush and with --durable-reports (each report
// answered once its statistics are group-committed), in the same run.
func BenchmarkReportDurable(b *testing.B) {
	rates := map[bool]float64{}
	for _, durable := range []bool{false, true} {
		cfg := Config{Store: sqliteStore(b), Limits: requestLimit(1e9, 1<<30), DurableReports: durable}
		restore := TuneRuntime(cfg, os.Getenv)
		r := start(b, cfg)
		ctx := withKey(r.key)
		var res []*repoolv1.Resource
		for i := range benchResources {
			res = append(res, &repoolv1.Resource{Id: fmt.Sprintf("proxy-%04d", i)})
		}
		if _, err := r.pool.Register(ctx, &repoolv1.RegisterRequest{Resources: res}); err != nil {
			b.Fatal(err)
		}
		c := benchClient(b, r)
		rate, errs := run(*benchClients, *benchFor, func(_ context.Context, w, i int) error {
			_, err := c.Report(ctx, &repoolv1.ReportRequest{ResourceId: res[(w*7919+i)%len(res)].Id, Context: "search", Outcome: repoolv1.Outcome_SUCCESS})
			return err
		})
		r.stop(b)
		restore()
		rates[durable] = rate
		fmt.Printf("report (durable=%v), %d clients, %v: %.0f reports/s (%d errors)\n", durable, *benchClients, *benchFor, rate, errs)
	}
	for b.Loop() {
	}
	b.ReportMetric(rates[false], "flushed_reports/s")
	b.ReportMetric(rates[true], "durable_reports/s")
	b.ReportMetric(rates[true]/rates[false], "ratio")
}
