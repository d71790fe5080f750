// Command sidecar runs the repool sidecar: a loopback HTTP/JSON API through
// which application backends use one or more reputation clusters
// (providers). It holds the providers' credentials and runs each call
// through a per-provider circuit breaker around a small retry, with
// single-flight token refresh and fast failure.
//
//	sidecar [--config sidecar.yaml] [--listen ADDR] [--allow-remote] [--log-level LEVEL]
//
// SIGHUP reloads the configuration; SIGINT and SIGTERM shut the sidecar
// down gracefully. See internal/sidecar/sidecarcmd and docs/sidecar.md.
package main

import (
	"context"
	"os"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/sidecar/sidecarcmd"
)

func main() {
	os.Exit(cli.Main(sidecarcmd.Prog, os.Stderr, func(ctx context.Context) error {
		return sidecarcmd.Run(ctx, os.Args[1:], sidecarcmd.Env{Getenv: os.Getenv, Stdout: os.Stdout, Stderr: os.Stderr}, nil)
	}))
}
