// Command soak runs a churning workload against a repool server binary on
// a SQLite store (or a throwaway PostgreSQL cluster: -store postgres) and
// prints, at intervals, the server's resident memory,
// goroutines and open descriptors and the store's size and audit rows
// (package loadtest/soak; docs/loadtest.md, "Soak"):
//
//	go build -o /tmp/server ./cmd/server
//	go run ./loadtest/cmd/soak -server /tmp/server -for 5m -every 30s
//	go run ./loadtest/cmd/soak -server /tmp/server -store postgres
//	go run ./loadtest/cmd/soak -server /tmp/server -- --audit-max-rows-per-tenant 20000
//
// Arguments after "--" go to "server run". It exits 1 on error and 2 for
// bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/repool/repool/internal/pgcluster"
	"github.com/repool/repool/loadtest/soak"
)

func main() { os.Exit(run()) }

// run is main's body, returning the exit status so that its deferred
// clean-ups (the work directory, the PostgreSQL cluster) run.
func run() int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	server := fs.String("server", "", "the server `binary` to run (required)")
	dur := fs.Duration("for", 5*time.Minute, "how long the workload runs")
	every := fs.Duration("every", 30*time.Second, "time between samples")
	workers := fs.Int("workers", 16, "workers running the loop at once")
	blocked := fs.Float64("blocked", 0.2, "share of outcomes that are BLOCKED (quarantine the resource)")
	churn := fs.Int("churn-every", 10, "a worker registers a resource and removes its oldest every `n` iterations")
	storeKind := fs.String("store", "sqlite", "the server's store: sqlite (a file in the work directory) or postgres (a throwaway cluster this command starts, fsync off)")
	dir := fs.String("dir", "", "work `directory` for the store and the server's log (default: a temporary one, removed)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *server == "" || *workers < 1 || *every <= 0 || *dur <= 0 || *blocked < 0 || *blocked > 1 || *churn < 1 || (*storeKind != "sqlite" && *storeKind != "postgres") {
		fmt.Fprintln(os.Stderr, "soak: want -server BINARY, -workers at least 1, positive -for and -every, -blocked from 0 to 1, -churn-every at least 1, -store sqlite or postgres")
		return 2
	}
	work := *dir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "repool-soak-"); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			return 1
		}
		defer os.RemoveAll(work)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var storeURL string
	if *storeKind == "postgres" {
		pg, err := pgcluster.Start(ctx, pgcluster.Config{DirPrefix: "repool-soak-pg-"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak: postgres:", err)
			return 1
		}
		defer pg.Close()
		name, err := pg.CreateDB(ctx, "soak")
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak: postgres:", err)
			return 1
		}
		storeURL = pg.URL(name)
	}
	_, err := soak.Run(ctx, soak.Config{Server: *server, Args: fs.Args(), Store: storeURL, Dir: work, For: *dur, Every: *every,
		Workers: *workers, BlockedShare: *blocked, ChurnEvery: *churn, Out: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	return 0
}
