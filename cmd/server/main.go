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
	"syscall"
	"time"

	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/lb"
	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/token"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 && (args[0] == "run" || args[0] == "admin-token" || args[0] == "haproxy" || args[0] == "keepalived" ||
		args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "haproxy", "keepalived":
		return lb.Command(ctx, append([]string{cmd}, args...), stdout, stderr)
	case "run":
		return serve(ctx, args, stdout, stderr)
	case "admin-token":
		return adminToken(ctx, args, stdout, stderr)
	}
	fmt.Fprint(stdout, usage)
	return nil
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("server run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	level := fs.String("log-level", "info", "log level: debug, info, warn, error (env REPOOL_LOG_LEVEL)")
	cfg, err := server.Load(fs, args, os.Getenv)
	if err != nil {
		return err
	}
	if v := os.Getenv("REPOOL_LOG_LEVEL"); v != "" && !flagSet(fs, "log-level") {
		*level = v
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv}))
	if err := ensureDir(cfg.Store); err != nil {
		return err
	}
	defer server.TuneRuntime(cfg, os.Getenv)()
	s, err := server.New(ctx, cfg, server.Options{Log: log, Out: stdout})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "repool server: gRPC on %s, HTTP on %s (health /healthz, /readyz, /readyz/active; metrics /metrics; control plane /api/v1/)\n", s.GRPCAddr(), s.HTTPAddr())
	return s.Run(ctx)
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// ensureDir creates the directory of a sqlite:PATH store.
func ensureDir(url string) error {
	const prefix = "sqlite:"
	if len(url) <= len(prefix) || url[:len(prefix)] != prefix {
		return nil
	}
	path := url[len(prefix):]
	for i := len(path) - 1; i > 0; i-- {
		if path[i] == '/' {
			return os.MkdirAll(path[:i], 0o750)
		}
	}
	return nil
}

func adminToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("server admin-token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeURL := fs.String("store", envOr("REPOOL_STORE", "sqlite:./data/repool.db"), "store holding the signing key (env REPOOL_STORE)")
	role := fs.String("role", "", "operator, tenant-admin or tenant-viewer")
	tenant := fs.String("tenant", "", "tenant of a tenant-admin or tenant-viewer token")
	ttl := fs.Duration("ttl", time.Hour, "token lifetime")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := ensureDir(*storeURL); err != nil {
		return err
	}
	st, err := open.Store(ctx, *storeURL, store.Options{})
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

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
