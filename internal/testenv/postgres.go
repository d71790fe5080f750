package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresBin is where Debian's postgresql-15 package installs the server
// binaries.
const PostgresBin = "/usr/lib/postgresql/15/bin"

// pgUser is the OS user the cluster runs as: PostgreSQL refuses to run as
// root.
const pgUser = "postgres"

// pgCluster is one running throwaway PostgreSQL cluster.
type pgCluster struct {
	dir  string // temp dir: data/, the socket and the log
	port int

	mu   sync.Mutex // serializes CREATE DATABASE and numbers databases
	next int
}

// adminDSN connects to the cluster's maintenance database.
func (c *pgCluster) adminDSN() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", pgUser, c.port)
}

// Postgres returns the URL of a new, empty database on a real PostgreSQL 15
// server (postgres://postgres@127.0.0.1:PORT/t_N?sslmode=disable, trust
// auth, superuser). The first call in a test binary starts a throwaway
// cluster (fsync off, on a free port of 127.0.0.1) that Main stops after
// the tests; every call creates its own database, dropped in tb.Cleanup, so
// tests are isolated and may run in parallel.
//
// It fails tb (never skips) if the package's TestMain does not run
// testenv.Main, or if PostgreSQL 15 is not installed.
func Postgres(tb testing.TB) string {
	tb.Helper()
	c := cluster(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	name := fmt.Sprintf("t_%d", c.next)
	if err := adminExec(ctx, c.adminDSN(), "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("testenv: CREATE DATABASE %s = got error %v, want nil", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, c.adminDSN(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("testenv: DROP DATABASE %s = got error %v, want nil", name, err)
		}
	})
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", pgUser, c.port, name)
}

func adminExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// cluster returns the running cluster, starting it on first use.
func cluster(tb testing.TB) *pgCluster {
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

// startPostgres runs initdb into a new temp dir and starts the server on a
// free port. The returned function stops it and removes the directory.
func startPostgres() (_ *pgCluster, stop func(), err error) {
	for _, bin := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(PostgresBin, bin)); err != nil {
			return nil, nil, fmt.Errorf("PostgreSQL 15 binary %s missing (%v): %s", bin, err, scriptHint)
		}
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return nil, nil, fmt.Errorf("runuser missing (%v): %s", err, scriptHint)
	}
	u, err := user.Lookup(pgUser)
	if err != nil {
		return nil, nil, fmt.Errorf("OS user %q missing (%v): %s", pgUser, err, scriptHint)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)

	dir, err := os.MkdirTemp("", "repool-pg-")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, nil, fmt.Errorf("chown %s to %s: %w", dir, pgUser, err)
	}
	data := filepath.Join(dir, "data")
	if out, err := asPostgres(dir, "initdb", "-D", data, "-U", pgUser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		return nil, nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}

	c := &pgCluster{dir: dir}
	logFile := filepath.Join(dir, "server.log")
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		c.port, err = freePort()
		if err != nil {
			return nil, nil, err
		}
		opts := strings.Join([]string{
			"-p", strconv.Itoa(c.port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "max_connections=300", "-c", "shared_buffers=256MB", "-c", "max_wal_size=4GB",
		}, " ")
		out, err := asPostgres(dir, "pg_ctl", "-D", data, "-l", logFile, "-w", "-t", "60", "-o", opts, "start")
		if err == nil {
			lastErr = nil
			break
		}
		log, _ := os.ReadFile(logFile)
		lastErr = fmt.Errorf("pg_ctl start on port %d: %w\n%s\n%s", c.port, err, out, log)
		if !strings.Contains(string(log), "could not bind") && !strings.Contains(string(log), "already in use") {
			break
		}
	}
	if lastErr != nil {
		return nil, nil, lastErr
	}

	pgCtl := filepath.Join(PostgresBin, "pg_ctl")
	stopWatchdog, err := watchdog(fmt.Sprintf("runuser -u %s -- %s -D %s stop -m immediate; rm -rf %s",
		pgUser, pgCtl, shellQuote(data), shellQuote(dir)))
	if err != nil {
		asPostgres(dir, "pg_ctl", "-D", data, "stop", "-m", "immediate")
		return nil, nil, err
	}
	stop = func() {
		if out, err := asPostgres(dir, "pg_ctl", "-D", data, "stop", "-m", "immediate"); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: pg_ctl stop: %v\n%s\n", err, out)
		}
		stopWatchdog()
		os.RemoveAll(dir)
	}
	return c, stop, nil
}

// asPostgres runs a PostgreSQL binary as the postgres OS user in dir and
// returns its combined output.
func asPostgres(dir, bin string, args ...string) ([]byte, error) {
	cmd := exec.Command("runuser", append([]string{"-u", pgUser, "--", filepath.Join(PostgresBin, bin)}, args...)...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// freePort is FreePort without a testing.TB.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}
