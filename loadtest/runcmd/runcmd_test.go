package runcmd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/repool/repool/loadtest/runner"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Config
	}{
		{"defaults", []string{"-scenario", "baseline"},
			Config{Options: runner.Options{Scenario: "baseline", Mode: runner.ModeBoth, Store: runner.StoreAuto}}},
		{"every flag", []string{"-scenario", "s.json", "-short", "-mode", "naive", "-store", "sqlite", "-json", "o.json",
			"-html", "o.html", "-dir", "/tmp/d", "-keep", "-script", "k.js", "-serve", "-quiet", "-v"},
			Config{Options: runner.Options{Scenario: "s.json", Short: true, Mode: runner.ModeNaive, Store: runner.StoreSQLite,
				JSON: "o.json", HTML: "o.html", Dir: "/tmp/d", Keep: true}, Script: "k.js", Serve: true, Quiet: true, Verbose: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			got, err := Parse(tc.args, &stderr)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%q) = %+v, %v; want %+v, nil", tc.args, got, err, tc.want)
			}
			if stderr.Len() != 0 {
				t.Errorf("Parse(%q) wrote %q, want nothing", tc.args, stderr.String())
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		printed bool   // the flag package wrote the error and the usage
		want    string // in the error
	}{
		{[]string{}, false, "-scenario is required"},
		{[]string{"-scenario", "baseline", "extra"}, false, `unexpected arguments ["extra"]`},
		{[]string{"-scenario", "baseline", "-mode", "fast"}, false, `-mode "fast": want both, sidecar or naive`},
		{[]string{"-scenario", "baseline", "-store", "redis"}, false, `-store "redis": want auto, postgres or sqlite`},
		{[]string{"-scenario", "baseline", "-bogus"}, true, "-bogus"},
		{[]string{"-scenario", "baseline", "-short=maybe"}, true, "-short"},
	} {
		var stderr bytes.Buffer
		_, err := Parse(tc.args, &stderr)
		var usage *UsageError
		if !errors.As(err, &usage) || usage.Printed != tc.printed || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want a UsageError (printed %v) containing %q", tc.args, err, tc.printed, tc.want)
			continue
		}
		if printed := strings.Contains(stderr.String(), "Usage of run:"); printed != tc.printed {
			t.Errorf("Parse(%q) wrote %q; usage printed %v, want %v", tc.args, stderr.String(), printed, tc.printed)
		}
	}
	if _, err := Parse([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("Parse(-h) = %v, want flag.ErrHelp", err)
	}
}

// TestRunExitStatus runs the command line up to the point where it would
// start a topology: help, usage errors and an unknown scenario, in each of
// the three ways to run.
func TestRunExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		code       int
		wantStderr string
	}{
		{[]string{"-h"}, ExitOK, "Usage of run:\n  -dir string"},
		{[]string{"-bogus"}, ExitUsage, "flag provided but not defined: -bogus\nUsage of run:"},
		{[]string{}, ExitUsage, "run: -scenario is required; see -h\n"},
		{[]string{"-scenario", "no-such-scenario", "-quiet"}, ExitError, "run: "},
		{[]string{"-scenario", "no-such-scenario", "-quiet", "-serve"}, ExitError, "run: "},
		{[]string{"-scenario", "no-such-scenario", "-quiet", "-script", "loadtest/k6/repool.js"}, ExitError, "run: "},
		{[]string{"-scenario", "/nonexistent/s.json", "-quiet"}, ExitError, "run: open /nonexistent/s.json"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.HasPrefix(stderr.String(), tc.wantStderr) {
			t.Errorf("Run(%q) = %d, stderr %q; want %d, stderr starting %q", tc.args, code, stderr.String(), tc.code, tc.wantStderr)
		}
		if stdout.Len() != 0 {
			t.Errorf("Run(%q) wrote %q to stdout, want nothing", tc.args, stdout.String())
		}
	}
}

func TestOptions(t *testing.T) {
	var stdout, stderr bytes.Buffer
	o := Config{Options: runner.Options{Scenario: "baseline"}}.options(&stdout, &stderr)
	if o.Out != &stdout || o.Progress != &stderr || o.Interactive || o.Log != nil {
		t.Errorf("options() = Out %p, Progress %p, Interactive %v, Log %v; want stdout %p, stderr %p, false, nil",
			o.Out, o.Progress, o.Interactive, o.Log, &stdout, &stderr)
	}
	o = Config{Quiet: true, Verbose: true}.options(&stdout, &stderr)
	if o.Progress != nil || o.Log == nil {
		t.Errorf("options() with Quiet and Verbose = Progress %v, Log %v; want nil, a logger", o.Progress, o.Log)
	}
	o.Log.Info("hello")
	if !strings.Contains(stderr.String(), "msg=hello") {
		t.Errorf("the Verbose log wrote %q to stderr, want the message", stderr.String())
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		ok   bool
		err  error
		code int
		want string
	}{
		{true, nil, ExitOK, ""},
		{false, nil, ExitThresholds, ""},
		{true, errors.New("boom"), ExitError, "run: boom\n"},
		{false, errors.New("boom"), ExitError, "run: boom\n"},
	} {
		var stderr bytes.Buffer
		if code := status(&stderr, tc.ok, tc.err); code != tc.code || stderr.String() != tc.want {
			t.Errorf("status(%v, %v) = %d, wrote %q; want %d, %q", tc.ok, tc.err, code, stderr.String(), tc.code, tc.want)
		}
	}
}
