// Package topology starts, on loopback, what a load-test scenario runs
// against, injects its faults, and stops it all again:
//
//	load generator ──HTTP──▶ sidecar ──▶ toxiproxy "P-vip" ──▶ HAProxy ──▶ [brownout proxy] ──▶ server P-s1 (active)
//	                                                                     └▶ [brownout proxy] ──▶ server P-s2 (standby)
//	naive client ──gRPC──▶ toxiproxy "P-s1" ──▶ [brownout proxy] ──▶ server P-s1
//	                    └▶ toxiproxy "P-s2" ──▶ [brownout proxy] ──▶ server P-s2
//
// for every provider P. Servers are real repool servers, started as child
// processes of this executable (see RunChild), two per provider sharing one
// PostgreSQL database in HA mode (one active, one standby; leases carry
// over a failover). Without PostgreSQL each provider has one SQLite server
// (the single-writer deployment: nothing takes over when it dies).
// HAProxy is the real binary running the production configuration:
// internal/lb/haproxy renders it from an LB inventory with the shipped
// defaults, which the topology writes with a few loopback overrides (see
// lbInventory and docs/loadtest.md). toxiproxy runs in this process, as a
// library; the brownout proxy (gRPC level) is only put in front of the
// servers of providers that need it; the sidecar is a child process too.
//
// With Config.Groups the providers are instead tenants of one cluster of
// tenant-sharded groups (see groups.go): one server per group, one HAProxy
// routing each tenant to its group by the tenant map that "server haproxy
// sync-placements" keeps, and live moves of a tenant (MoveTenant).
//
// Faults hit both clients alike: every connection from either client into
// a provider passes one of the provider's toxiproxies, and the servers and
// their brownout proxies are the same for both.
//
// A Topology is safe for concurrent use. Close stops everything it
// started, in reverse order; children also die with this process (Linux
// parent-death signal).
package topology

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/store/open"
)

// Config configures Start.
type Config struct {
	// Providers are the provider names. At least one.
	Providers []string
	// Brownout names the providers whose servers get a brownout proxy.
	Brownout map[string]bool
	// Sidecar starts the sidecar, configured for every provider.
	Sidecar bool
	// SidecarPolicies are merged into each provider's entry of the
	// sidecar's configuration (timeout, retry, breaker, ...).
	SidecarPolicies map[string]map[string]any
	// Resources and Capacity: registered per provider before the run,
	// named res-0000... Defaults 64 and 4.
	Resources, Capacity int
	// Postgres, when set, holds the providers' databases (HA mode);
	// otherwise every server has its own SQLite file.
	Postgres *Postgres
	// Servers per provider. Default 2 with Postgres (an HA pair);
	// without it 1, and more is refused: independent SQLite servers behind
	// one HAProxy would serve diverging stores, which no deployment does.
	Servers int
	// Groups, when set, makes the providers tenants of one cluster of
	// tenant-sharded groups instead of a cluster each (see startGroups).
	// Needs Postgres.
	Groups []string
	// Dir receives configurations, logs and SQLite files. Required.
	Dir string
	// Event, when set, is told what happens: HAProxy state changes,
	// servers stopped, killed and started.
	Event func(text string)
	// Log receives progress. Default discards it.
	Log *slog.Logger
	// Clock times the waits for the children (their start, readiness and
	// stop). Default the wall clock (clock.Real): the children run on it.
	Clock clock.Clock
}

// Topology is a running topology.
type Topology struct {
	cfg       Config
	log       *slog.Logger
	tox       *toxiproxy.ApiServer
	clusters  map[string]*cluster
	sidecar   *proc
	sidecarAt string
	// groups is the cluster of tenant-sharded groups (Config.Groups).
	groups *groups

	mu     sync.Mutex // guards servers' proc fields and toxics
	toxics int        // names toxics uniquely
	closed bool
}

