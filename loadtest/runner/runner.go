// Package runner runs a load-test scenario end to end: it starts the
// scenario's topology on loopback (package topology), drives iterations
// with k6's constant-arrival-rate semantics (package arrival) through the
// sidecar or the naive client (package client), applies the fault plan on
// the run's clock, and returns the summary (package summary). cmd/run is a
// thin main around it; its test reuses it.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/loadtest/arrival"
	"github.com/repool/repool/loadtest/client"
	"github.com/repool/repool/loadtest/scenario"
	"github.com/repool/repool/loadtest/summary"
	"github.com/repool/repool/loadtest/topology"
)

// Modes.
const (
	ModeSidecar = "sidecar"
	ModeNaive   = "naive"
	ModeBoth    = "both"
)

// Client is one way of calling providers; client.Sidecar and client.Naive
// implement it.
type Client interface {
	Acquire(ctx context.Context, provider, workContext string, ttlSeconds int) (client.Lease, client.Result)
	Report(ctx context.Context, provider string, l client.Lease, workContext, outcome string) client.Result
	Release(ctx context.Context, provider string, l client.Lease) client.Result
	// ReleaseNext releases l with the outcome and leases the next resource
	// in the same call; ok reports whether a next lease came.
	ReleaseNext(ctx context.Context, provider string, l client.Lease, outcome, workContext string, ttlSeconds int) (next client.Lease, ok bool, r client.Result)
	Close() error
}

var (
	_ Client = (*client.Sidecar)(nil)
	_ Client = (*client.Naive)(nil)
)

// Config configures Run.
type Config struct {
	// Scenario is the scenario to run. Required.
	Scenario *scenario.Scenario
	// Mode is ModeSidecar or ModeNaive.
	Mode string
	// Postgres holds the servers' databases (HA mode); nil runs each
	// provider on two SQLite servers (see package topology).
	Postgres *topology.Postgres
	// Dir receives the topology's configurations and logs. Required.
	Dir string
	// Progress, when set, receives a progress bar (redrawn in place when
	// Interactive, a line every few seconds otherwise).
	Progress    io.Writer
	Interactive bool
	// Log receives progress messages. Default discards them.
	Log *slog.Logger
	// Clock schedules the iterations, the fault plan and the progress bar,
	// and times the calls. Default the wall clock (clock.Real).
	Clock clock.Clock
}

