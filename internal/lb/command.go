// Package lb is the command-line front of repool's HAProxy + Keepalived
// front end (docs/ha.md): it renders haproxy.cfg and keepalived.conf from
// the LB inventory (packages inventory, haproxy, keepalived), drives a
// running HAProxy's servers through its runtime API, and keeps its tenant
// map equal to the store's placements (package tenantmap).
//
// cmd/server wires Runner.Command in as "server ...", with the store's
// placement source.
package lb

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/repool/repool/internal/cli"
	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/lb/keepalived"
	"github.com/repool/repool/internal/lb/tenantmap"
)

// Prog is how the usage texts name the command.
const Prog = "server"

const usage = `usage:
  ` + Prog + ` haproxy render --inventory FILE [--host NAME] [--out FILE] [--pid-file FILE]
  ` + Prog + ` keepalived render --inventory FILE --host NAME [--out FILE]
  ` + Prog + ` keepalived check --url URL [--for D] [--every D] [--timeout D]
  ` + Prog + ` haproxy status --socket PATH
  ` + Prog + ` haproxy drain|ready|maint NAME --socket PATH [--force]
  ` + Prog + ` haproxy sync-placements --inventory FILE --host NAME --store DSN [--interval D] [--once | --file-only]

Render the HAProxy and Keepalived configurations of repool's front end from
the LB inventory (see haproxy/inventory.yaml); drain, ready or maint a
server of its group's backend through HAProxy's runtime API (stats socket);
and keep HAProxy's tenant map (tenant -> group backend) equal to the
store's placements. "keepalived check" is the track script the rendered
keepalived.conf runs: it asks HAProxy's monitor every --every for --for
and fails (exit status 1) at the first bad answer.

Run "` + Prog + ` haproxy render -h" (etc.) for each command's flags.
`

// dialTimeout bounds connecting to the stats socket.
const dialTimeout = 10 * time.Second

// commands are each tool's commands.
var commands = map[string][]string{
	"haproxy":    {"render", "status", "drain", "ready", "maint", "sync-placements"},
	"keepalived": {"render", "check"},
}

// PlacementOpener opens the placement source that "haproxy
// sync-placements" polls, from its --store flag (the store's DSN, as the
// server's --store takes it). close releases the source.
type PlacementOpener func(ctx context.Context, store string) (src tenantmap.Source, close func() error, err error)

// Runner runs the lb commands with what they need from outside this
// package. The zero value runs every command but "haproxy
// sync-placements", which needs OpenPlacements.
type Runner struct {
	// OpenPlacements opens the store's placements for "haproxy
	// sync-placements".
	OpenPlacements PlacementOpener
}

// Command is Runner{}.Command: every command but "haproxy
// sync-placements".
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return Runner{}.Command(ctx, args, stdout, stderr)
}

// Command runs one lb command. args are the arguments after "lb" (for
// "server haproxy status --socket S", args is [haproxy status --socket
// S]). Output goes to stdout, flag errors and usage to stderr. With no
// arguments or "help" it prints the usage to stdout and returns nil; with -h
// or --help on a tool or a command it prints that usage or that command's
// flags to stdout and returns flag.ErrHelp.
//
// A render writes nothing on error; with --out it replaces the file
// atomically. Errors wrap inventory.ErrInvalid (bad inventory),
// haproxy.ErrLastUp, haproxy.ErrUnknownServer or haproxy.ErrRuntime where
// they apply.
func (r Runner) Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || cli.IsHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	tool := args[0]
	cmds, ok := commands[tool]
	switch {
	case !ok:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q: want haproxy or keepalived", strings.Join(args[:min(2, len(args))], " "))
	case len(args) < 2:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%s: missing command: want %s", tool, strings.Join(cmds, ", "))
	case args[1] == "help":
		fmt.Fprint(stdout, usage)
		return nil
	case cli.IsHelp(args[1]):
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	}
	env := env{stdout, stderr}
	switch cmd, rest := args[1], args[2:]; {
	case tool == "haproxy" && cmd == "render":
		return renderHAProxy(ctx, rest, env)
	case tool == "keepalived" && cmd == "render":
		return renderKeepalived(rest, env)
	case tool == "keepalived" && cmd == "check":
		return checkHAProxy(ctx, rest, env)
	case tool == "haproxy" && cmd == "status":
		return status(ctx, rest, env)
	case tool == "haproxy" && (cmd == "drain" || cmd == "ready" || cmd == "maint"):
		return setState(ctx, haproxy.AdminState(cmd), rest, env)
	case tool == "haproxy" && cmd == "sync-placements":
		return r.syncPlacements(ctx, rest, env)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q: %s commands are %s", tool+" "+args[1], tool, strings.Join(cmds, ", "))
}

// env is where a command writes.
type env struct{ stdout, stderr io.Writer }

func newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = cli.Usage(fs, "usage: "+Prog+" "+synopsis+"\n")
	return fs
}

