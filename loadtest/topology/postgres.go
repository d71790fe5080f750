package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throwaway PostgreSQL cluster on a free port of 127.0.0.1,
// for the servers' HA mode: it runs as this package's child (as the
// postgres OS user when this process is root, since PostgreSQL refuses to
// run as root), with fsync off, in a temporary directory that Close
// removes. Safe for concurrent use.
type Postgres struct {
	dir  string
	port int
	proc *proc

	mu   sync.Mutex
	next int
}

// pgBinDirs are where Debian and others install the server binaries.
var pgBinDirs = []string{"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/14/bin", "/usr/pgsql/bin"}

// PostgresBinDir returns the directory with initdb and postgres, or "" if
// PostgreSQL is not installed.
func PostgresBinDir() string {
	for _, d := range pgBinDirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// StartPostgres runs initdb in a new temporary directory and starts the
// server. Call Close to stop it.
func StartPostgres(ctx context.Context) (_ *Postgres, err error) {
	bin := PostgresBinDir()
	if bin == "" {
		return nil, errors.New("postgres: PostgreSQL is not installed (apt-get install postgresql)")
	}
	dir, err := os.MkdirTemp("", "repool-loadtest-pg-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	cred, err := postgresCredential(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("postgres: initdb: %w\n%s", err, out)
	}
	pg := &Postgres{dir: dir}
	for attempt := 0; ; attempt++ {
		if pg.port, err = freePort(); err != nil {
			return nil, err
		}
		cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(pg.port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=300")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if pg.proc, err = start(ctx, "postgres", cmd, filepath.Join(dir, "postgres.log"), nil, 0); err != nil {
			return nil, err
		}
		if err = pg.waitReady(ctx, 30*time.Second); err == nil {
			return pg, nil
		}
		pg.proc.kill()
		if attempt == 2 {
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return nil, fmt.Errorf("postgres: not ready: %w\n%s", err, log)
		}
	}
}

// postgresCredential returns the postgres OS user's credential and gives
// it dir when this process is root; nil (run as this user) otherwise.
func postgresCredential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres: running as root needs the postgres OS user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (pg *Postgres) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, db)
}

func (pg *Postgres) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, pg.dsn("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		if !pg.proc.running() {
			return fmt.Errorf("postgres exited: %v", pg.proc.err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CreateDB creates a new, empty database and returns its URL.
func (pg *Postgres) CreateDB(ctx context.Context, prefix string) (string, error) {
	pg.mu.Lock()
	pg.next++
	name := fmt.Sprintf("%s_%d", prefix, pg.next)
	pg.mu.Unlock()
	conn, err := pgx.Connect(ctx, pg.dsn("postgres"))
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("postgres: CREATE DATABASE %s: %w", name, err)
	}
	return pg.dsn(name), nil
}

// Close stops the cluster (fast shutdown) and removes its directory.
func (pg *Postgres) Close() error {
	pg.proc.stop(syscall.SIGINT, 10*time.Second)
	return os.RemoveAll(pg.dir)
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}
