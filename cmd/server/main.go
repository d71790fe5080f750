// Command server runs the repool reputation pool server.
//
//	server [run] [flags]          serve (gRPC data plane, HTTP control plane)
//	server admin-token [flags]    print a control-plane bearer token
//	server haproxy ...            render haproxy.cfg; status/drain/ready/maint of a server
//	server keepalived render ...  render keepalived.conf for one LB host
//
// Run `server run -h` or `server admin-token -h` for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/lb"
	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/store/sqlite"
	"github.com/repool/repool/internal/token"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  server [run] [flags]         serve the data plane (gRPC) and the control plane (HTTP)
  server admin-token [flags]   print a control-plane bearer token signed with the store's key
  server haproxy render|status|drain|ready|maint ...   HAProxy config from the LB inventory; runtime control
  server keepalived render ...                          keepalived.conf for one LB host

Run "server run -h" or "server admin-token -h" for the flags.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 && (args[0] == "run" || args[0] == "admin-token" || args[0] == "haproxy" || args[0] == "keepalived" ||
		args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "haproxy", "keepalived":
		return lb.Command(ctx, append([]string{cmd}, args...), stdout, stderr)
	case "run":
		return serve(ctx, args, getenv, stdout, stderr)
	case "admin-token":
		return adminToken(ctx, args, getenv, stdout, stderr)
	}
	fmt.Fprint(stdout, usage)
	return nil
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("server run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg, err := server.Load(fs, args, getenv)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("log level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := ensureDir(cfg.Store); err != nil {
		return err
	}
	defer server.TuneRuntime(cfg, getenv)()
	s, err := server.New(ctx, cfg, server.Options{Log: log, Out: stdout})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "repool server: gRPC on %s, HTTP on %s (health /healthz, /readyz, /readyz/active; metrics /metrics; control plane /api/v1/)\n", s.GRPCAddr(), s.HTTPAddr())
	return s.Run(ctx)
}

// sqlitePath returns the file of a sqlite:PATH (or sqlite://PATH) store,
// as open.Store reads it.
func sqlitePath(url string) (string, bool) {
	path, ok := strings.CutPrefix(url, "sqlite:")
	if !ok {
		return "", false
	}
	if p, ok := strings.CutPrefix(path, "//"); ok {
		path = p
	}
	return path, true
}

// ensureDir creates the directory of a sqlite:PATH store.
func ensureDir(url string) error {
	path, ok := sqlitePath(url)
	if !ok || path == sqlite.Memory {
		return nil
	}
	return os.MkdirAll(filepath.Dir(path), 0o750)
}

// adminToken mints a control-plane token with the signing key of the
// server's store. It opens only a store that a server has created: a new
// store would hold a new key, and the server would refuse the token.
func adminToken(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("server admin-token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	role := fs.String("role", "", "token `role`: operator, tenant-admin, tenant-viewer or metrics (reads /metrics only)")
	tenant := fs.String("tenant", "", "`tenant` of a tenant-admin or tenant-viewer token")
	ttl := fs.Duration("ttl", time.Hour, "token lifetime")
	storeURL, err := server.LoadStore(fs, args, getenv)
	if err != nil {
		return err
	}
	// Opening a store creates it, and SigningKey creates a missing key.
	// A SQLite file tells whether the server has run; a PostgreSQL store
	// has no read-only way to tell.
	if path, ok := sqlitePath(storeURL); ok {
		if path == sqlite.Memory {
			return fmt.Errorf("store %s is private to one process; name the server's store", storeURL)
		}
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no store at %s; start the server first", path)
		} else if err != nil {
			return err
		}
	}
	st, err := open.Store(ctx, storeURL, store.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	key, err := st.SigningKey(ctx)
	if err != nil {
		return err
	}
	signer, err := token.NewSigner(key, nil)
	if err != nil {
		return err
	}
	tok, exp, err := control.MintToken(signer, *role, *tenant, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	fmt.Fprintf(stderr, "role %s, expires %s\n", *role, exp.Format(time.RFC3339))
	return nil
}
