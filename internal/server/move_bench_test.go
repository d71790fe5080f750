package server

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"testing"
	"time"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/pool"
)

var benchMoveResources = flag.Int("bench.move-resources", 100_000, "resources of the tenant BenchmarkMoveTenant moves (each with 2 context cells)")

// BenchmarkMoveTenant measures the window of a live move on PostgreSQL:
// the demo tenant, with bench.move-resources resources, two context cells
// each with statistics, and 1,000 leases held, is moved between the
// default group and group b, back and forth, once per iteration. The
// window runs from the move request until the target answers the
// tenant's first call; it reports the mean window, the source's refusal
// (close, checkpoint, fenced handover) and the rest (the target's
// placement poll and restore).
func BenchmarkMoveTenant(b *testing.B) {
	n := *benchMoveResources
	src, dst := groupPairWith(b, func(c *Config) { c.GlobalResources, c.GlobalCells = int64(2*n), int64(6*n) })
	ctx := withKey(src.key)
	limits := fmt.Sprintf(`{"rate_per_second":1000000,"burst":1000000,"max_resources":%d,"max_cells":%d}`, 2*n, 6*n)
	if code := src.api(b, "PUT", "/api/v1/tenants/demo/limits", src.op, limits, nil); code != http.StatusOK {
		b.Fatalf("PUT limits = %d", code)
	}
	p, err := src.s.pools.Pool("demo")
	if err != nil {
		b.Fatal(err)
	}
	specs := make([]pool.Spec, n)
	for i := range specs {
		specs[i] = pool.Spec{ID: fmt.Sprintf("r%06d", i), Capacity: 2}
	}
	if _, _, err := p.Register(specs); err != nil {
		b.Fatal(err)
	}
	for i := range specs {
		for _, c := range []string{"search", "order"} {
			if _, err := p.Report(pool.Report{Resource: specs[i].ID, Context: c, Outcome: pool.Outcome(1 + i%2)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := 0; i < 1000; i++ {
		if _, err := src.pool.Acquire(ctx, &repoolv1.AcquireRequest{Context: "search", TtlSeconds: 600}); err != nil {
			b.Fatal(err)
		}
	}
	if err := src.s.Checkpoint(context.Background()); err != nil {
		b.Fatal(err)
	}
	groups := []string{"b", "default"}
	servers := []*running{src, dst}
	var window, refused time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		from, to := servers[i%2], servers[(i+1)%2]
		var moved struct {
			RefusedMS int64 `json:"refused_ms"`
		}
		start := time.Now()
		if code := from.api(b, "POST", "/api/v1/tenants/demo/move", src.op, `{"group":"`+groups[i%2]+`"}`, &moved); code != http.StatusOK {
			b.Fatalf("move %d = %d", i, code)
		}
		for {
			if _, err := to.pool.GetResource(ctx, &repoolv1.GetResourceRequest{Id: "r000000"}); err == nil {
				break
			}
			if time.Since(start) > time.Minute {
				b.Fatal("the target did not serve the tenant within a minute")
			}
			time.Sleep(time.Millisecond) // a poll of another server's progress, on real time
		}
		window += time.Since(start)
		refused += time.Duration(moved.RefusedMS) * time.Millisecond
	}
	b.ReportMetric(window.Seconds()/float64(b.N), "window_s")
	b.ReportMetric(refused.Seconds()/float64(b.N), "source_refused_s")
	b.ReportMetric((window-refused).Seconds()/float64(b.N), "target_s")
}