// parse parses flags that may come before and after the positional
// arguments, and returns the positional ones. -h prints the command's
// flags to stdout (flag.ErrHelp); a bad flag prints them to stderr.
func parse(fs *flag.FlagSet, args []string, e env) ([]string, error) {
	var pos []string
	err := cli.Parse(fs, e.stdout, e.stderr, func() error {
		for {
			if err := fs.Parse(args); err != nil {
				return err
			}
			if fs.NArg() == 0 {
				return nil
			}
			pos = append(pos, fs.Arg(0))
			args = fs.Args()[1:]
		}
	})
	return pos, err
}

func renderHAProxy(ctx context.Context, args []string, e env) error {
	fs := newFlags("haproxy render", "haproxy render --inventory FILE [--host NAME] [--out FILE] [--pid-file FILE]")
	inv := fs.String("inventory", "", "LB inventory file (required)")
	host := fs.String("host", "", "render for this LB host (its stats socket; monitor frontend on its address);\nempty: one file for all hosts, which must share stats_socket and monitor_port")
	out := fs.String("out", "", "write here (atomically) instead of stdout")
	pid := fs.String("pid-file", "", "HAProxy pid file (global pidfile); empty writes none, as Debian's unit passes -p /run/haproxy.pid")
	bin := fs.String("haproxy", haproxy.DefaultBinary, "haproxy binary client-native runs (haproxy -v, haproxy -c)")
	if err := noArgs(fs, args, e); err != nil {
		return err
	}
	i, err := loadInventory(*inv)
	if err != nil {
		return err
	}
	cfg, err := haproxy.Render(ctx, i, haproxy.Options{Host: *host, PIDFile: *pid, Binary: *bin})
	if err != nil {
		return err
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		if w := descriptorWarning(i, lim.Max); w != "" {
			fmt.Fprintln(e.stderr, w)
		}
	}
	return write(*out, cfg, 0o644, e.stdout)
}

// descriptorWarning says, when HAProxy with inv's maxconn would need more
// file descriptors than hard (this process's hard limit, which a HAProxy
// started from the same shell or container shares), what to change;
// "" when it fits.
func descriptorWarning(inv *inventory.Inventory, hard uint64) string {
	need := haproxy.Descriptors(inv)
	if need <= hard {
		return ""
	}
	return fmt.Sprintf("warning: haproxy.maxconn %d needs about %d file descriptors and the hard limit here is %d (ulimit -Hn): "+
		"a HAProxy started under this limit refuses to start (\"Cannot raise FD limit\"); lower haproxy.maxconn to %d or less, "+
		"or raise the limit (systemd: LimitNOFILE=%d in a drop-in for haproxy.service)",
		inv.HAProxy.MaxConn, need, hard, (hard-100)/2, need)
}

func renderKeepalived(args []string, e env) error {
	fs := newFlags("keepalived render", "keepalived render --inventory FILE --host NAME [--out FILE]")
	inv := fs.String("inventory", "", "LB inventory file (required)")
	host := fs.String("host", "", "LB host to render for (required)")
	out := fs.String("out", "", "write here (atomically, mode 0600: it holds the VRRP password) instead of stdout")
	if err := noArgs(fs, args, e); err != nil {
		return err
	}
	if *host == "" {
		return errors.New("keepalived render: --host is required")
	}
	i, err := loadInventory(*inv)
	if err != nil {
		return err
	}
	conf, err := keepalived.Render(i, *host)
	if err != nil {
		return err
	}
	return write(*out, conf, 0o600, e.stdout)
}

// checkHAProxy is keepalived's track script: keepalived.Check.
func checkHAProxy(ctx context.Context, args []string, e env) error {
	fs := newFlags("keepalived check", "keepalived check --url URL [--for D] [--every D] [--timeout D]")
	url := fs.String("url", "", "HAProxy's monitor on this host, http://ADDR:PORT/lb-health (required)")
	forD := fs.Duration("for", time.Second-200*time.Millisecond, "keep checking this long, then exit 0: the track interval less a margin")
	every := fs.Duration("every", keepalived.CheckEvery, "time between two checks")
	timeout := fs.Duration("timeout", keepalived.CheckTimeout, "how long one answer may take")
	if err := noArgs(fs, args, e); err != nil {
		return err
	}
	switch {
	case *url == "":
		return errors.New("keepalived check: --url is required")
	case *forD < 0:
		return fmt.Errorf("keepalived check: --for %v is negative", *forD)
	case *every <= 0:
		return fmt.Errorf("keepalived check: --every %v is not positive", *every)
	case *timeout <= 0:
		return fmt.Errorf("keepalived check: --timeout %v is not positive", *timeout)
	}
	return keepalived.Check{URL: *url, For: *forD, Every: *every, Timeout: *timeout}.Run(ctx)
}

