package servercmd

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/tracing"
)

const serveUsage = `usage: ` + Prog + ` [run] [flags]

Serve the data plane (gRPC) and the HTTP server (health, metrics, the
control plane) until SIGINT or SIGTERM; with --tls-cert and --tls-key both
over TLS (SIGHUP re-reads the files). A non-loopback listen address needs
TLS, or --insecure to serve plaintext on the network. On the first start
with an empty store it creates tenant "demo" and prints its API key and an
operator token once. Every flag can also be set as its REPOOL_* environment variable or as
a key of the --config file; flags win over the environment, which wins over
the file.
`

// serve is "server run".
func serve(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet(Prog+" run", flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, serveUsage)
	var cfg server.Config
	err := cli.Parse(fs, env.Stdout, env.Stderr, func() error {
		var err error
		cfg, err = Load(fs, args, env.Getenv)
		return err
	})
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	// Lines logged with a call's context carry its trace id.
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(env.Stderr, &slog.HandlerOptions{Level: level})))
	defer server.TuneRuntime(cfg, env.Getenv)()
	s, err := server.New(ctx, cfg, server.Options{Log: log, Out: env.Stdout})
	if err != nil {
		return err
	}
	// SIGHUP re-reads the TLS files (they are also watched for changes).
	// It is caught before the banner says the server is up, so that a
	// SIGHUP sent on seeing it never kills the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	security := "plaintext"
	if s.TLS() {
		security = "TLS"
	}
	fmt.Fprintf(env.Stdout, "repool server: gRPC on %s, HTTP on %s (health /healthz, /readyz, /readyz/active, HAProxy agent; metrics /metrics; control plane /api/v1/), %s\n", s.GRPCAddr(), s.HTTPAddr(), security)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if !s.TLS() {
					log.Info("SIGHUP: TLS is off, nothing to reload")
					continue
				}
				_ = s.ReloadTLS() // logged
			}
		}
	}()
	return s.Run(ctx)
}
