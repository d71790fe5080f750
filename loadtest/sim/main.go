// Command sim measures how well the reputation pool (internal/pool) picks
// resources, against exact Thompson sampling, the heuristics popular proxy
// pools use, and an oracle that knows the truth.
//
// Every strategy runs on its own copy of one seeded world (see package
// world): resources with hidden success probabilities per context that
// drift, break and recover, a few always-bad ones, and a request stream
// whose outcomes come from common random numbers. Several leases are in
// flight at once, so feedback is delayed and capacity matters.
//
//	go run ./loadtest/sim                 # default world, a few seconds
//	go run ./loadtest/sim -seed 7 -steps 50000
//
// The last line of the output is
//
//	sim: ours=<pct> exact=<pct> best_heuristic=<pct>
//
// with each strategy's success rate in percent.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		stop()
		os.Exit(1)
	}
}

// parseFlags reads the command line into a validated Config.
func parseFlags(fs *flag.FlagSet, args []string) (Config, error) {
	var c Config
	fs.Uint64Var(&c.World.Seed, "seed", 1, "seed of the world and of every strategy's randomness")
	fs.IntVar(&c.World.Resources, "n", 200, "resources (capacity 1 each)")
	fs.IntVar(&c.World.Contexts, "contexts", 3, "contexts (target sites)")
	fs.DurationVar(&c.World.Step, "step", 100*time.Millisecond, "simulated time between requests")
	fs.IntVar(&c.Steps, "steps", 216000, "requests to simulate")
	fs.IntVar(&c.InFlight, "inflight", 16, "leases in flight; an outcome is reported this many requests after its acquire")
	fs.Float64Var(&c.World.DriftSD, "drift-sd", 0.6, "stationary sd of the logit drift (negative: none)")
	fs.DurationVar(&c.World.DriftTau, "drift-tau", 2*time.Hour, "mean-reversion time of the drift")
	fs.DurationVar(&c.World.BreakEvery, "break-every", 6*time.Hour, "mean time between breakages of one resource (negative, e.g. -1s: none)")
	fs.DurationVar(&c.World.BreakFor, "break-for", 15*time.Minute, "mean length of a breakage")
	fs.Float64Var(&c.World.BadFraction, "bad", 0.05, "share of always-bad resources (negative: none)")
	fs.DurationVar(&c.HalfLife, "half-life", 0, "half-life of ours and exact (0: the pool's default)")
	fs.IntVar(&c.Leaders, "leaders", 0, "override pool Config.Leaders (0: pool default)")
	fs.IntVar(&c.Candidates, "candidates", 0, "override pool Config.Candidates (0: pool default)")
	fs.IntVar(&c.FailLimit, "fail-limit", 3, "fail-counter: failures before a resource is removed")
	fs.Float64Var(&c.ScoreLimit, "score-limit", 3, "error-score: score at which a resource is blocked")
	fs.IntVar(&c.Parallel, "parallel", 0, "strategies simulated at once (0: GOMAXPROCS)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, c.Validate()
}

// run simulates cfg and writes the header, the table, the elapsed time and,
// last, the sim line to w.
func run(ctx context.Context, cfg Config, w io.Writer) error {
	start := time.Now()
	rep, err := Simulate(ctx, cfg)
	if err != nil {
		return err
	}
	rep.writeHeader(w)
	fmt.Fprintln(w)
	if err := rep.writeTable(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "elapsed %v\n", time.Since(start).Round(time.Millisecond))
	_, err = fmt.Fprintln(w, rep.SimLine())
	return err
}
