// Package pgcluster starts throwaway PostgreSQL clusters: initdb into a new
// temporary directory, one server on a free port of 127.0.0.1 tuned for
// speed over durability (fsync off, trust auth), databases on demand, and
// Close, which stops the server and removes the directory.
//
// It is the one implementation behind internal/testenv (tests) and
// loadtest/topology (the load-test runner), so it must not import
// "testing". PostgreSQL refuses to run as root: when this process is root,
// initdb and the server run as the postgres OS user; otherwise as this
// process's user.
//
// The server is a child of this process in its own process group (a Ctrl-C
// in the terminal reaches only this process, which stops the server), and
// on Linux the kernel kills it if this process dies first.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
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

// Superuser is the cluster's superuser, which every URL connects as.
const Superuser = "postgres"

const (
	startAttempts = 5                // free ports tried before giving up
	readyTimeout  = time.Minute      // for one server start
	stopTimeout   = 10 * time.Second // immediate shutdown, then SIGKILL
)

// ErrNotInstalled is returned by Start when initdb or postgres is missing.
var ErrNotInstalled = errors.New("PostgreSQL is not installed")

// errPortTaken is a start that failed because the port was taken between
// FreePort and the server's bind; Start retries on another port.
var errPortTaken = errors.New("port taken")

// binDirs are where Debian (newest first) and the PGDG RPMs install the
// server binaries.
var binDirs = []string{
	"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
	"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/14/bin",
	"/usr/pgsql/bin",
}

// BinDir returns the directory with the newest installed server binaries
// (PostgreSQL 17 down to 14, then postgres on PATH), or "" if PostgreSQL is
// not installed.
func BinDir() string {
	for _, d := range binDirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// InitdbArgs are initdb's arguments for a throwaway cluster in data:
// superuser postgres, trust auth, UTF8 in the C locale, no fsync.
func InitdbArgs(data string) []string {
	return []string{"-D", data, "-U", Superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"}
}

// ServerArgs are the postgres server's arguments for a throwaway cluster in
// data listening on addr:port, with its Unix socket in socketDir: no
// durability (fsync, synchronous_commit and full_page_writes off) and room
// for load (300 connections, 256MB shared buffers, 4GB of WAL between
// checkpoints). A later "-c name=value" overrides a setting.
func ServerArgs(data, addr string, port int, socketDir string) []string {
	return []string{"-D", data,
		"-c", "listen_addresses=" + addr, "-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + socketDir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=256MB", "-c", "max_wal_size=4GB",
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago: it
// listens on port 0, takes the port the kernel chose and closes the
// listener. Another process may take the port before the caller does, so
// callers retry on "address in use" (Start does).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// FreePorts returns n distinct free ports on loopback: each listener stays
// open until all n are taken. n calls of FreePort can return one port
// twice (a port released can be handed out again at once): a load-test
// run once got its control port equal to its gRPC port.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Config says how to start a cluster. The zero value is ready to use.
type Config struct {
	// BinDir holds initdb and postgres. "" means BinDir(): the newest
	// installed version.
	BinDir string
	// DirPrefix starts the name of the temporary directory (data, socket,
	// log), which tells leftovers apart. "" means "repool-pg-".
	DirPrefix string
}

func (c *Config) applyDefaults() {
	if c.BinDir == "" {
		c.BinDir = BinDir()
	}
	if c.DirPrefix == "" {
		c.DirPrefix = "repool-pg-"
	}
}

// Cluster is one running throwaway cluster. Its methods are safe for
// concurrent use; Close must come last.
type Cluster struct {
	dir  string // temporary directory: data/, the socket and postgres.log
	port int
	srv  *server

	mu   sync.Mutex // serializes CREATE DATABASE and numbers databases
	next int
}

// Start runs initdb in a new temporary directory and starts the server on
// a free port of 127.0.0.1, retrying other ports if the chosen one is taken
// before the server binds it, and returns once the server accepts
// connections. ctx bounds the start, not the server's life: call Close to
// stop it. Errors: ErrNotInstalled (wrapped) if the binaries are missing;
// otherwise what failed, with initdb's output or the server's log.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	cfg.applyDefaults()
	if cfg.BinDir == "" {
		return nil, ErrNotInstalled
	}
	for _, bin := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, bin)); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotInstalled, err)
		}
	}
	dir, err := os.MkdirTemp("", cfg.DirPrefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	cred, err := credential(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "initdb"), InitdbArgs(data)...)
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}

	c := &Cluster{dir: dir}
	for attempt := 1; ; attempt++ {
		err = c.start(ctx, cfg.BinDir, data, cred)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			return nil, err
		}
	}
}

