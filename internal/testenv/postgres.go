package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/repool/repool/internal/pgcluster"
)

// PostgresBin is where Debian's postgresql-15 package installs the server
// binaries.
const PostgresBin = "/usr/lib/postgresql/15/bin"

// Postgres returns the URL of a new, empty database on a real PostgreSQL 15
// server (postgres://postgres@127.0.0.1:PORT/t_N?sslmode=disable, trust
// auth, superuser). The first call in a test binary starts a throwaway
// cluster (pgcluster: fsync off, on a free port of 127.0.0.1) that Main
// stops after the tests; every call creates its own database, dropped in
// tb.Cleanup, so tests are isolated and may run in parallel.
//
// It fails tb (never skips) if the package's TestMain does not run
// testenv.Main, or if PostgreSQL 15 is not installed.
func Postgres(tb testing.TB) string {
	tb.Helper()
	c := cluster(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, err := c.CreateDB(ctx, "t")
	if err != nil {
		tb.Fatalf("testenv: CreateDB = got error %v, want nil", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DropDB(ctx, name); err != nil {
			tb.Errorf("testenv: DropDB = got error %v, want nil", err)
		}
	})
	return c.URL(name)
}

// PostgresLog returns the path of the server log of the cluster that
// Postgres uses (starting it if need be): the postmaster's stderr, where
// every backend writes, each line prefixed with its time and backend pid
// ("%m [%p] "). The cluster and so its log are shared by all the tests of
// the binary: a test reads from the size the file had when it started.
func PostgresLog(tb testing.TB) string {
	tb.Helper()
	return cluster(tb).LogPath()
}

// cluster returns the running cluster, starting it on first use.
func cluster(tb testing.TB) *pgcluster.Cluster {
	tb.Helper()
	global.mu.Lock()
	defer global.mu.Unlock()
	if !global.main {
		tb.Fatalf("testenv: Postgres needs testenv.Main to stop the cluster after the tests: add\n\tfunc TestMain(m *testing.M) { testenv.Main(m) }\nto the package's tests")
	}
	if global.pg != nil {
		return global.pg
	}
	if global.pgErr != nil {
		tb.Fatalf("testenv: PostgreSQL did not start: %v", global.pgErr)
	}
	c, stop, err := startPostgres()
	if err != nil {
		global.pgErr = err
		tb.Fatalf("testenv: PostgreSQL did not start: %v", err)
	}
	global.pg = c
	global.stopper = append(global.stopper, stop)
	return c
}

// startPostgres starts a PostgreSQL 15 cluster and its watchdog. The
// returned function stops both and removes the cluster's directory.
func startPostgres() (_ *pgcluster.Cluster, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Config{BinDir: PostgresBin})
	if errors.Is(err, pgcluster.ErrNotInstalled) {
		return nil, nil, fmt.Errorf("PostgreSQL 15 (%s): %w: %s", PostgresBin, err, scriptHint)
	}
	if err != nil {
		return nil, nil, err
	}
	// The kernel kills the server with this process (Linux); the watchdog
	// also removes its directory. rm -rf is retried while the backends,
	// which outlive the postmaster briefly, still write there.
	stopWatchdog, err := watchdog(fmt.Sprintf("kill -KILL %d 2>/dev/null; for i in 1 2 3 4 5; do rm -rf %s && break; sleep 1; done",
		c.PID(), shellQuote(c.Dir())))
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	stop = func() {
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop PostgreSQL: %v\n", err)
		}
		stopWatchdog()
	}
	return c, stop, nil
}
