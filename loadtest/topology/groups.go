package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
)

// groups is a cluster of tenant-sharded groups (Config.Groups):
//
//	load generator ──HTTP──▶ sidecar ──▶ toxiproxy "vip" ──▶ HAProxy ─┬▶ backend repool   ──▶ server default-s1 (group default)
//	  (one provider per tenant,                                        └▶ backend repool_G ──▶ server G-s1 (group G)
//	   each with its own API key)        map tenant → backend ◀── server haproxy sync-placements ◀── the store's placements
//
// One server per group, all on one PostgreSQL database in HA mode (each
// the active server of its group). Every provider is a tenant of its own,
// created through the control plane with the operator token the first
// server prints, placed on the default group; the sidecar sends its
// tenant in x-repool-tenant, and HAProxy routes on it.
type groups struct {
	names   []string
	nodes   []*node // one per group, in names' order
	opToken string
	ha      *haproxy
	vip     *toxiproxy.Proxy
	mapFile string
	sync    *proc

	placed map[string]string // tenant → group, guarded by Topology.mu
	clock  clock.Clock       // the topology's
}

// groupTokenTTL is the lifetime of the tokens the groups' servers issue:
// the shortest the server allows, so that a scenario's sidecars (with a
// token policy that uses them for 5 s) renew them every few seconds, and a
// tenant's tokens expire and are renewed on its new group within seconds
// of a move.
const groupTokenTTL = 10 * time.Second

// Move is what MoveTenant measured.
type Move struct {
	Tenant, From, To string
	// Server is the source group's active server, which took the request.
	Server string
	// Request is how long the move request took (until the handover
	// committed).
	Request time.Duration
	// Refused is how long the source refused the tenant's calls, as it
	// answered.
	Refused time.Duration
	// Window is from the move request until a call of the tenant through
	// HAProxy (no retries) was served again.
	Window time.Duration
}

// startGroups starts the groups' servers, creates a tenant (and API key)
// per provider, registers their resources, and starts HAProxy with the
// tenant map and the placement sync. t.groups is set from the start, so
// that Close also stops what a failed start left running.
func (t *Topology) startGroups(ctx context.Context) error {
	if t.cfg.Postgres == nil {
		return errors.New("tenant-sharded groups need PostgreSQL (HA mode): run with -store postgres")
	}
	g := &groups{names: t.cfg.Groups, clock: t.cfg.Clock, placed: map[string]string{}, mapFile: filepath.Join(t.cfg.Dir, "repool-tenants.map")}
	t.groups = g
	db, err := t.cfg.Postgres.CreateDB(ctx, "groups")
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	dsn := t.cfg.Postgres.URL(db)
	for _, name := range g.names {
		n := &node{name: name + "-s1", ha: true, group: name, store: dsn, grpc: "127.0.0.1:0", http: "127.0.0.1:0", tokenTTL: groupTokenTTL}
		n.logPath = filepath.Join(t.cfg.Dir, n.name+".log")
		g.nodes = append(g.nodes, n)
	}
	// The first server (default group) creates the store and prints the
	// operator token.
	first := g.nodes[0]
	var hello serverHello
	if hello, err = t.startGroupNode(ctx, first); err != nil {
		return err
	}
	if hello.OpToken == "" {
		return fmt.Errorf("%s printed no operator token on an empty store", first.name)
	}
	g.opToken = hello.OpToken
	for _, n := range g.nodes {
		if n != first {
			if _, err := t.startGroupNode(ctx, n); err != nil {
				return err
			}
		}
		if err := waitStatus(ctx, t.cfg.Clock, "http://"+n.http+"/readyz/active", http.StatusOK, 30*time.Second); err != nil {
			return fmt.Errorf("%s never became its group's active server: %w; %s", n.name, err, seeLog(n.logPath))
		}
	}
	for _, p := range t.cfg.Providers {
		key, err := g.createTenant(ctx, first, p)
		if err != nil {
			return fmt.Errorf("tenant %s: %w", p, err)
		}
		c := &cluster{name: p, key: key, servers: []*node{first}}
		t.clusters[p] = c
		// The group's active server takes a new tenant in at its next
		// placement poll; until then it refuses the tenant's calls.
		deadline := t.cfg.Clock.Now().Add(30 * time.Second)
		for {
			err = c.register(ctx, t.cfg.Resources, t.cfg.Capacity)
			if err == nil || status.Code(errors.Unwrap(err)) != codes.Unavailable || t.cfg.Clock.Now().After(deadline) {
				break
			}
			if err = clock.Sleep(ctx, t.cfg.Clock, 50*time.Millisecond); err != nil {
				break
			}
		}
		c.servers = nil // the groups' servers are stopped with t.groups
		if err != nil {
			return fmt.Errorf("tenant %s: %w", p, err)
		}
		g.placed[p] = g.names[0]
	}

	// HAProxy's inventory has a server per group; sync-placements reads it
	// too (the map file, the groups and lb1's stats socket). The tenant map
	// is written from the store before HAProxy first reads it, then kept
	// live by the sync loop, as on a real LB host.
	servers := make([]lbServer, len(g.names))
	for i, name := range g.names {
		n := g.nodes[i]
		servers[i] = lbServer{Name: n.name, GRPC: n.grpc, HTTP: port(n.http), Group: name}
	}
	fileOnly := func(inv string) error {
		return t.serverCmd(ctx, "sync-placements-file", "haproxy", "sync-placements", "--inventory", inv, "--host", lbHost, "--store", dsn, "--file-only")
	}
	if g.ha, err = launchHAProxy(ctx, t.cfg.Clock, t.cfg.Dir, "groups", servers, g.mapFile, fileOnly, len(servers), t.cfg.Event); err != nil {
		return err
	}
	cmd, err := childCmd(roleServerCmd, serverCmdChild{Args: []string{"haproxy", "sync-placements",
		"--inventory", g.ha.inventory, "--host", lbHost, "--store", dsn, "--interval", "100ms"}})
	if err != nil {
		return err
	}
	if g.sync, err = start(ctx, t.cfg.Clock, "sync-placements", cmd, filepath.Join(t.cfg.Dir, "sync-placements.log"), nil, 0); err != nil {
		return err
	}
	if g.vip, err = t.proxy("vip", g.ha.addr); err != nil {
		return err
	}
	for _, p := range t.cfg.Providers {
		t.clusters[p].vip = g.vip
	}
	t.log.Info("groups up", "groups", g.names, "haproxy", g.ha.addr, "vip", g.vip.Listen, "tenants", t.cfg.Providers)
	return nil
}