func status(ctx context.Context, args []string, e env) error {
	fs := newFlags("haproxy status", "haproxy status --socket PATH")
	socket := fs.String("socket", inventory.DefaultStatsSocket, "HAProxy stats socket (admin level)")
	if err := noArgs(fs, args, e); err != nil {
		return err
	}
	rt, err := dial(ctx, *socket)
	if err != nil {
		return err
	}
	defer rt.Close()
	servers, err := rt.Servers()
	if err != nil {
		return err
	}
	// The GROUP column only when there is more than one group.
	groups := false
	for _, s := range servers {
		groups = groups || s.Group != inventory.DefaultGroup
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if groups {
		fmt.Fprint(tw, "GROUP\t")
	}
	fmt.Fprintln(tw, "SERVER\tADDRESS\tSTATE\tADMIN\tCHECK\tWEIGHT\tHAPROXY STATUS")
	for _, s := range servers {
		check := s.CheckStatus
		if s.CheckCode != 0 {
			check += fmt.Sprintf("/%d", s.CheckCode)
		}
		if groups {
			fmt.Fprintf(tw, "%s\t", s.Group)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Name, s.Addr, s.Status, s.Admin, check, s.Weight, s.Raw)
	}
	return tw.Flush()
}

func setState(ctx context.Context, state haproxy.AdminState, args []string, e env) error {
	synopsis := fmt.Sprintf("haproxy %s NAME --socket PATH", state)
	if state != haproxy.Ready {
		synopsis += " [--force]"
	}
	fs := newFlags("haproxy "+string(state), synopsis)
	socket := fs.String("socket", inventory.DefaultStatsSocket, "HAProxy stats socket (admin level)")
	force := fs.Bool("force", false, "also take out the last UP server of its group (leaves the group's tenants without an active server)")
	pos, err := parse(fs, args, e)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("haproxy %s: want exactly one server NAME, got %d arguments", state, len(pos))
	}
	rt, err := dial(ctx, *socket)
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := rt.SetState(pos[0], state, *force); err != nil {
		if errors.Is(err, haproxy.ErrLastUp) {
			return fmt.Errorf("%w; --force does it anyway, leaving the VIP without an active server", err)
		}
		return err
	}
	backend := haproxy.Backend
	if servers, err := rt.Servers(); err == nil {
		for _, s := range servers {
			if s.Name == pos[0] {
				backend = haproxy.BackendFor(s.Group)
			}
		}
	}
	fmt.Fprintf(e.stdout, "%s/%s: %s\n", backend, pos[0], state)
	return nil
}

func (r Runner) syncPlacements(ctx context.Context, args []string, e env) error {
	fs := newFlags("haproxy sync-placements", "haproxy sync-placements --inventory FILE --host NAME --store DSN [--interval D] [--once | --file-only]")
	inv := fs.String("inventory", "", "LB inventory file (required): the tenant map file (haproxy.tenant_map) and the groups")
	host := fs.String("host", "", "LB host this runs on (required): its HAProxy's stats socket")
	store := fs.String("store", "", "the store's DSN, as the servers' --store (required): where the placements are read")
	interval := fs.Duration("interval", tenantmap.DefaultInterval, "time between two polls of the placements")
	once := fs.Bool("once", false, "sync once (map file, then HAProxy) and exit; exit status 1 if it failed")
	fileOnly := fs.Bool("file-only", false, "write the map file from the placements and exit, without HAProxy (before HAProxy first starts)")
	if err := noArgs(fs, args, e); err != nil {
		return err
	}
	switch {
	case *host == "":
		return errors.New("haproxy sync-placements: --host is required")
	case *store == "":
		return errors.New("haproxy sync-placements: --store is required")
	case *interval <= 0:
		return fmt.Errorf("haproxy sync-placements: --interval %v is not positive", *interval)
	case *once && *fileOnly:
		return errors.New("haproxy sync-placements: --once and --file-only exclude each other")
	}
	i, err := loadInventory(*inv)
	if err != nil {
		return err
	}
	h, err := i.Host(*host)
	if err != nil {
		return err
	}
	if r.OpenPlacements == nil {
		return errors.New("haproxy sync-placements: this build has no placement source (lb.Runner.OpenPlacements is not set)")
	}
	src, closeSrc, err := r.OpenPlacements(ctx, *store)
	if err != nil {
		return fmt.Errorf("haproxy sync-placements: %w", err)
	}
	defer closeSrc()
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	s, err := tenantmap.New(tenantmap.Config{
		Source: src, Socket: h.StatsSocket, File: i.HAProxy.TenantMap, Groups: i.Groups(), Interval: *interval, Log: log,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	switch {
	case *fileOnly:
		return s.SyncFile(ctx)
	case *once:
		return s.Sync(ctx)
	}
	log.Info("syncing the tenant map", "file", i.HAProxy.TenantMap, "socket", h.StatsSocket, "interval", *interval)
	s.Run(ctx)
	return nil
}

func noArgs(fs *flag.FlagSet, args []string, e env) error {
	pos, err := parse(fs, args, e)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), pos)
	}
	return nil
}

func loadInventory(path string) (*inventory.Inventory, error) {
	if path == "" {
		return nil, errors.New("--inventory is required")
	}
	return inventory.Load(path)
}

func dial(ctx context.Context, socket string) (*haproxy.Runtime, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	return haproxy.Dial(ctx, socket)
}

// write writes data to path atomically (a temporary file in the same
// directory, renamed over it), or to stdout if path is empty.
func write(path string, data []byte, mode os.FileMode, stdout io.Writer) error {
	if path == "" {
		_, err := stdout.Write(data)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
