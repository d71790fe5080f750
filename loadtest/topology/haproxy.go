package topology

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/repool/repool/internal/clock"
	lbhaproxy "github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/pgcluster"
)

// haproxy is one HAProxy of the topology (a provider's, or the groups'):
// the production configuration, rendered by internal/lb/haproxy from an LB
// inventory the topology writes (see lbInventory), run on loopback.
type haproxy struct {
	addr    string // the gRPC frontend (the inventory's VIP), host:port
	sock    string // stats socket
	sockDir string // a short directory for it: socket paths are limited to ~100 bytes
	// inventory is the path of the LB inventory it was rendered from.
	inventory string
	// backends are the backends whose servers states reports: one per
	// group (lbhaproxy.BackendFor), not the control plane's.
	backends []string
	proc     *proc
}

// lbServer is a repool server behind the topology's HAProxy: an entry of
// the LB inventory's servers.
type lbServer struct {
	Name string // its HAProxy server name (the node's name)
	GRPC string // where gRPC goes: the server or its brownout proxy, 127.0.0.1:PORT
	HTTP int    // the server's HTTP port: health check and agent
	// Group is its group (--group); empty is the default group.
	Group string
}

// lbFront is what the topology chooses for one HAProxy besides its
// servers: the ports and paths of an LB host on loopback.
type lbFront struct {
	Name    string // what the HAProxy is for: a provider, or "groups"
	Sock    string // lb1's stats socket
	GRPC    int    // the VIP's gRPC port (on lbVIP)
	Control int    // the VIP's control-plane port (on lbVIP)
	Monitor int    // lb1's monitor port (on lb1's address, 127.0.0.2)
	// TenantMap is the tenant map file; read only with more than one group.
	TenantMap string
	// User and Group run HAProxy: this process's own.
	User, Group string
}

// Loopback values of the topology's LB inventory. Everything the inventory
// leaves out has the shipped default (internal/lb/inventory), and the
// render is the production one (internal/lb/haproxy.Render, as "server
// haproxy render --host lb1" does); docs/loadtest.md lists these
// overrides and the figures they touch.
const (
	// lbHost is the LB host the configuration is rendered for: its stats
	// socket and its monitor frontend. lb2 only completes the VRRP pair
	// an inventory needs: no Keepalived runs.
	lbHost = "lb1"
	// lbVIP is the "VIP": loopback, where the sidecar's toxiproxy
	// reaches HAProxy. lb1 and lb2 take the next loopback addresses (an
	// inventory's addresses differ); only lb1's carries a listener, the
	// monitor frontend.
	lbVIP = "127.0.0.1"
	// lbMaxConn is HAProxy's global maxconn (the gRPC frontend's follows
	// it): the shipped 20,000 makes HAProxy raise its descriptor limit to
	// 40,100, above what a test machine's hard limit may allow; a run holds
	// a handful of connections through HAProxy.
	lbMaxConn = 4000
)

// lbInventory returns the YAML LB inventory of one loopback HAProxy in
// front of servers. It has no tls section: the topology's servers, the
// sidecar and the naive client speak plaintext (h2c), as an inventory
// without tls renders it (the shipped example has TLS).
func lbInventory(f lbFront, servers []lbServer) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# LB inventory of the load test's HAProxy for %s, written by loadtest/topology:\n", f.Name)
	fmt.Fprintf(&b, "# rendered like production (internal/lb/haproxy, as `server haproxy render --host %s`),\n", lbHost)
	fmt.Fprintf(&b, "# with the shipped checks and timeouts (left out: defaults). Loopback overrides\n")
	fmt.Fprintf(&b, "# (docs/loadtest.md): the VIP and LB hosts on loopback, no Keepalived (lb2 only completes\n")
	fmt.Fprintf(&b, "# the pair), the stats socket and ports, HAProxy as this user, maxconn %d, no tls (h2c).\n", lbMaxConn)
	fmt.Fprintf(&b, "vip: {address: %s/8, interface: lo, router_id: 1, grpc_port: %d, control_port: %d}\n", lbVIP, f.GRPC, f.Control)
	fmt.Fprintf(&b, "lb_hosts:\n")
	fmt.Fprintf(&b, "  - {name: %s, address: 127.0.0.2, priority: 250, state: BACKUP, stats_socket: %s, monitor_port: %d}\n", lbHost, f.Sock, f.Monitor)
	fmt.Fprintf(&b, "  - {name: lb2, address: 127.0.0.3, priority: 200, state: BACKUP}\n")
	fmt.Fprintf(&b, "servers:\n")
	for _, s := range servers {
		host, grpcPort, err := net.SplitHostPort(s.GRPC)
		if err != nil {
			return "", fmt.Errorf("server %s: %w", s.Name, err)
		}
		group := s.Group
		if group == "" {
			group = inventory.DefaultGroup
		}
		fmt.Fprintf(&b, "  - {name: %s, address: %s, grpc_port: %s, http_port: %d, group: %s}\n", s.Name, host, grpcPort, s.HTTP, group)
	}
	fmt.Fprintf(&b, "haproxy: {user: %s, group: %s, maxconn: %d, tenant_map: %s}\n", f.User, f.Group, lbMaxConn, f.TenantMap)
	return b.String(), nil
}

