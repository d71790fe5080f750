package quality

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"
)

// ParseFlags reads the command line args into fs and returns the validated
// Config they describe.
func ParseFlags(fs *flag.FlagSet, args []string) (Config, error) {
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

// Run simulates cfg and writes the header, the table, the elapsed time and,
// last, the sim line to w.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
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
