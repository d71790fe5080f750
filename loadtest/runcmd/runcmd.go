// Package runcmd is the command line of loadtest/cmd/run: Parse reads the
// flags into a Config, and Run runs the scenario, the k6 script or the
// topology for k6 that the Config asks for and returns the process's exit
// status. loadtest/cmd/run is a thin main around Run.
package runcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/repool/repool/loadtest/runner"
)

// Exit statuses, as k6 has them.
const (
	ExitOK         = 0
	ExitError      = 1 // an error, a fault of the plan that could not be applied among them
	ExitUsage      = 2 // bad flags
	ExitThresholds = 99
)

// Config is what the command line asks for.
type Config struct {
	// Options are the runner's; Out, Progress, Interactive and Log are set
	// by Run from its writers, Quiet and Verbose.
	Options runner.Options
	// Script, when set, is a k6 script to run in the embedded engine.
	Script string
	// Serve starts the topology and a fault controller for k6 and waits.
	Serve bool
	// Quiet drops the progress bar; Verbose logs progress to stderr.
	Quiet, Verbose bool
}

// UsageError is an error of the command line (exit status 2). Printed
// says the flag package has already written it, with the usage, to the
// FlagSet's output.
type UsageError struct {
	Err     error
	Printed bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Parse reads args (the arguments after the program name) into a Config.
// Usage and the flag package's own messages go to stderr. It returns
// flag.ErrHelp for -h, and a *UsageError for a flag it cannot parse and,
// in our words, for a stray argument, a missing -scenario, or a -mode or
// -store it does not know.
func Parse(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	o := &c.Options
	fs.StringVar(&o.Scenario, "scenario", "", "scenario name (baseline, provider-down, blackhole, brownout, failover, slow) or path to a .json file")
	fs.BoolVar(&o.Short, "short", false, "run the scenario's short CI variant")
	fs.StringVar(&o.Mode, "mode", runner.ModeBoth, "both (naive then sidecar, with a before/after table), sidecar, or naive")
	fs.StringVar(&o.Store, "store", runner.StoreAuto, "auto, postgres (HA pair on a throwaway cluster) or sqlite (one server per provider, no standby)")
	fs.StringVar(&o.JSON, "json", "", "write the JSON summary to this file")
	fs.StringVar(&o.HTML, "html", "", "write the HTML report to this file")
	fs.StringVar(&o.Dir, "dir", "", "make work directories here (default the system's temporary directory)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the work directories (logs and configurations of every component)")
	fs.StringVar(&c.Script, "script", "", "run this k6 script (loadtest/k6/repool.js) against the topology, in an embedded JavaScript engine with k6's API; -json is its SUMMARY_JSON")
	fs.BoolVar(&c.Serve, "serve", false, "start the topology and a fault controller for k6, print their addresses, and wait for Ctrl-C")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress bar")
	fs.BoolVar(&c.Verbose, "v", false, "log progress to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, &UsageError{Err: err, Printed: true}
	}
	switch {
	case fs.NArg() > 0:
		return Config{}, usagef("unexpected arguments %q: every option is a flag; see -h", fs.Args())
	case o.Scenario == "":
		return Config{}, usagef("-scenario is required; see -h")
	case o.Mode != runner.ModeBoth && o.Mode != runner.ModeSidecar && o.Mode != runner.ModeNaive:
		return Config{}, usagef("-mode %q: want both, sidecar or naive", o.Mode)
	case o.Store != runner.StoreAuto && o.Store != runner.StorePostgres && o.Store != runner.StoreSQLite:
		return Config{}, usagef("-store %q: want auto, postgres or sqlite", o.Store)
	}
	return c, nil
}

// Run runs the command line args, writing the summaries to stdout and
// progress, logs and errors to stderr, and returns the exit status: ExitOK
// when the thresholds hold (in the sidecar run), ExitThresholds when they
// do not, ExitError on error and ExitUsage for bad flags.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := Parse(args, stderr)
	var usage *UsageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &usage):
		if !usage.Printed {
			fmt.Fprintln(stderr, "run:", usage)
		}
		return ExitUsage
	case err != nil:
		fmt.Fprintln(stderr, "run:", err)
		return ExitError
	}
	o := c.options(stdout, stderr)
	switch {
	case c.Script != "":
		ok, err := runner.RunScript(ctx, o, c.Script)
		return status(stderr, ok, err)
	case c.Serve:
		err := runner.Serve(ctx, o)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		return status(stderr, true, err)
	}
	res, err := runner.Execute(ctx, o)
	return status(stderr, err == nil && res.ThresholdsOK(), err)
}

// options are c's runner options writing to stdout and stderr: the
// progress bar unless Quiet (redrawn in place when stderr is a terminal),
// and the log when Verbose.
func (c Config) options(stdout, stderr io.Writer) runner.Options {
	o := c.Options
	o.Out = stdout
	if !c.Quiet {
		o.Progress = stderr
		o.Interactive = isTerminal(stderr)
	}
	if c.Verbose {
		o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return o
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// status is the exit status of a run that ended with err, or without one
// and with the thresholds held (ok) or crossed; it prints err to stderr.
func status(stderr io.Writer, ok bool, err error) int {
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "run:", err)
		return ExitError
	case !ok:
		return ExitThresholds
	}
	return ExitOK
}