// startGroupNode starts a server of a group and returns its ready line.
func (t *Topology) startGroupNode(ctx context.Context, n *node) (serverHello, error) {
	cmd, err := childCmd(roleServer, serverChild{Store: n.store, GRPCAddr: n.grpc, HTTPAddr: n.http, HA: true, Name: n.name, Group: n.group, TokenTTL: n.tokenTTL})
	if err != nil {
		return serverHello{}, err
	}
	var hello serverHello
	p, err := start(ctx, t.cfg.Clock, n.name, cmd, n.logPath, &hello, 60*time.Second)
	if err != nil {
		return serverHello{}, err
	}
	t.mu.Lock()
	n.proc, n.grpc, n.http = p, hello.GRPC, hello.HTTP
	t.mu.Unlock()
	return hello, nil
}

// serverCmd runs "server ARGS..." as a child to its end.
func (t *Topology) serverCmd(ctx context.Context, name string, args ...string) error {
	cmd, err := childCmd(roleServerCmd, serverCmdChild{Args: args})
	if err != nil {
		return err
	}
	logPath := filepath.Join(t.cfg.Dir, name+".log")
	p, err := start(ctx, t.cfg.Clock, name, cmd, logPath, nil, 0)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
	if p.err != nil {
		return fmt.Errorf("server %s: %w; %s", strings.Join(args, " "), p.err, seeLog(logPath))
	}
	return nil
}

// control calls the control plane of n with the operator token and decodes
// the answer into out (when set); any status but want is an error. A 503
// (n is not, or not yet again, its group's active server) is asked again
// within the minute, as a client would: once, with one core kept busy by
// other work, a POST right after n's /readyz/active answered 200 was
// answered "not the active server" (the cause in the server was not found).
func (g *groups) control(ctx context.Context, n *node, method, path string, body any, want int, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		err := g.controlOnce(ctx, n, method, path, body, want, out)
		var unavailable errUnavailable
		if !errors.As(err, &unavailable) {
			return err
		}
		if err := clock.Sleep(ctx, g.clock, 50*time.Millisecond); err != nil {
			return fmt.Errorf("%w (%w)", unavailable, err)
		}
	}
}

// errUnavailable is a control-plane answer 503.
type errUnavailable struct{ msg string }

func (e errUnavailable) Error() string { return e.msg }

