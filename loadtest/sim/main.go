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
// with each strategy's success rate in percent. The simulation is package
// loadtest/sim/quality.
//
// The jobs mode simulates a realistic job instead (package
// loadtest/sim/jobs): 8 workers running 3,000 jobs through twelve
// resources, good, mediocre and bad, some 10× slower, one turning bad
// halfway; it compares the pool under both objectives (success and
// success_per_time) with round robin, random and an oracle:
//
//	go run ./loadtest/sim jobs            # seeds 1-5, under a second
//	go run ./loadtest/sim jobs -seeds 20
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/repool/repool/loadtest/sim/jobs"
	"github.com/repool/repool/loadtest/sim/quality"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "jobs" {
		cfg, seeds, err := jobs.ParseFlags(flag.NewFlagSet("sim jobs", flag.ExitOnError), os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim jobs:", err)
			os.Exit(2)
		}
		if err := jobs.Run(cfg, seeds, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "sim jobs:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := quality.ParseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := quality.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		stop()
		os.Exit(1)
	}
}
