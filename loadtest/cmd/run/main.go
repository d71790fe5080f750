// Command run runs a load-test scenario of loadtest/scenarios against a
// topology it starts on loopback (repool servers, HAProxy, toxiproxy, the
// sidecar), with k6's constant-arrival-rate semantics, injects the
// scenario's faults, and prints a k6-style summary:
//
//	go run ./loadtest/cmd/run -scenario provider-down                 # naive, then sidecar, then the before/after table
//	go run ./loadtest/cmd/run -scenario provider-down -mode sidecar   # through the sidecar only
//	go run ./loadtest/cmd/run -scenario provider-down -mode naive     # the client the sidecar replaces
//	go run ./loadtest/cmd/run -scenario provider-down -json out.json -html out.html
//	go run ./loadtest/cmd/run -scenario provider-down -serve        # topology and faults for k6
//	go run ./loadtest/cmd/run -script loadtest/k6/repool.js -scenario provider-down -short -json out.json
//	                                                                 # the k6 script itself, in an embedded engine
//
// It exits 0 when the thresholds hold (in the sidecar run), 99 when they
// do not (as k6 does), 1 on error — a fault of the plan that could not be
// applied is one — and 2 for bad flags. `go run` turns every non-zero
// status into 1: build it (go build -o bin/loadtest ./loadtest/cmd/run)
// to act on 99. See docs/loadtest.md; the command line is package
// loadtest/runcmd.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/repool/repool/loadtest/runcmd"
	"github.com/repool/repool/loadtest/topology"
)

func main() {
	if child, code := topology.RunChild(); child {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runcmd.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