// controlOnce is one call of control.
func (g *groups) controlOnce(ctx context.Context, n *node, method, path string, body any, want int, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.http+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+g.opToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s on %s: %w", method, path, n.name, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		err := fmt.Errorf("%s %s on %s = %s %s, want %d", method, path, n.name, resp.Status, bytes.TrimSpace(got), want)
		if resp.StatusCode == http.StatusServiceUnavailable {
			return errUnavailable{err.Error()}
		}
		return err
	}
	if out != nil {
		return json.Unmarshal(got, out)
	}
	return nil
}

// tenantLimits lift a tenant's request limit far above any scenario's
// rate: the noisy tenant must be able to flood its group.
var tenantLimits = map[string]any{"rate_per_second": 1e6, "burst": 1_000_000}

// createTenant creates tenant id on the default group with lifted limits
// and an API key, through n's control plane, and returns the key.
func (g *groups) createTenant(ctx context.Context, n *node, id string) (string, error) {
	if err := g.control(ctx, n, http.MethodPost, "/api/v1/tenants", map[string]string{"id": id, "name": id, "group": g.names[0]}, http.StatusCreated, nil); err != nil {
		return "", err
	}
	if err := g.control(ctx, n, http.MethodPut, "/api/v1/tenants/"+id+"/limits", tenantLimits, http.StatusOK, nil); err != nil {
		return "", err
	}
	var key struct {
		Key string `json:"key"`
	}
	if err := g.control(ctx, n, http.MethodPost, "/api/v1/tenants/"+id+"/keys", map[string]string{"name": "loadtest"}, http.StatusCreated, &key); err != nil {
		return "", err
	}
	if key.Key == "" {
		return "", errors.New("the created key came back empty")
	}
	return key.Key, nil
}

// MoveTenant moves the provider's tenant to group to, live: POST
// /api/v1/tenants/{id}/move on the active server of the group it is on,
// then calls GetResource for the tenant through HAProxy (its key and its
// x-repool-tenant entry, no retries) every 5 ms until one is served, for
// up to 30 s. Only in a topology with Config.Groups.
func (t *Topology) MoveTenant(ctx context.Context, provider, to string) (Move, error) {
	g := t.groups
	if g == nil {
		return Move{}, errors.New("the topology has no groups (Config.Groups)")
	}
	c, err := t.cluster(provider)
	if err != nil {
		return Move{}, err
	}
	t.mu.Lock()
	from := g.placed[provider]
	t.mu.Unlock()
	var src *node
	for i, name := range g.names {
		if name == from {
			src = g.nodes[i]
		}
	}
	if src == nil {
		return Move{}, fmt.Errorf("tenant %s is on group %q, which the topology does not run", provider, from)
	}
	m := Move{Tenant: provider, From: from, To: to, Server: src.name}
	conn, err := grpc.NewClient(g.ha.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return m, err
	}
	defer conn.Close()
	pool := repoolv1.NewPoolServiceClient(conn)
	pctx := metadata.AppendToOutgoingContext(ctx, "x-api-key", c.key, repoolv1.TenantRouteKey, provider)

	t0 := t.cfg.Clock.Now()
	var out struct {
		RefusedMS int64 `json:"refused_ms"`
	}
	if err := g.control(ctx, src, http.MethodPost, "/api/v1/tenants/"+provider+"/move", map[string]string{"group": to}, http.StatusOK, &out); err != nil {
		return m, err
	}
	m.Request = t.cfg.Clock.Now().Sub(t0)
	m.Refused = time.Duration(out.RefusedMS) * time.Millisecond
	t.mu.Lock()
	g.placed[provider] = to
	t.mu.Unlock()
	deadline := t0.Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(pctx, time.Second)
		_, err := pool.GetResource(cctx, &repoolv1.GetResourceRequest{Id: "res-0000"})
		cancel()
		if err == nil {
			m.Window = t.cfg.Clock.Now().Sub(t0)
			t.cfg.Event(fmt.Sprintf("%s: moved from %s to %s; served through HAProxy again %v after the request (the source refused it for %v)",
				provider, from, to, m.Window.Round(time.Millisecond), m.Refused))
			return m, nil
		}
		if t.cfg.Clock.Now().After(deadline) || ctx.Err() != nil {
			return m, fmt.Errorf("tenant %s moved to %s, but no call through HAProxy was served within 30s: last %v", provider, to, err)
		}
		if err := clock.Sleep(ctx, t.cfg.Clock, 5*time.Millisecond); err != nil {
			return m, err
		}
	}
}
