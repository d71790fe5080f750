// Package sidecarcmd is the sidecar command (cmd/sidecar): its flags, the
// configuration they override, and a sidecar run until its context ends,
// reloading the configuration on SIGHUP. cmd/sidecar is a thin main around
// Run.
package sidecarcmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/repool/repool/internal/buildinfo"
	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/gctune"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/tracing"
)

// Prog is how the usage text and errors name the command.
const Prog = "sidecar"

// Env is what the command reads and writes besides its flags.
type Env struct {
	Getenv         func(string) string
	Stdout, Stderr io.Writer
}

const usage = `usage: sidecar [--config FILE] [--listen ADDR] [--allow-remote] [--log-level LEVEL]
       sidecar --version
       sidecar help

Serve the loopback HTTP/JSON API through which backends use repool's
clusters (providers), until SIGINT or SIGTERM; SIGHUP reloads the
configuration. Without --config (or REPOOL_SIDECAR_CONFIG), one provider
named "default" is configured from REPOOL_ENDPOINT (default 127.0.0.1:9090)
and REPOOL_API_KEY. Flags win over the environment, which wins over the
file. See docs/sidecar.md.
`

// Run parses the flags, loads and validates the configuration and runs the
// sidecar until ctx ends, reloading the configuration on SIGHUP. ready,
// when set, is called once the sidecar listens (and SIGHUP is handled).
func Run(ctx context.Context, args []string, env Env, ready func(*sidecar.Sidecar)) error {
	getenv, stdout, stderr := env.Getenv, env.Stdout, env.Stderr
	fs := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, usage)
	path := fs.String("config", "", "YAML configuration file (env REPOOL_SIDECAR_CONFIG); without one, provider \"default\" from REPOOL_ENDPOINT and REPOOL_API_KEY")
	listen := fs.String("listen", "", "HTTP listen address: loopback host:port or unix:/path (default 127.0.0.1:7070; env REPOOL_SIDECAR_LISTEN)")
	allowRemote := fs.Bool("allow-remote", false, "allow a listen address that is not loopback (the sidecar has no authentication of its own)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info; env REPOOL_SIDECAR_LOG_LEVEL)")
	if len(args) == 1 && args[0] == "help" {
		args = []string{"-h"}
	}
	if len(args) == 1 && cli.IsVersion(args[0]) {
		fmt.Fprintln(stdout, buildinfo.Read().String(Prog))
		return nil
	}
	if err := cli.Parse(fs, stdout, stderr, func() error { return fs.Parse(args) }); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments: %v: the sidecar has no commands, only the flags above", fs.Args())
	}
	if *path == "" {
		*path = getenv("REPOOL_SIDECAR_CONFIG")
	}
	allowSet := false
	fs.Visit(func(f *flag.Flag) { allowSet = allowSet || f.Name == "allow-remote" })

	// load is also the reload: flags keep overriding the file.
	load := func() (config.Config, error) {
		cfg, err := config.Load(*path, getenv)
		if err != nil {
			return config.Config{}, err
		}
		if *listen != "" {
			cfg.Listen = *listen
		}
		if allowSet {
			cfg.AllowRemote = *allowRemote
		}
		if *logLevel != "" {
			cfg.LogLevel = *logLevel
		}
		cfg = cfg.WithDefaults()
		return cfg, cfg.Validate()
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	// Lines logged with a request's context carry its trace id.
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.Level()})))

	defer gctune.Apply(gctune.DefaultPercent, 0, getenv)() // the GOGC environment variable wins
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	s, err := sidecar.New(cfg, sidecar.Options{Log: log, Loader: load, Reload: hup})
	if err != nil {
		return err
	}
	if ready != nil {
		ready(s)
	}
	return s.Run(ctx)
}
