package servercmd

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/server"
)

const serveUsage = `usage: ` + Prog + ` [run] [flags]

Serve the data plane (gRPC, h2c) and the HTTP server (health, metrics, the
control plane) until SIGINT or SIGTERM. On the first start with an empty
store it creates tenant "demo" and prints its API key and an operator token
once. Every flag can also be set as its REPOOL_* environment variable or as
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
		cfg, err = server.Load(fs, args, env.Getenv)
		return err
	})
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
	defer server.TuneRuntime(cfg, env.Getenv)()
	s, err := server.New(ctx, cfg, server.Options{Log: log, Out: env.Stdout})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "repool server: gRPC on %s, HTTP on %s (health /healthz, /readyz, /readyz/active; metrics /metrics; control plane /api/v1/)\n", s.GRPCAddr(), s.HTTPAddr())
	return s.Run(ctx)
}
