// Package servercmd is the command line of cmd/server: the commands run
// (the default), admin-token, backup, restore, haproxy, keepalived, switchover, status, version and help, each with its
// -h/--help, the loading of the server's configuration (flags, REPOOL_*
// variables, a YAML file: Load) and the store-URL handling they share.
// cmd/server is a thin main around Run.
package servercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/repool/repool/internal/buildinfo"
	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/lb"
)

// Prog is how the usage texts name the command.
const Prog = "server"

// command is one command of the server's command line.
type command struct {
	name, args, what string
	run              func(ctx context.Context, args []string, env Env) error
}

// Env is what a command reads and writes besides its arguments.
type Env struct {
	Getenv         func(string) string
	Stdout, Stderr io.Writer
}

func commands() []command {
	return []command{
		{"run", "[flags]", "serve the data plane (gRPC) and the control plane (HTTP); the default", serve},
		{"admin-token", "--role ROLE [flags]", "print a control-plane bearer token signed with the store's key", adminToken},
		{"backup", "--to FILE [flags]", "write a consistent copy of the running server's SQLite store", backup},
		{"restore", "--from FILE [flags]", "make a backup the SQLite store's database (the server stopped)", restore},
		{"haproxy", "render|status|drain|ready|maint|sync-placements ...", "HAProxy config from the LB inventory; runtime control", lbCommand("haproxy")},
		{"keepalived", "render|check ...", "keepalived.conf for one LB host; its track script (check of HAProxy)", lbCommand("keepalived")},
		{"switchover", "--to NAME [flags]", "hand an active/standby group's leadership to the standby named", switchover},
		{"status", "--inventory FILE [--json]", "the deployment at a glance: LB hosts, servers as HAProxy sees them, leaders", status},
		{"version", "", "the build: version, commit, Go version (also --version)", version},
		{"help", "[COMMAND]", "this text, or a command's flags (as COMMAND -h)", help},
	}
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s %s %s\t%s\n", Prog, c.name, c.args, c.what)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\n%s with no command, or with flags first, is %s run.\n", Prog, Prog)
	fmt.Fprintf(&b, "Run \"%s COMMAND -h\" (or \"%s help COMMAND\") for a command's flags.\n", Prog, Prog)
	return b.String()
}

func names() []string {
	var out []string
	for _, c := range commands() {
		out = append(out, c.name)
	}
	return out
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// Run runs the server's command line; args are the arguments after the
// program name. It returns flag.ErrHelp after printing help that was asked
// for (a main exits 0 for it) and any other error for the main to print
// (exit 1): a usage error comes after the usage, on env.Stderr.
func Run(ctx context.Context, args []string, env Env) error {
	if len(args) == 1 && cli.IsVersion(args[0]) {
		return version(ctx, nil, env)
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && cli.IsHelp(args[0]) {
			fmt.Fprint(env.Stdout, usage())
			return flag.ErrHelp
		}
		return serve(ctx, args, env)
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprint(env.Stderr, usage())
		return fmt.Errorf("unknown command %q: want %s", args[0], strings.Join(names(), ", "))
	}
	return c.run(ctx, args[1:], env)
}

// version prints the build (buildinfo).
func version(_ context.Context, args []string, env Env) error {
	if len(args) > 0 {
		return fmt.Errorf("version: takes no arguments, got %q", args)
	}
	fmt.Fprintln(env.Stdout, buildinfo.Read().String(Prog))
	return nil
}

// help prints the usage, or a command's help.
func help(ctx context.Context, args []string, env Env) error {
	switch {
	case len(args) == 0:
		fmt.Fprint(env.Stdout, usage())
		return nil
	case len(args) > 1:
		return fmt.Errorf("help: want at most one COMMAND, got %q", args)
	case args[0] == "help":
		fmt.Fprint(env.Stdout, usage())
		return nil
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprint(env.Stderr, usage())
		return fmt.Errorf("help: unknown command %q: want %s", args[0], strings.Join(names(), ", "))
	}
	err := c.run(ctx, []string{"-h"}, env)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func lbCommand(tool string) func(context.Context, []string, Env) error {
	return func(ctx context.Context, args []string, env Env) error {
		return lb.Runner{OpenPlacements: openPlacements}.Command(ctx, append([]string{tool}, args...), env.Stdout, env.Stderr)
	}
}