// renderHAProxy renders the configuration of the LB inventory at invPath
// for lbHost, with the production renderer.
func renderHAProxy(ctx context.Context, invPath string) (string, error) {
	inv, err := inventory.Load(invPath)
	if err != nil {
		return "", err
	}
	cfg, err := lbhaproxy.Render(ctx, inv, lbhaproxy.Options{Host: lbHost, Binary: haproxyBin()})
	return string(cfg), err
}

// currentUser returns the names of this process's user and group: HAProxy
// drops to them after it starts, so it stays the runner's.
func currentUser() (string, string, error) {
	u, err := user.Current()
	if err != nil {
		return "", "", err
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return "", "", err
	}
	return u.Username, g.Name, nil
}

// haproxyBin is the HAProxy binary: on PATH, else Debian's path.
func haproxyBin() string {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	return lbhaproxy.DefaultBinary
}

// startHAProxy starts the HAProxy of one provider (launchHAProxy).
func startHAProxy(ctx context.Context, clk clock.Clock, dir, provider string, servers []lbServer, wantUp int, event func(string)) (*haproxy, error) {
	return launchHAProxy(ctx, clk, dir, provider, servers, "", nil, wantUp, event)
}

// launchHAProxy writes the LB inventory of an HAProxy for name in front of
// servers into dir (as inventory-NAME.yaml, with free ports, a stats socket
// in a short temporary directory and tenantMap, or dir/repool-tenants.map
// when empty), calls beforeStart with its path (when set), renders it into
// haproxy-NAME.cfg, validates that with haproxy -c, starts haproxy -db and
// waits until wantUp servers are UP and the others NOLB or DOWN.
// Every "Server ... is UP/DOWN/..." line HAProxy prints about a server of
// the groups' backends goes to event.
func launchHAProxy(ctx context.Context, clk clock.Clock, dir, name string, servers []lbServer, tenantMap string,
	beforeStart func(inventory string) error, wantUp int, event func(string)) (*haproxy, error) {
	f := lbFront{Name: name, TenantMap: tenantMap}
	if f.TenantMap == "" {
		f.TenantMap = filepath.Join(dir, "repool-tenants.map")
	}
	var err error
	if f.User, f.Group, err = currentUser(); err != nil {
		return nil, fmt.Errorf("haproxy's user: %w", err)
	}
	ports, err := pgcluster.FreePorts(3)
	if err != nil {
		return nil, err
	}
	f.GRPC, f.Control, f.Monitor = ports[0], ports[1], ports[2]
	sockDir, err := os.MkdirTemp("", "rlt-")
	if err != nil {
		return nil, err
	}
	f.Sock = filepath.Join(sockDir, name+".sock")
	h := &haproxy{addr: net.JoinHostPort(lbVIP, strconv.Itoa(f.GRPC)), sock: f.Sock, sockDir: sockDir}
	defer func() {
		if h.proc == nil {
			os.RemoveAll(sockDir)
		}
	}()
	for _, s := range servers {
		group := s.Group
		if group == "" {
			group = inventory.DefaultGroup
		}
		if b := lbhaproxy.BackendFor(group); !slices.Contains(h.backends, b) {
			h.backends = append(h.backends, b)
		}
	}
	inv, err := lbInventory(f, servers)
	if err != nil {
		return nil, err
	}
	h.inventory = filepath.Join(dir, "inventory-"+name+".yaml")
	if err := os.WriteFile(h.inventory, []byte(inv), 0o600); err != nil {
		return nil, err
	}
	if beforeStart != nil {
		if err := beforeStart(h.inventory); err != nil {
			return nil, err
		}
	}
	text, err := renderHAProxy(ctx, h.inventory)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.inventory, err)
	}
	cfgPath := filepath.Join(dir, "haproxy-"+name+".cfg")
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		return nil, err
	}
	// Render checked the file against an empty stand-in of the tenant
	// map; this checks it against the map HAProxy will read.
	bin := haproxyBin()
	if out, err := exec.CommandContext(ctx, bin, "-c", "-f", cfgPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("haproxy -c -f %s: %w\n%s", cfgPath, err, out)
	}
	cmd := exec.Command(bin, "-f", cfgPath, "-db")
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = pw
	logPath := filepath.Join(dir, "haproxy-"+name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = sysProcAttr(nil)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	h.proc = &proc{name: "haproxy-" + name, cmd: cmd, done: make(chan struct{}), clock: clk}
	go func() {
		h.proc.err = cmd.Wait()
		pw.Close()
		close(h.proc.done)
	}()
	go scanHAProxy(pr, logf, h.backends, event)

	deadline := clk.Now().Add(15 * time.Second)
	for {
		st, err := h.states()
		if err == nil && count(st, "UP") == wantUp && count(st, "UP")+count(st, "NOLB")+count(st, "DOWN") == len(servers) {
			return h, nil
		}
		if !h.proc.running() {
			os.RemoveAll(sockDir)
			return nil, fmt.Errorf("haproxy exited: %v; %s", h.proc.err, seeLog(logPath))
		}
		if clk.Now().After(deadline) {
			h.stop()
			return nil, fmt.Errorf("haproxy for %s: want %d server(s) UP within 15s, have %v (%v); %s", name, wantUp, st, err, seeLog(logPath))
		}
		if err := clock.Sleep(ctx, clk, 100*time.Millisecond); err != nil {
			h.stop()
			return nil, err
		}
	}
}