// Run runs one mode of the scenario and returns its summary. Everything it
// starts is stopped before it returns, also when ctx is cancelled (the
// summary then covers what ran). A fault of the plan that fails to apply
// makes it return an error naming the fault, not a summary: the run did not
// measure what the scenario describes.
func Run(ctx context.Context, cfg Config) (*summary.Summary, error) {
	sc := cfg.Scenario
	if sc == nil || cfg.Dir == "" || (cfg.Mode != ModeSidecar && cfg.Mode != ModeNaive) {
		return nil, errors.New("runner: Config.Scenario, Dir and Mode (sidecar or naive) are required")
	}
	if len(sc.Groups) > 0 && (cfg.Mode != ModeSidecar || cfg.Postgres == nil) {
		return nil, fmt.Errorf("scenario %s runs tenants on groups of servers: it needs -mode sidecar (the naive client sends no x-repool-tenant) and PostgreSQL", sc.Name)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	clk := cfg.Clock
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	rec := summary.NewRecorder(sc.Names())
	var started atomic.Int64 // t0 in UnixNano, once the run started
	event := func(text string) {
		if t := started.Load(); t != 0 { // setup's events are noise
			rec.AddEvent(clk.Now().Sub(time.Unix(0, t)), text)
		}
	}
	cfg.Log.Info("starting the topology", "scenario", sc.Name, "mode", cfg.Mode, "dir", cfg.Dir)
	tc := topologyConfig(sc, cfg.Mode == ModeSidecar)
	tc.Postgres, tc.Dir, tc.Event, tc.Log = cfg.Postgres, cfg.Dir, event, cfg.Log
	topo, err := topology.Start(ctx, tc)
	if err != nil {
		return nil, fmt.Errorf("starting the topology: %w", err)
	}
	defer topo.Close()

	var c Client
	if cfg.Mode == ModeSidecar {
		c = client.NewSidecar(topo.SidecarURL(), sc.Request.Timeout.D(), sc.MaxVUs)
	} else {
		hosts, keys := map[string][]string{}, map[string]string{}
		for _, p := range sc.Names() {
			hosts[p], keys[p] = topo.Hosts(p), topo.APIKey(p)
		}
		if c, err = client.NewNaive(hosts, keys, client.NaivePolicy{
			AttemptsPerHost: sc.Naive.AttemptsPerHost, RetryDelay: sc.Naive.RetryDelay.D(), AttemptTimeout: sc.Naive.AttemptTimeout.D(),
		}); err != nil {
			return nil, err
		}
	}
	defer c.Close()
	if err := warmUp(ctx, c, sc, clk); err != nil {
		return nil, err
	}

	r := &iterations{sc: sc, c: c, rec: rec, clock: clk, mix: mixIndexes(sc), vus: make(chan *vuState, sc.MaxVUs+1)}
	exec, err := arrival.New(arrival.Config{
		Rate: sc.Rate, TimeUnit: sc.TimeUnit.D(), Duration: sc.Duration.D(),
		PreAllocatedVUs: sc.PreAllocatedVUs, MaxVUs: sc.MaxVUs, GracefulStop: sc.GracefulStop.D(), Clock: clk,
	}, r.run)
	if err != nil {
		return nil, err
	}
	pl := newPlan(sc, topo, func(at time.Duration, text string) { rec.AddEvent(at, text) }, clk)
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	bar := newProgress(cfg.Progress, cfg.Interactive, sc, cfg.Mode, exec, rec, clk)
	startedAt := clk.Now()
	stats := exec.Run(ctx, func(start time.Time) {
		r.t0, startedAt = start, start
		started.Store(start.UnixNano())
		pl.start(faultCtx, start)
		bar.start()
	})
	bar.stop()
	stopFaults()
	pl.finish()
	cfg.Log.Info("run finished; stopping the topology", "iterations", stats.Iterations, "dropped", stats.Dropped)
	if err := topo.Close(); err != nil {
		cfg.Log.Warn("a child exited with an error", "err", err)
	}
	if err := pl.err(); err != nil {
		return nil, err
	}
	return summary.Compute(summary.Input{
		Mode: cfg.Mode, Scenario: sc, Stats: stats, Windows: pl.windows(), Moves: pl.movesMeasured(), Recorder: rec, StartedAt: startedAt,
	}), nil
}

// topologyConfig is the part of the topology's configuration that sc
// decides: its providers, a brownout proxy for each provider with a brownout
// fault, the sidecar (when sidecar is set) with sc's policies, and the
// resources to register. The caller sets Postgres, Dir, Event and Log.
func topologyConfig(sc *scenario.Scenario, sidecar bool) topology.Config {
	brownout := map[string]bool{}
	for _, f := range sc.Faults {
		if f.Kind == scenario.KindBrownout {
			brownout[f.Provider] = true
		}
	}
	return topology.Config{
		Providers: sc.Names(), Brownout: brownout, Sidecar: sidecar, SidecarPolicies: sc.Sidecar,
		Resources: sc.Request.Resources, Capacity: sc.Request.Capacity, Groups: sc.Groups,
	}
}

// iterations runs the scenario's iterations.
type iterations struct {
	sc    *scenario.Scenario
	c     Client
	rec   *summary.Recorder
	clock clock.Clock
	mix   []int
	t0    time.Time // written before the first iteration starts
	// vus holds the state of the VUs not running an iteration, as k6js
	// keeps its VUs' runtimes (and k6 its VUs' globals): an iteration
	// takes one, or makes one when none is free, and puts it back.
	vus chan *vuState
}

// vuState is what a VU keeps between its iterations, as the k6 script
// keeps it in its globals: the lease it went on with, per provider.
type vuState struct {
	held map[int]heldLease
}

// heldLease is a lease a VU holds for its next use of the provider, and
// when it asked for it.
type heldLease struct {
	lease client.Lease
	at    time.Time
}

// run is one iteration, one use of a resource of one provider, as a
// backend that goes on using resources makes it: with the lease its VU
// went on with from its previous use of the provider (or, without one, a
// lease from acquire), it releases the lease with the use's outcome and
// leases the next resource in the same call (release with next), which it
// keeps for its next use. A steady iteration is one round trip. A lease
// held for half its TTL or longer is left to expire rather than used (the
// VU may have been idle), and a failed acquire ends the iteration. Calls
// interrupted by the end of the run are not recorded (as k6 does not);
// leases held when the run ends expire with their TTL.
func (it *iterations) run(ctx context.Context, iter int64) {
	var vu *vuState
	select {
	case vu = <-it.vus:
	default:
		vu = &vuState{held: map[int]heldLease{}}
	}
	defer func() {
		select {
		case it.vus <- vu:
		default:
		}
	}()
	pi := it.mix[iter%int64(len(it.mix))]
	p := it.sc.Providers[pi].Name
	req := it.sc.Request
	start := it.clock.Now()
	h, ok := vu.held[pi]
	delete(vu.held, pi)
	lease := h.lease
	if !ok || start.Sub(h.at) >= time.Duration(req.TTLSeconds)*time.Second/2 {
		var res client.Result
		lease, res = it.c.Acquire(ctx, p, req.Context, req.TTLSeconds)
		if !it.record(ctx, pi, summary.Acquire, start, res) || res.Failed() {
			it.finish(ctx, pi, start)
			return
		}
	}
	outcome := "SUCCESS"
	if it.sc.FailureReport(iter) {
		outcome = "FAILURE"
	}
	t := it.clock.Now()
	next, got, res := it.c.ReleaseNext(ctx, p, lease, outcome, req.Context, req.TTLSeconds)
	if !it.record(ctx, pi, summary.Release, t, res) {
		return
	}
	if got {
		vu.held[pi] = heldLease{lease: next, at: t}
	}
	it.finish(ctx, pi, start)
}

func (it *iterations) record(ctx context.Context, pi int, op summary.Op, start time.Time, res client.Result) bool {
	if ctx.Err() != nil {
		return false
	}
	it.rec.Add(summary.Sample{
		Start: start.Sub(it.t0), Dur: it.clock.Now().Sub(start), Provider: pi, Op: op,
		Failed: res.Failed(), Status: res.Status, Code: res.Code, FastFail: res.FastFail,
	})
	return true
}

func (it *iterations) finish(ctx context.Context, pi int, start time.Time) {
	if ctx.Err() == nil {
		it.rec.AddIteration(pi, it.clock.Now().Sub(start))
	}
}

// mixIndexes is the scenario's weighted round robin as provider indexes.
func mixIndexes(sc *scenario.Scenario) []int {
	idx := map[string]int{}
	for i, p := range sc.Providers {
		idx[p.Name] = i
	}
	names := sc.Mix()
	out := make([]int, len(names))
	for i, n := range names {
		out[i] = idx[n]
	}
	return out
}

// warmUp makes one acquire and release per provider (tokens, connections,
// HAProxy's first checks), retrying for up to 30s: a loaded machine can
// start a provider's servers slowly, or between two leaders.
func warmUp(ctx context.Context, c Client, sc *scenario.Scenario, clk clock.Clock) error {
	for _, p := range sc.Names() {
		deadline := clk.Now().Add(30 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			l, res := c.Acquire(cctx, p, sc.Request.Context, sc.Request.TTLSeconds)
			if !res.Failed() {
				res = c.Release(cctx, p, l)
			}
			cancel()
			if !res.Failed() {
				break
			}
			if clk.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("warm-up on provider %s: status %d %s", p, res.Status, res.Code)
			}
			_ = clock.Sleep(ctx, clk, 100*time.Millisecond) // a cancelled ctx ends the loop above
		}
	}
	return nil
}

// WorkDir returns a new directory for a run's files under parent (the
// system's temporary directory when empty).
func WorkDir(parent, scenarioName string) (string, error) {
	if parent != "" {
		if err := os.MkdirAll(parent, 0o700); err != nil {
			return "", err
		}
	}
	return os.MkdirTemp(parent, "repool-loadtest-"+filepath.Base(scenarioName)+"-")
}