// credential returns the postgres OS user's credential and gives it dir
// when this process is root; nil (run as this process's user) otherwise.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres OS user (PostgreSQL refuses to run as root): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, fmt.Errorf("chown %s to postgres: %w", dir, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// start starts the server on a free port and waits until it accepts
// connections. A failure because the port was taken wraps errPortTaken.
func (c *Cluster) start(ctx context.Context, bin, data string, cred *syscall.Credential) error {
	port, err := FreePort()
	if err != nil {
		return err
	}
	logPath := c.LogPath()
	logf, err := os.Create(logPath) // truncated: the log of this attempt only
	if err != nil {
		return err
	}
	defer logf.Close() // the server holds its own descriptor
	cmd := exec.Command(filepath.Join(bin, "postgres"), ServerArgs(data, "127.0.0.1", port, c.dir)...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.port, c.srv = port, newServer(cmd)
	if err := c.waitReady(ctx); err != nil {
		c.srv.kill()
		log, _ := os.ReadFile(logPath)
		if bytes.Contains(log, []byte("could not bind")) || bytes.Contains(log, []byte("already in use")) {
			err = fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return fmt.Errorf("postgres on port %d: %w\n%s", port, err, log)
	}
	return nil
}

// waitReady polls until the server accepts a connection, exits, or
// readyTimeout or ctx ends. The polls and the bound are on real time, not
// an injected clock: they wait on another process, which no fake moves.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, c.URL("postgres"))
		ccancel()
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-c.srv.done:
			return fmt.Errorf("exited: %v", c.srv.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last attempt: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL returns the URL of database db, connecting as Superuser over TCP:
// postgres://postgres@127.0.0.1:PORT/DB?sslmode=disable.
func (c *Cluster) URL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Dir returns the cluster's temporary directory (data, Unix socket and
// log), which Close removes.
func (c *Cluster) Dir() string { return c.dir }

// LogPath returns the server's log: its stderr and stdout, with the
// default log_line_prefix ("%m [%p] ": time and backend pid).
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, "postgres.log") }

// PID returns the server's (postmaster's) process ID, for a watchdog that
// outlives this process.
func (c *Cluster) PID() int { return c.srv.cmd.Process.Pid }

// CreateDB creates a new, empty database named prefix_N (N counts this
// cluster's databases) and returns its name; URL gives its URL. Calls are
// serialized.
func (c *Cluster) CreateDB(ctx context.Context, prefix string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	name := fmt.Sprintf("%s_%d", prefix, c.next)
	if err := c.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("CREATE DATABASE %s: %w", name, err)
	}
	return name, nil
}

// DropDB drops database name if it exists, closing its sessions.
func (c *Cluster) DropDB(ctx context.Context, name string) error {
	if err := c.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("DROP DATABASE %s: %w", name, err)
	}
	return nil
}

// admin runs sql on a new connection to the maintenance database.
func (c *Cluster) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// Close stops the server (immediate shutdown, then SIGKILL after
// stopTimeout: the data is thrown away) and removes the directory. It is
// idempotent.
func (c *Cluster) Close() error {
	c.srv.stop()
	return os.RemoveAll(c.dir)
}

// server is the running postmaster.
type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, set before done closes
}

func newServer(cmd *exec.Cmd) *server {
	s := &server{cmd: cmd, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	return s
}

// stop asks for an immediate shutdown (SIGQUIT) and waits up to
// stopTimeout for the exit, then kills. The grace is real time: it is
// another process's.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.kill()
	}
}

// kill sends SIGKILL and waits for the exit. The backends notice the
// postmaster's death and exit on their own.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}
