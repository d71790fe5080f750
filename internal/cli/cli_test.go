package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	errOther := errors.New("config file: no such file")
	tests := []struct {
		name               string
		args               []string
		after              error // returned by parse after fs.Parse succeeds
		wantErr            error // nil: none; else errors.Is
		wantStdout, wantSE string
	}{
		{"help", []string{"-h"}, nil, flag.ErrHelp, "usage: x\n\nflags:\n  -n int", ""},
		{"long help", []string{"--help"}, nil, flag.ErrHelp, "usage: x", ""},
		{"bad flag", []string{"--bogus"}, nil, nil, "", "usage: x\n\nflags:\n  -n int"},
		{"other error", nil, errOther, errOther, "", ""},
		{"fine", []string{"-n", "3"}, nil, nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.Int("n", 0, "a number")
			fs.Usage = Usage(fs, "usage: x\n")
			var stdout, stderr strings.Builder
			err := Parse(fs, &stdout, &stderr, func() error {
				if err := fs.Parse(tt.args); err != nil {
					return err
				}
				return tt.after
			})
			switch {
			case tt.name == "bad flag":
				if err == nil || !strings.Contains(err.Error(), "-bogus") {
					t.Errorf("Parse(%q) = got error %v, want the flag's refusal", tt.args, err)
				}
			case tt.wantErr == nil && err != nil, tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("Parse(%q) = got error %v, want %v", tt.args, err, tt.wantErr)
			}
			if !strings.HasPrefix(stdout.String(), tt.wantStdout) || (tt.wantStdout == "") != (stdout.Len() == 0) {
				t.Errorf("Parse(%q) = got stdout %q, want %q", tt.args, stdout.String(), tt.wantStdout)
			}
			if !strings.HasPrefix(stderr.String(), tt.wantSE) || (tt.wantSE == "") != (stderr.Len() == 0) {
				t.Errorf("Parse(%q) = got stderr %q, want %q", tt.args, stderr.String(), tt.wantSE)
			}
		})
	}
}

func TestIsHelp(t *testing.T) {
	for arg, want := range map[string]bool{"-h": true, "--help": true, "-help": true, "--h": true, "help": false, "-x": false, "": false} {
		if got := IsHelp(arg); got != want {
			t.Errorf("IsHelp(%q) = got %v, want %v", arg, got, want)
		}
	}
}

// TestExitStatus: a command that succeeds or showed help exits 0; one that
// failed exits 1 with its error after the program's name.
func TestExitStatus(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
		out  string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{fmt.Errorf("parsing: %w", flag.ErrHelp), 0, ""},
		{errors.New("store: refused"), 1, "prog: store: refused\n"},
	} {
		var stderr bytes.Buffer
		if got := exitStatus("prog", &stderr, tt.err); got != tt.want || stderr.String() != tt.out {
			t.Errorf("exitStatus(%v) = %d, %q; want %d, %q", tt.err, got, stderr.String(), tt.want, tt.out)
		}
	}
	if got := Main("prog", io.Discard, func(ctx context.Context) error { return ctx.Err() }); got != 0 {
		t.Errorf("Main of a command that ran = %d, want 0", got)
	}
}
