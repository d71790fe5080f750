// Command sidecar runs the repool sidecar: a loopback HTTP/JSON API through
// which application backends use one or more reputation clusters
// (providers). It holds the providers' credentials and runs each call
// through a per-provider circuit breaker around a small retry, with
// single-flight token refresh and fast failure.
//
//	sidecar [--config sidecar.yaml] [--listen ADDR] [--allow-remote] [--log-level LEVEL]
//
// Without --config (or REPOOL_SIDECAR_CONFIG), one provider named
// "default" is configured from REPOOL_ENDPOINT (default 127.0.0.1:9090) and
// REPOOL_API_KEY. SIGHUP reloads the configuration; SIGINT and SIGTERM shut
// the sidecar down gracefully. See docs/sidecar.md.
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

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
)

const usage = `usage: sidecar [--config FILE] [--listen ADDR] [--allow-remote] [--log-level LEVEL]
       sidecar help

Serve the loopback HTTP/JSON API through which backends use repool's
clusters (providers), until SIGINT or SIGTERM; SIGHUP reloads the
configuration. Without --config (or REPOOL_SIDECAR_CONFIG), one provider
named "default" is configured from REPOOL_ENDPOINT (default 127.0.0.1:9090)
and REPOOL_API_KEY. Flags win over the environment, which wins over the
file. See docs/sidecar.md.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, nil)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidecar:", err)
		os.Exit(1)
	}
}

// run parses the flags, loads and validates the configuration and runs the
// sidecar until ctx ends, reloading the configuration on SIGHUP. ready,
// when set, is called once the sidecar listens (and SIGHUP is handled).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, ready func(*sidecar.Sidecar)) error {
	fs := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, usage)
	path := fs.String("config", "", "YAML configuration file (env REPOOL_SIDECAR_CONFIG); without one, provider \"default\" from REPOOL_ENDPOINT and REPOOL_API_KEY")
	listen := fs.String("listen", "", "HTTP listen address: loopback host:port or unix:/path (default 127.0.0.1:7070; env REPOOL_SIDECAR_LISTEN)")
	allowRemote := fs.Bool("allow-remote", false, "allow a listen address that is not loopback (the sidecar has no authentication of its own)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info; env REPOOL_SIDECAR_LOG_LEVEL)")
	if len(args) == 1 && args[0] == "help" {
		args = []string{"-h"}
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
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.Level()}))

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