// serverState matches the state changes HAProxy prints on stderr in the
// foreground (-db), e.g. "[WARNING]  (12) : Server repool/us-s1 is DOWN,
// reason: Layer4 connection problem, ...". The production configuration
// also logs each one to stdout (its log target), without the "[LEVEL]
// (pid) :" prefix: those copies are not matched.
var serverState = regexp.MustCompile(`^\[[A-Z]+\][^:]*: Server ([a-z0-9_-]+)/(\S+) is (UP|DOWN|stopping|going down)(?:.*?reason: ([^,]+))?(?:.*?code: (\d+))?`)

// scanHAProxy copies HAProxy's output to logf and reports the state
// changes of the servers of backends (the control plane's backends'
// servers track those and would repeat each change).
func scanHAProxy(r io.Reader, logf *os.File, backends []string, event func(string)) {
	defer logf.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		m := serverState.FindStringSubmatch(line)
		if m == nil || event == nil || !slices.Contains(backends, m[1]) {
			continue
		}
		text := fmt.Sprintf("haproxy: %s is %s", m[2], m[3])
		if m[3] == "stopping" {
			text = fmt.Sprintf("haproxy: %s is NOLB (standby)", m[2])
		}
		if m[4] != "" {
			text += " (" + strings.TrimSpace(m[4])
			if m[5] != "" {
				text += ", " + m[5]
			}
			text += ")"
		}
		event(text)
	}
	_, _ = io.Copy(logf, r)
}

// states returns each server's status from the stats socket ("UP",
// "DOWN", "NOLB", ...), "DRAIN" for a server UP at weight 0 (its agent's
// "up 0%": a standby on its way back from DOWN).
func (h *haproxy) states() (map[string]string, error) {
	conn, err := net.DialTimeout("unix", h.sock, time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "show stat\n"); err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(conn)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(line, ",")
		// pxname,svname,...; status is field 17, weight 18.
		if len(f) > 18 && slices.Contains(h.backends, f[0]) && f[1] != "BACKEND" && f[1] != "FRONTEND" {
			out[f[1]] = f[17]
			if f[17] == "UP" && f[18] == "0" {
				out[f[1]] = "DRAIN"
			}
		}
	}
	return out, nil
}

func count(m map[string]string, v string) int {
	n := 0
	for _, s := range m {
		if s == v {
			n++
		}
	}
	return n
}

func (h *haproxy) stop() {
	h.proc.stop(syscall.SIGTERM, 5*time.Second)
	os.RemoveAll(h.sockDir)
}