// cluster is one provider.
type cluster struct {
	name      string
	key       string
	servers   []*node
	brownouts []*brownout
	ha        *haproxy
	vip       *toxiproxy.Proxy
	edges     []*toxiproxy.Proxy
}

// node is one server.
type node struct {
	name    string
	store   string
	ha      bool
	group   string // its group (Config.Groups); empty: the default group
	grpc    string // fixed after the first start: restarts reuse it
	http    string
	logPath string
	proc    *proc
	// tokenTTL is the lifetime of the tokens it issues; zero: the default.
	tokenTTL time.Duration
}

// Start starts the topology. On error it stops what it started.
func Start(ctx context.Context, cfg Config) (_ *Topology, err error) {
	if len(cfg.Providers) == 0 || cfg.Dir == "" {
		return nil, errors.New("topology: Config.Providers and Config.Dir are required")
	}
	switch {
	case cfg.Servers == 0 && cfg.Postgres != nil:
		cfg.Servers = 2
	case cfg.Servers == 0:
		cfg.Servers = 1
	case cfg.Servers > 1 && cfg.Postgres == nil:
		return nil, fmt.Errorf("topology: %d servers per provider need PostgreSQL (HA mode); without it a provider has one SQLite server", cfg.Servers)
	}
	if cfg.Resources == 0 {
		cfg.Resources = 64
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 4
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Event == nil {
		cfg.Event = func(string) {}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	t := &Topology{
		cfg: cfg, log: cfg.Log, clusters: map[string]*cluster{},
		tox: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if len(cfg.Groups) > 0 {
		if err := t.startGroups(ctx); err != nil {
			return nil, fmt.Errorf("groups: %w", err)
		}
	}
	for _, p := range cfg.Providers {
		if len(cfg.Groups) > 0 {
			break
		}
		if err := t.startCluster(ctx, p); err != nil {
			return nil, fmt.Errorf("provider %s: %w", p, err)
		}
	}
	if cfg.Sidecar {
		if err := t.startSidecar(ctx); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// startCluster starts provider p's servers, brownout proxies, HAProxy and
// toxiproxies. The cluster is in t.clusters from the start, so that Close
// also stops what a failed start left running.
func (t *Topology) startCluster(ctx context.Context, p string) error {
	c := &cluster{name: p}
	t.clusters[p] = c
	ha := t.cfg.Postgres != nil
	var dsn string
	if ha {
		db, err := t.cfg.Postgres.CreateDB(ctx, strings.ReplaceAll(p, "-", "_"))
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		dsn = t.cfg.Postgres.URL(db)
	}
	for i := range t.cfg.Servers {
		n := &node{name: fmt.Sprintf("%s-s%d", p, i+1), ha: ha, grpc: "127.0.0.1:0", http: "127.0.0.1:0"}
		n.logPath = filepath.Join(t.cfg.Dir, n.name+".log")
		n.store = dsn
		if !ha {
			u, err := open.SQLite(filepath.Join(t.cfg.Dir, n.name+".db"))
			if err != nil {
				return err
			}
			n.store = u.String()
		}
		c.servers = append(c.servers, n)
	}
	// The first server creates the store and prints the demo key; it is
	// active before the others start, so it is the naive client's first
	// host and HAProxy's active server.
	first := c.servers[0]
	key, err := t.startNode(ctx, first)
	if err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%s printed no demo API key on an empty store", first.name)
	}
	c.key = key
	if err := waitStatus(ctx, t.cfg.Clock, "http://"+first.http+"/readyz/active", http.StatusOK, 30*time.Second); err != nil {
		return fmt.Errorf("%s never became active: %w; %s", first.name, err, seeLog(first.logPath))
	}
	if err := c.register(ctx, t.cfg.Resources, t.cfg.Capacity); err != nil {
		return err
	}
	for _, n := range c.servers[1:] {
		if _, err := t.startNode(ctx, n); err != nil {
			return err
		}
	}
	// The others are standbys.
	for _, n := range c.servers[1:] {
		if err := waitStatus(ctx, t.cfg.Clock, "http://"+n.http+"/readyz/active", http.StatusNotFound, 30*time.Second); err != nil {
			return fmt.Errorf("%s: %w; %s", n.name, err, seeLog(n.logPath))
		}
	}

	servers := make([]lbServer, len(c.servers))
	upstream := make([]string, len(c.servers))
	for i, n := range c.servers {
		upstream[i] = n.grpc
		if t.cfg.Brownout[p] {
			b, err := startBrownout(n.grpc)
			if err != nil {
				return err
			}
			c.brownouts = append(c.brownouts, b)
			upstream[i] = b.addr()
		}
		servers[i] = lbServer{Name: n.name, GRPC: upstream[i], HTTP: port(n.http)}
	}
	if c.ha, err = startHAProxy(ctx, t.cfg.Clock, t.cfg.Dir, p, servers, 1, t.cfg.Event); err != nil {
		return err
	}
	if c.vip, err = t.proxy(p+"-vip", c.ha.addr); err != nil {
		return err
	}
	for i, n := range c.servers {
		e, err := t.proxy(n.name, upstream[i])
		if err != nil {
			return err
		}
		c.edges = append(c.edges, e)
	}
	t.log.Info("provider up", "provider", p, "haproxy", c.ha.addr, "vip", c.vip.Listen, "ha", ha)
	return nil
}

// startNode starts a server child and returns the demo key it printed, if
// any. A restart reuses the node's addresses.
func (t *Topology) startNode(ctx context.Context, n *node) (string, error) {
	cmd, err := childCmd(roleServer, serverChild{Store: n.store, GRPCAddr: n.grpc, HTTPAddr: n.http, HA: n.ha, Name: n.name, Group: n.group})
	if err != nil {
		return "", err
	}
	var hello serverHello
	var p *proc
	for attempt := 0; ; attempt++ {
		if p, err = start(ctx, t.cfg.Clock, n.name, cmd, n.logPath, &hello, 60*time.Second); err == nil {
			break
		}
		// A restart may find its port still held for a moment.
		if attempt == 20 || !strings.Contains(err.Error(), "exited before it was ready") || ctx.Err() != nil {
			return "", err
		}
		if err := clock.Sleep(ctx, t.cfg.Clock, 250*time.Millisecond); err != nil {
			return "", err
		}
		if cmd, err = childCmd(roleServer, serverChild{Store: n.store, GRPCAddr: n.grpc, HTTPAddr: n.http, HA: n.ha, Name: n.name, Group: n.group}); err != nil {
			return "", err
		}
	}
	t.mu.Lock()
	n.proc, n.grpc, n.http = p, hello.GRPC, hello.HTTP
	t.mu.Unlock()
	return hello.Key, nil
}

// register registers the scenario's resources on the active first server.
func (c *cluster) register(ctx context.Context, resources, capacity int) error {
	conn, err := grpc.NewClient(c.servers[0].grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := repoolv1.NewPoolServiceClient(conn)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", c.key)
	for lo := 0; lo < resources; lo += 500 {
		req := &repoolv1.RegisterRequest{}
		for i := lo; i < resources && i < lo+500; i++ {
			req.Resources = append(req.Resources, &repoolv1.Resource{Id: fmt.Sprintf("res-%04d", i), Capacity: int32(capacity)})
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := client.Register(cctx, req)
		cancel()
		if err != nil {
			return fmt.Errorf("registering resources: %w", err)
		}
	}
	return nil
}

// proxy starts a toxiproxy proxy on a free port of 127.0.0.1.
func (t *Topology) proxy(name, upstream string) (*toxiproxy.Proxy, error) {
	px := toxiproxy.NewProxy(t.tox, name, "127.0.0.1:0", upstream)
	if err := t.tox.Collection.Add(px, true); err != nil {
		return nil, fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	return px, nil
}

func (t *Topology) startSidecar(ctx context.Context) error {
	providers := map[string]any{}
	for _, name := range t.cfg.Providers {
		c := t.clusters[name]
		entry := map[string]any{}
		for k, v := range t.cfg.SidecarPolicies[name] {
			entry[k] = v
		}
		entry["endpoint"] = c.vip.Listen
		entry["api_key"] = c.key
		providers[name] = entry
	}
	doc := map[string]any{"listen": "127.0.0.1:0", "log_level": "warn", "shutdown_grace": "2s", "providers": providers}
	raw, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	path := filepath.Join(t.cfg.Dir, "sidecar.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil { // holds API keys
		return err
	}
	cmd, err := childCmd(roleSidecar, sidecarChild{Config: path})
	if err != nil {
		return err
	}
	var hello sidecarHello
	if t.sidecar, err = start(ctx, t.cfg.Clock, "sidecar", cmd, filepath.Join(t.cfg.Dir, "sidecar.log"), &hello, 30*time.Second); err != nil {
		return err
	}
	t.sidecarAt = hello.Addr
	return nil
}

// SidecarURL returns the sidecar's base URL, http://127.0.0.1:PORT; empty
// without a sidecar.
func (t *Topology) SidecarURL() string {
	if t.sidecarAt == "" {
		return ""
	}
	return "http://" + t.sidecarAt
}

// Hosts returns the provider's server addresses for a client that talks to
// servers itself (each through the server's toxiproxy), first server first.
func (t *Topology) Hosts(provider string) []string {
	c := t.clusters[provider]
	out := make([]string, len(c.edges))
	for i, e := range c.edges {
		out[i] = e.Listen
	}
	return out
}

// APIKey returns the provider's demo API key.
func (t *Topology) APIKey(provider string) string { return t.clusters[provider].key }

// Endpoint returns the provider's VIP as the sidecar sees it (its
// toxiproxy in front of HAProxy).
func (t *Topology) Endpoint(provider string) string { return t.clusters[provider].vip.Listen }

// Close stops the sidecar, HAProxy, the servers, the proxies, in that
// order. It is idempotent.
func (t *Topology) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	if t.sidecar != nil {
		t.sidecar.stop(syscall.SIGTERM, 5*time.Second)
	}
	var (
		errMu sync.Mutex
		errs  []error
		wg    sync.WaitGroup
	)
	// stopServers stops the server processes of nodes at once, collecting
	// their exit errors.
	stopServers := func(nodes []*node) {
		for _, n := range nodes {
			t.mu.Lock()
			p := n.proc
			t.mu.Unlock()
			if p != nil {
				wg.Go(func() {
					p.stop(syscall.SIGTERM, 5*time.Second)
					if err := p.exitErr(); err != nil {
						errMu.Lock()
						errs = append(errs, fmt.Errorf("%s: %w", n.name, err))
						errMu.Unlock()
					}
				})
			}
		}
	}
	if g := t.groups; g != nil {
		if g.sync != nil {
			g.sync.stop(syscall.SIGTERM, 5*time.Second)
		}
		if g.ha != nil {
			wg.Go(g.ha.stop)
		}
		stopServers(g.nodes)
	}
	for _, c := range t.clusters {
		if c.ha != nil {
			wg.Go(c.ha.stop)
		}
		stopServers(c.servers)
	}
	wg.Wait()
	for _, c := range t.clusters {
		for _, b := range c.brownouts {
			b.close()
		}
	}
	_ = t.tox.Collection.Clear()
	return errors.Join(errs...)
}

// waitStatus polls url until it answers want, for up to timeout on clk.
func waitStatus(ctx context.Context, clk clock.Clock, url string, want int, timeout time.Duration) error {
	deadline := clk.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	last := "no answer"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if clk.Now().After(deadline) {
			return fmt.Errorf("GET %s: want %d within %v, last: %s", url, want, timeout, last)
		}
		if err := clock.Sleep(ctx, clk, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func port(addr string) int {
	var p int
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		fmt.Sscanf(addr[i+1:], "%d", &p)
	}
	return p
}
