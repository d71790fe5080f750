package servercmd

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/repool/repool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// call runs the command line with env and returns what it printed.
func call(t *testing.T, args []string, env map[string]string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut strings.Builder
	err = Run(context.Background(), args, Env{Getenv: func(k string) string { return env[k] }, Stdout: &out, Stderr: &errOut})
	return out.String(), errOut.String(), err
}

// TestHelp: every command and subcommand answers -h/--help (and "help
// COMMAND") on stdout, ending with nil or flag.ErrHelp (exit status 0),
// with the command's flags.
func TestHelp(t *testing.T) {
	commands := []string{"run", "admin-token", "haproxy", "keepalived", "switchover", "version", "help"}
	runFlags := []string{"usage: " + Prog + " [run] [flags]", "-grpc-addr", "-http-addr", "-store", "-config", "-ha", "REPOOL_STORE"}
	adminFlags := []string{"usage: " + Prog + " admin-token --role ROLE", "-role", "-tenant", "-ttl", "-store", "-config"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"-h", []string{"-h"}, commands},
		{"--help", []string{"--help"}, commands},
		{"help", []string{"help"}, commands},
		{"help help", []string{"help", "help"}, commands},
		{"run -h", []string{"run", "-h"}, runFlags},
		{"run --help", []string{"run", "--help"}, runFlags},
		{"help run", []string{"help", "run"}, runFlags},
		{"admin-token -h", []string{"admin-token", "-h"}, adminFlags},
		{"admin-token --help", []string{"admin-token", "--help"}, adminFlags},
		{"help admin-token", []string{"help", "admin-token"}, adminFlags},
		{"switchover -h", []string{"switchover", "-h"}, []string{"usage: " + Prog + " switchover --to NAME", "-to", "-group", "-timeout", "-store", "-config"}},
		{"haproxy -h", []string{"haproxy", "-h"}, []string{"haproxy render", "haproxy status", "haproxy drain|ready|maint"}},
		{"help haproxy", []string{"help", "haproxy"}, []string{"haproxy render"}},
		{"haproxy render -h", []string{"haproxy", "render", "-h"}, []string{"-inventory", "-host", "-out", "-pid-file"}},
		{"haproxy status --help", []string{"haproxy", "status", "--help"}, []string{"-socket"}},
		{"haproxy drain -h", []string{"haproxy", "drain", "-h"}, []string{"-socket", "-force"}},
		{"haproxy ready -h", []string{"haproxy", "ready", "-h"}, []string{"-socket"}},
		{"haproxy maint -h", []string{"haproxy", "maint", "-h"}, []string{"-socket", "-force"}},
		{"keepalived --help", []string{"keepalived", "--help"}, []string{"keepalived render"}},
		{"keepalived render -h", []string{"keepalived", "render", "-h"}, []string{"-inventory", "-host", "-out"}},
		{"--version", []string{"--version"}, []string{"repool server ", "(commit ", "; go1."}},
		{"version", []string{"version"}, []string{"repool server ", "(commit ", "; go1."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := call(t, tt.args, nil)
			if err != nil && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("Run(%q) = got error %v, want nil or flag.ErrHelp (exit status 0)", tt.args, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("Run(%q) = got stdout\n%s\nwant it to contain %q", tt.args, stdout, w)
				}
			}
			if stderr != "" {
				t.Errorf("Run(%q) = got stderr %q, want nothing", tt.args, stderr)
			}
		})
	}
}

// TestUsageErrors: an unknown command lists the commands; a bad flag or a
// stray argument is an error after the command's usage on stderr.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantErr    string
		wantStderr string
	}{
		{"unknown command", []string{"bogus"}, `unknown command "bogus": want run, admin-token, backup, restore, haproxy, keepalived, switchover, status, version, help`, "usage:"},
		{"help of an unknown command", []string{"help", "bogus"}, `help: unknown command "bogus": want run, admin-token, backup, restore, haproxy, keepalived, switchover, status, version, help`, "usage:"},
		{"help of two commands", []string{"help", "run", "admin-token"}, "help: want at most one COMMAND", ""},
		{"stray argument to run", []string{"run", "bogus"}, "unexpected arguments: [bogus]", ""},
		{"unknown flag", []string{"--bogus"}, "flag provided but not defined: -bogus", "usage: " + Prog + " [run] [flags]"},
		{"unknown admin-token flag", []string{"admin-token", "--bogus"}, "flag provided but not defined: -bogus", "usage: " + Prog + " admin-token"},
		{"switchover without --to", []string{"switchover", "--store", "postgres://x@127.0.0.1:1/x"}, "switchover: --to is required", ""},
		{"switchover on SQLite", []string{"switchover", "--to", "b", "--store", "sqlite:/nonexistent/x.db"}, "is not PostgreSQL: only an active/standby group", ""},
		{"switchover with no time", []string{"switchover", "--to", "b", "--timeout", "0s", "--store", "postgres://x@127.0.0.1:1/x"}, "--timeout 0s: want a positive duration", ""},
		{"haproxy without a command", []string{"haproxy"}, "haproxy: missing command: want render, status, drain, ready, maint", "usage:"},
		{"unknown haproxy command", []string{"haproxy", "reload"}, `unknown command "haproxy reload": haproxy commands are render, status, drain, ready, maint`, "usage:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := call(t, tt.args, nil)
			if err == nil || errors.Is(err, flag.ErrHelp) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run(%q) = got error %v, want one containing %q", tt.args, err, tt.wantErr)
			}
			if strings.HasPrefix(err.Error(), Prog+" ") {
				t.Errorf("Run(%q) = got error %q, want it not to start with %q (the main prefixes it)", tt.args, err, Prog)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("Run(%q) = got stderr %q, want it to contain %q", tt.args, stderr, tt.wantStderr)
			}
			if stdout != "" {
				t.Errorf("Run(%q) = got stdout %q, want nothing on an error", tt.args, stdout)
			}
		})
	}
}
