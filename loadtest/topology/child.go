package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/servercmd"
	"github.com/repool/repool/internal/sidecar"
	"github.com/repool/repool/internal/sidecar/config"
	"github.com/repool/repool/internal/store"
)

// The runner starts servers and the sidecar as child processes of its own
// executable (so a server can be killed for real, and the load generator
// does not share a heap with what it measures): the child finds its role
// and configuration in these variables.
const (
	envRole   = "REPOOL_LOADTEST_CHILD"
	envConfig = "REPOOL_LOADTEST_CHILD_CONFIG"

	roleServer  = "server"
	roleSidecar = "sidecar"
	// roleServerCmd runs a command of the server's executable (the
	// arguments of "server ..."), such as "haproxy sync-placements".
	roleServerCmd = "servercmd"
)

// serverChild configures a server child.
type serverChild struct {
	Store    string `json:"store"`
	GRPCAddr string `json:"grpc_addr"`
	HTTPAddr string `json:"http_addr"`
	HA       bool   `json:"ha"`
	Name     string `json:"name"`
	// Group is the server's group (--group); empty: the default group.
	Group string `json:"group,omitempty"`
	// TokenTTL is the lifetime of the tokens it issues (--token-ttl);
	// zero: the server's default.
	TokenTTL time.Duration `json:"token_ttl,omitempty"`
}

// serverHello is a server child's ready line.
type serverHello struct {
	GRPC string `json:"grpc"`
	HTTP string `json:"http"`
	// Key is the demo API key, printed only by the server that created
	// the store.
	Key string `json:"key,omitempty"`
	// OpToken is the operator token, printed with Key.
	OpToken string `json:"op_token,omitempty"`
}

// sidecarChild configures a sidecar child.
type sidecarChild struct {
	Config string `json:"config"`
}

// sidecarHello is a sidecar child's ready line.
type sidecarHello struct {
	Addr string `json:"addr"`
}

// RunChild runs this process as a server or sidecar child when the runner
// started it as one, and returns true and the exit code; it returns false
// at once otherwise. Call it first thing in main and in TestMain of a
// package whose tests start a Topology:
//
//	if child, code := topology.RunChild(); child {
//		os.Exit(code)
//	}
func RunChild() (child bool, code int) {
	role := os.Getenv(envRole)
	if role == "" {
		return false, 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch role {
	case roleServer:
		err = runServer(ctx, os.Getenv(envConfig), os.Stdout, os.Stderr)
	case roleSidecar:
		err = runSidecar(ctx, os.Getenv(envConfig), os.Stdout, os.Stderr)
	case roleServerCmd:
		err = runServerCmd(ctx, os.Getenv(envConfig), os.Stdout, os.Stderr)
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadtest %s child: %v\n", role, err)
		return true, 1
	}
	return true, 0
}

var (
	demoKey = regexp.MustCompile(`demo API key:\s+(\S+)`)
	opToken = regexp.MustCompile(`operator token:\s+(\S+)`)
)

func runServer(ctx context.Context, raw string, stdout, stderr io.Writer) error {
	var c serverChild
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	group := c.Group
	if group == "" {
		group = store.DefaultGroup
	}
	var banner bytes.Buffer
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := server.New(ctx, server.Config{
		Store: c.Store, GRPCAddr: c.GRPCAddr, HTTPAddr: c.HTTPAddr, HA: c.HA, HAName: c.Name, Group: group,
		// The load test measures failure handling, not the tenant's
		// request limit: lift it far above any scenario's rate.
		Limits:        limits.Values{}.With(limits.RatePerSecond, 1e6).With(limits.Burst, 1_000_000),
		ShutdownGrace: 2 * time.Second, TokenTTL: c.TokenTTL,
	}, server.Options{Out: &banner, Log: log})
	if err != nil {
		return err
	}
	hello := serverHello{GRPC: s.GRPCAddr(), HTTP: s.HTTPAddr()}
	if m := demoKey.FindStringSubmatch(banner.String()); m != nil {
		hello.Key = m[1]
	}
	if m := opToken.FindStringSubmatch(banner.String()); m != nil {
		hello.OpToken = m[1]
	}
	if err := json.NewEncoder(stdout).Encode(hello); err != nil {
		return err
	}
	return s.Run(ctx)
}

func runSidecar(ctx context.Context, raw string, stdout, stderr io.Writer) error {
	var c sidecarChild
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	cfg, err := config.Load(c.Config, func(string) string { return "" })
	if err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.Level()}))
	s, err := sidecar.New(cfg, sidecar.Options{Log: log})
	if err != nil {
		return err
	}
	if err := json.NewEncoder(stdout).Encode(sidecarHello{Addr: s.Addr()}); err != nil {
		s.Close()
		return err
	}
	return s.Run(ctx)
}

// serverCmdChild configures a servercmd child: the arguments of "server".
type serverCmdChild struct {
	Args []string `json:"args"`
}

// runServerCmd runs one command of the server's executable, the same code
// cmd/server runs.
func runServerCmd(ctx context.Context, raw string, stdout, stderr io.Writer) error {
	var c serverCmdChild
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return servercmd.Run(ctx, c.Args, servercmd.Env{Getenv: func(string) string { return "" }, Stdout: stdout, Stderr: stderr})
}

// childCmd returns the command that starts this executable as a child.
func childCmd(role string, cfg any) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable to start a %s: %w", role, err)
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// -test.run=^$ keeps a test binary whose TestMain forgot RunChild from
	// running its tests again in the child (RunChild returns before flags
	// are parsed, so a runner ignores it).
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envConfig+"="+string(raw))
	return cmd, nil
}

// errNoChild says that RunChild is not wired into the executable.
var errNoChild = errors.New("the executable does not call topology.RunChild")
