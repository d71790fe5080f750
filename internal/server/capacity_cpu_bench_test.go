package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
)

// BenchmarkCPUPerCall is the CPU side of docs/scaling.md's capacity model:
// the CPU time per call of each kind — a lease cycle (Acquire, then
// Release with an outcome), a Report, a Register of one new resource — on
// a server on PostgreSQL (the store of a group), from bench.clients
// clients on one connection for bench.for each. The CPU is this process's
// (cpuCost): the server and its in-process gRPC clients; PostgreSQL's own
// CPU is not in it. Per call, it hardly depends on what else the machine
// runs, unlike the rate, which is printed beside it.
func BenchmarkCPUPerCall(b *testing.B) {
	r, ctx, ids, _ := pgServer(b, Config{GlobalResources: 10_000_000}, 1000)
	c := benchClient(b, r)
	contexts := []string{"search", "order"}
	var next atomic.Int64
	kinds := []struct {
		name string
		call func(w, i int) error
	}{
		{"acquire+release", func(w, i int) error {
			l, err := c.Acquire(ctx, &repoolv1.AcquireRequest{Context: contexts[i%2], TtlSeconds: 60})
			if err != nil {
				return err
			}
			outcome := repoolv1.Outcome_SUCCESS
			if (w+i)%5 == 0 {
				outcome = repoolv1.Outcome_FAILURE
			}
			_, err = c.Release(ctx, &repoolv1.ReleaseRequest{LeaseId: l.GetLease().GetLeaseId(), FencingToken: l.GetLease().GetFencingToken(), Outcome: outcome})
			return err
		}},
		{"report", func(w, i int) error {
			_, err := c.Report(ctx, &repoolv1.ReportRequest{ResourceId: ids[(w*7919+i)%len(ids)], Context: contexts[i%2], Outcome: repoolv1.Outcome_SUCCESS})
			return err
		}},
		{"register", func(_, _ int) error {
			id := fmt.Sprintf("res-%d", next.Add(1))
			_, err := c.Register(ctx, &repoolv1.RegisterRequest{Resources: []*repoolv1.Resource{{Id: id}}})
			return err
		}},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				var errs int64
				rate, cost, err := measureCPU(context.Background(), nil, *benchFor, func() float64 {
					var rate float64
					rate, errs = run(*benchClients, *benchFor, func(_ context.Context, w, i int) error { return k.call(w, i) })
					return rate
				})
				if err != nil {
					b.Fatal(err)
				}
				if errs > 0 {
					b.Fatalf("%s: %d calls failed", k.name, errs)
				}
				b.ReportMetric(cost.perCycle(), "cpu_µs/call")
				b.ReportMetric(rate, "calls/s")
				fmt.Printf("%s on PostgreSQL, %d clients, %v: %.0f calls/s, CPU %.1f µs per call (server and clients)\n",
					k.name, *benchClients, *benchFor, rate, cost.perCycle())
				time.Sleep(settleFlush)
			}
		})
	}
}
