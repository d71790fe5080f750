// Command run runs a load-test scenario of loadtest/scenarios against a
// topology it starts on loopback (repool servers, HAProxy, toxiproxy, the
// sidecar), with k6's constant-arrival-rate semantics, injects the
// scenario's faults, and prints a k6-style summary:
//
//	go run ./loadtest/cmd/run -scenario provider-down                 # naive, then sidecar, then the before/after table
//	go run ./loadtest/cmd/run -scenario provider-down -mode sidecar   # through the sidecar only
//	go run ./loadtest/cmd/run -scenario provider-down -mode naive     # the client the sidecar replaces
//	go run ./loadtest/cmd/run -scenario provider-down -json out.json -html out.html
//	go run ./loadtest/cmd/run -scenario provider-down -serve        # topology and faults for k6
//	go run ./loadtest/cmd/run -script loadtest/k6/repool.js -scenario provider-down -short -json out.json
//	                                                                 # the k6 script itself, in an embedded engine
//
// It exits 0 when the thresholds hold (in the sidecar run), 99 when they
// do not (as k6 does), 1 on error — a fault of the plan that could not be
// applied is one — and 2 for bad flags. `go run` turns every non-zero
// status into 1: build it (go build -o bin/loadtest ./loadtest/cmd/run)
// to act on 99. See docs/loadtest.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/repool/repool/loadtest/runner"
	"github.com/repool/repool/loadtest/topology"
)

// exitThresholds is k6's exit code for crossed thresholds.
const exitThresholds = 99

func main() {
	if child, code := topology.RunChild(); child {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o runner.Options
	fs.StringVar(&o.Scenario, "scenario", "", "scenario name (baseline, provider-down, blackhole, brownout, failover, slow) or path to a .json file")
	fs.BoolVar(&o.Short, "short", false, "run the scenario's short CI variant")
	fs.StringVar(&o.Mode, "mode", runner.ModeBoth, "both (naive then sidecar, with a before/after table), sidecar, or naive")
	fs.StringVar(&o.Store, "store", runner.StoreAuto, "auto, postgres (HA pair on a throwaway cluster) or sqlite (independent pair)")
	fs.StringVar(&o.JSON, "json", "", "write the JSON summary to this file")
	fs.StringVar(&o.HTML, "html", "", "write the HTML report to this file")
	fs.StringVar(&o.Dir, "dir", "", "make work directories here (default the system's temporary directory)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the work directories (logs and configurations of every component)")
	script := fs.String("script", "", "run this k6 script (loadtest/k6/repool.js) against the topology, in an embedded JavaScript engine with k6's API; -json is its SUMMARY_JSON")
	serve := fs.Bool("serve", false, "start the topology and a fault controller for k6, print their addresses, and wait for Ctrl-C")
	quiet := fs.Bool("quiet", false, "no progress bar")
	verbose := fs.Bool("v", false, "log progress to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.Scenario == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "run: -scenario is required; see -h")
		return 2
	}
	o.Out = stdout
	if !*quiet {
		o.Progress = stderr
		if f, ok := stderr.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				o.Interactive = true
			}
		}
	}
	if *verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if *script != "" {
		ok, err := runner.RunScript(ctx, o, *script)
		if err != nil {
			fmt.Fprintln(stderr, "run:", err)
			return 1
		}
		if !ok {
			return exitThresholds
		}
		return 0
	}
	if *serve {
		if err := runner.Serve(ctx, o); err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "run:", err)
			return 1
		}
		return 0
	}
	res, err := runner.Execute(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "run:", err)
		return 1
	}
	if !res.ThresholdsOK() {
		return exitThresholds
	}
	return 0
}
