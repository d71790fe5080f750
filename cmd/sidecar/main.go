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
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/repool/repool/internal/sidecar/sidecarcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := sidecarcmd.Run(ctx, os.Args[1:], sidecarcmd.Env{Getenv: os.Getenv, Stdout: os.Stdout, Stderr: os.Stderr}, nil)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, sidecarcmd.Prog+":", err)
		os.Exit(1)
	}
}
