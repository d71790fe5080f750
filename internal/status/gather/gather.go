// Package gather builds a deployment's status (status.Cluster) from the LB
// inventory: it asks every server for its status (GET /status.json on its HTTP
// port, with an operator or metrics token), every LB host's HAProxy for its
// monitor URI and its Prometheus exporter (the rendered haproxy.cfg serves
// both on the host's monitor port), every LB host's node exporter for
// the Keepalived state keepalived/notify.sh writes, and every database
// node's Patroni (GET /patroni) when the inventory has a database section,
// all at once, each
// bounded by a timeout. What does not answer is said in the status, never
// an error: `server status` must show a broken cluster too.
package gather

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/repool/repool/internal/lb/haproxy"
	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/status"
)

// DefaultNodeExporterPort is Debian's prometheus-node-exporter's port.
const DefaultNodeExporterPort = 9100

// DefaultTimeout bounds each request.
const DefaultTimeout = 3 * time.Second

// maxBody bounds what is read of one answer (HAProxy's exporter answers
// about 100 KiB for three servers).
const maxBody = 8 << 20

// Config is what Cluster needs.
type Config struct {
	// Inventory names the LB hosts and the servers. Required.
	Inventory *inventory.Inventory
	// Servers is the client for the servers' HTTP ports: its transport
	// carries the TLS configuration (CA, client certificate) when Scheme
	// is https. Nil means http.DefaultClient.
	Servers *http.Client
	// Scheme of the servers' HTTP ports: "https" (the inventory's tls
	// section is on) or "http". Default "http".
	Scheme string
	// Token is a control-plane token of role operator or metrics.
	Token string
	// LB is the client for the LB hosts' monitor ports and node exporters
	// (plaintext). Nil means http.DefaultClient.
	LB *http.Client
	// NodeExporterPort is the LB hosts' node exporter port. Zero means
	// DefaultNodeExporterPort.
	NodeExporterPort int
	// Timeout bounds each request. Zero means DefaultTimeout.
	Timeout time.Duration
	// Now is the reader's clock (Cluster.Time). Nil means time.Now.
	Now func() time.Time
}

// Cluster gathers the deployment's status. It returns an error only for a
// Config without an inventory.
func Cluster(ctx context.Context, cfg Config) (status.Cluster, error) {
	inv := cfg.Inventory
	if inv == nil {
		return status.Cluster{}, errors.New("gather: Config.Inventory is nil")
	}
	if cfg.Servers == nil {
		cfg.Servers = http.DefaultClient
	}
	if cfg.LB == nil {
		cfg.LB = http.DefaultClient
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
	}
	if cfg.NodeExporterPort == 0 {
		cfg.NodeExporterPort = DefaultNodeExporterPort
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := status.Cluster{Time: cfg.Now(), VIP: inv.VIP.Address,
		LBHosts: make([]status.LBHost, len(inv.LBHosts)), Servers: make([]status.ServerEntry, len(inv.Servers))}
	var wg sync.WaitGroup
	for i, h := range inv.LBHosts {
		wg.Go(func() { c.LBHosts[i] = cfg.lbHost(ctx, h) })
	}
	for i, s := range inv.Servers {
		wg.Go(func() { c.Servers[i] = cfg.server(ctx, s) })
	}
	var positions []walPosition
	if db := inv.Database; db != nil {
		c.DBNodes = make([]status.DBNode, len(db.Nodes))
		positions = make([]walPosition, len(db.Nodes))
		for i, n := range db.Nodes {
			wg.Go(func() { c.DBNodes[i], positions[i] = cfg.dbNode(ctx, n) })
		}
	}
	wg.Wait()
	lags(c.DBNodes, positions)
	c.Groups = groups(inv, c.Servers)
	c.Database = database(c.Servers)
	c.Warnings = warnings(c)
	return c, nil
}

// get fetches u within the timeout and returns its body; an answer other
// than 200 is an error with its status and, for a JSON error of ours, its
// message.
func (cfg Config) get(ctx context.Context, client *http.Client, u, token string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, short(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, short(err)
	}
	if resp.StatusCode != http.StatusOK {
		se := &statusError{code: resp.StatusCode, text: resp.Status}
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			se.text += ": " + e.Error.Message
		}
		return nil, se
	}
	return body, nil
}

// statusError is an answer other than 200 OK: its status line, and the
// message of a JSON error body.
type statusError struct {
	code int
	text string
}

func (e *statusError) Error() string { return e.text }

// cutOff is what a LB host's monitor answering 503 means: HAProxy runs,
// and its monitor fails (monitor fail) because it sees no repool server
// alive and no other LB host.
const cutOff = "the host is cut off: its HAProxy sees no repool server alive and no other LB host, so Keepalived keeps it in FAULT"

// short drops the method and URL that net/http puts before the cause (the
// table names the host already) and words a timeout.
func short(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.New("no answer within the timeout")
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return fmt.Errorf("%s %s: %v", op.Op, op.Addr, op.Err)
	}
	return err
}

func (cfg Config) server(ctx context.Context, s inventory.Server) status.ServerEntry {
	e := status.ServerEntry{Name: s.Name, Group: s.Group,
		URL: cfg.Scheme + "://" + net.JoinHostPort(s.Address, strconv.Itoa(s.HTTPPort)) + "/status.json"}
	body, err := cfg.get(ctx, cfg.Servers, e.URL, cfg.Token)
	if err != nil {
		e.Error = err.Error()
		return e
	}
	var st status.Server
	if err := json.Unmarshal(body, &st); err != nil {
		e.Error = "not a repool status: " + err.Error()
		return e
	}
	e.Status = &st
	return e
}

func (cfg Config) lbHost(ctx context.Context, h inventory.LBHost) status.LBHost {
	out := status.LBHost{Name: h.Name, Address: h.Address, Backends: []status.Backend{}}
	monitor := "http://" + net.JoinHostPort(h.Address, strconv.Itoa(h.MonitorPort))
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := cfg.get(ctx, cfg.LB, monitor+inventory.MonitorURI, ""); err != nil {
			out.HAProxyError = "monitor URI: " + err.Error()
			if se := (*statusError)(nil); errors.As(err, &se) && se.code == http.StatusServiceUnavailable {
				out.HAProxyError += " (" + cutOff + ")"
			}
			return
		}
		body, err := cfg.get(ctx, cfg.LB, monitor+"/metrics", "")
		if err == nil {
			out.Backends, err = backends(body, cfg.Inventory)
		}
		if err != nil {
			out.HAProxyError = "exporter: " + err.Error()
			return
		}
		out.HAProxyUp = true
	})
	wg.Go(func() {
		u := "http://" + net.JoinHostPort(h.Address, strconv.Itoa(cfg.NodeExporterPort)) + "/metrics"
		body, err := cfg.get(ctx, cfg.LB, u, "")
		if err == nil {
			out.VRRPState, err = vrrpState(body)
		}
		if err != nil {
			out.VRRPError = "node exporter: " + err.Error()
		}
		out.HoldsVIP = out.VRRPState == "MASTER"
	})
	wg.Wait()
	return out
}

// patroni is what dbNode reads of Patroni's GET /patroni.
type patroni struct {
	State    string `json:"state"`
	Role     string `json:"role"`
	Timeline int64  `json:"timeline"`
	Xlog     struct {
		Location         *int64 `json:"location"`          // a primary's
		ReplayedLocation *int64 `json:"replayed_location"` // a replica's
	} `json:"xlog"`
}

// walPosition is a node's WAL position: written (a primary) or replayed
// (a replica); nil when unknown.
type walPosition struct {
	primary bool
	at      *int64
}

// dbNode asks node n's Patroni (GET /patroni on its REST port, plain
// HTTP: the GET routes need no credentials) for its role and state.
func (cfg Config) dbNode(ctx context.Context, n inventory.DBNode) (status.DBNode, walPosition) {
	out := status.DBNode{Name: n.Name, Address: n.Address}
	u := "http://" + net.JoinHostPort(n.Address, strconv.Itoa(n.RESTPort)) + "/patroni"
	body, err := cfg.get(ctx, cfg.LB, u, "")
	if err != nil {
		// Patroni answers 503 on a node that is not running: its body
		// still says why.
		out.Error = "Patroni: " + err.Error()
		return out, walPosition{}
	}
	var p patroni
	if err := json.Unmarshal(body, &p); err != nil || p.State == "" {
		out.Error = "not Patroni's GET /patroni"
		return out, walPosition{}
	}
	out.Role, out.State, out.Timeline = p.Role, p.State, p.Timeline
	if out.Role == "master" {
		out.Role = "primary"
	}
	if out.Role == "primary" {
		return out, walPosition{primary: true, at: p.Xlog.Location}
	}
	return out, walPosition{at: p.Xlog.ReplayedLocation}
}

// lags sets each replica's lag behind the one primary, when there is
// exactly one and both positions are known.
func lags(nodes []status.DBNode, at []walPosition) {
	var primary *int64
	n := 0
	for _, p := range at {
		if p.primary {
			primary = p.at
			n++
		}
	}
	if n != 1 || primary == nil {
		return
	}
	for i, p := range at {
		if !p.primary && p.at != nil && nodes[i].Error == "" {
			lag := max(0, *primary-*p.at)
			nodes[i].LagBytes = &lag
		}
	}
}

// parse reads a Prometheus text exposition.
func parse(body []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("not Prometheus metrics: %v", err)
	}
	return mfs, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

// backends reads every inventory server's state in its group's backend
// from HAProxy's exporter: haproxy_server_status{state} (the state whose
// value is 1), haproxy_server_check_status{state} and _check_code (why),
// haproxy_server_weight. UP at weight 0 is DRAIN, as `server haproxy
// status` says. A server HAProxy does not list has State "".
func backends(body []byte, inv *inventory.Inventory) ([]status.Backend, error) {
	mfs, err := parse(body)
	if err != nil {
		return nil, err
	}
	type key struct{ proxy, server string }
	state, check, code, weight := map[key]string{}, map[key]string{}, map[key]int{}, map[key]int{}
	each := func(name string, f func(k key, m *dto.Metric)) {
		if mf := mfs[name]; mf != nil {
			for _, m := range mf.GetMetric() {
				f(key{label(m, "proxy"), label(m, "server")}, m)
			}
		}
	}
	each("haproxy_server_status", func(k key, m *dto.Metric) {
		if value(m) == 1 {
			state[k] = label(m, "state")
		}
	})
	each("haproxy_server_check_status", func(k key, m *dto.Metric) {
		if value(m) == 1 {
			check[k] = label(m, "state")
		}
	})
	each("haproxy_server_check_code", func(k key, m *dto.Metric) { code[k] = int(value(m)) })
	each("haproxy_server_weight", func(k key, m *dto.Metric) { weight[k] = int(value(m)) })
	if mfs["haproxy_server_status"] == nil {
		return nil, errors.New("no haproxy_server_status: not HAProxy's exporter")
	}
	var out []status.Backend
	for _, s := range inv.Servers {
		k := key{haproxy.BackendFor(s.Group), s.Name}
		b := status.Backend{Server: s.Name, Proxy: k.proxy, State: state[k], Check: check[k], Weight: weight[k]}
		if b.State == "UP" && b.Weight == 0 {
			b.State = "DRAIN"
		}
		if c := code[k]; c != 0 && b.Check != "" {
			b.Check += "/" + strconv.Itoa(c)
		}
		out = append(out, b)
	}
	return out, nil
}

// vrrpState reads repool_keepalived_state{state} (the state whose value is
// 1) from the node exporter's answer.
func vrrpState(body []byte) (string, error) {
	mfs, err := parse(body)
	if err != nil {
		return "", err
	}
	mf := mfs["repool_keepalived_state"]
	if mf == nil {
		return "", errors.New("no repool_keepalived_state: keepalived/notify.sh has not written its state file, or the textfile collector does not read it")
	}
	for _, m := range mf.GetMetric() {
		if value(m) == 1 {
			return label(m, "state"), nil
		}
	}
	return "", errors.New("repool_keepalived_state names no state")
}

// groups sorts the servers that answered into their groups' leaders,
// standbys and the rest.
func groups(inv *inventory.Inventory, servers []status.ServerEntry) []status.Group {
	var out []status.Group
	for _, name := range inv.Groups() {
		g := status.Group{Name: name, Standbys: []status.Standby{}, Down: []string{}}
		for _, e := range servers {
			if e.Group != name {
				continue
			}
			switch st := e.Status; {
			case st != nil && st.Role == status.RoleActive:
				g.Leaders = append(g.Leaders, e.Name)
				if g.Leader == "" || st.Epoch > g.Epoch {
					g.Leader, g.Epoch, g.LeaderSince = e.Name, st.Epoch, st.LeaderSince
				}
			case st != nil && st.Role == status.RoleStandby:
				g.Standbys = append(g.Standbys, status.Standby{Name: e.Name,
					Waiting: st.Election != nil && st.Election.State == status.ElectionWaiting})
			default:
				g.Down = append(g.Down, e.Name)
			}
		}
		if len(g.Leaders) < 2 {
			g.Leaders = nil
		}
		out = append(out, g)
	}
	return out
}

// database is the store as the active servers report it (any server's if
// none is active): not writable if an active server says so.
func database(servers []status.ServerEntry) *status.Database {
	var db *status.Database
	for _, e := range servers {
		st := e.Status
		if st == nil {
			continue
		}
		if db == nil {
			db = &status.Database{Kind: st.Store.Kind, Address: st.Store.Address, Writable: true}
		}
		if st.Role == status.RoleActive && !st.Store.Writable {
			db.Writable, db.Error = false, st.Name+": "+st.Store.Error
		}
	}
	return db
}

// warnings are what needs a look.
func warnings(c status.Cluster) []string {
	out := []string{}
	var holders []string
	for _, h := range c.LBHosts {
		if h.HoldsVIP {
			holders = append(holders, h.Name)
		}
		if !h.HAProxyUp {
			out = append(out, fmt.Sprintf("LB host %s: HAProxy does not answer (%s)", h.Name, h.HAProxyError))
		}
		if h.VRRPState == "" {
			out = append(out, fmt.Sprintf("LB host %s: Keepalived's state unknown (%s)", h.Name, h.VRRPError))
		} else if h.VRRPState == "FAULT" || h.VRRPState == "STOP" {
			out = append(out, fmt.Sprintf("LB host %s: Keepalived is %s: it cannot take the VIP", h.Name, h.VRRPState))
		}
	}
	switch {
	case len(holders) == 0 && len(c.LBHosts) > 0:
		out = append(out, "no LB host holds the VIP")
	case len(holders) > 1:
		out = append(out, "the VIP is held by "+strings.Join(holders, " and ")+": split brain")
	}
	for _, e := range c.Servers {
		if e.Status == nil {
			out = append(out, fmt.Sprintf("server %s: no status (%s)", e.Name, e.Error))
		} else if e.Status.Role == status.RoleActive && !e.Status.Serving {
			out = append(out, fmt.Sprintf("server %s: active but not serving: %s", e.Name, e.Status.Reason))
		}
	}
	if len(c.DBNodes) > 0 {
		var primaries []string
		for _, n := range c.DBNodes {
			switch {
			case n.Error != "":
				out = append(out, fmt.Sprintf("database node %s: %s", n.Name, n.Error))
			case n.State != "running":
				out = append(out, fmt.Sprintf("database node %s: PostgreSQL is %s", n.Name, n.State))
			case n.Role == "primary":
				primaries = append(primaries, n.Name)
			}
		}
		switch {
		case len(primaries) == 0:
			out = append(out, "the database tier has no running primary")
		case len(primaries) > 1:
			out = append(out, "the database tier has two primaries: "+strings.Join(primaries, " and "))
		}
	}
	for _, g := range c.Groups {
		switch {
		case g.Leader == "":
			out = append(out, fmt.Sprintf("group %s: no active server", g.Name))
		case len(g.Leaders) > 1:
			out = append(out, fmt.Sprintf("group %s: %s all say they are active", g.Name, strings.Join(g.Leaders, ", ")))
		}
		if len(g.Standbys) == 0 {
			out = append(out, fmt.Sprintf("group %s: no standby", g.Name))
		}
		for _, h := range c.LBHosts {
			for _, b := range h.Backends {
				if b.Server == g.Leader && h.HAProxyUp && b.State != "UP" {
					out = append(out, fmt.Sprintf("group %s: LB host %s's HAProxy sees the leader %s %s (%s)", g.Name, h.Name, b.Server, orDash(b.State), orDash(b.Check)))
				}
			}
		}
		if d := differ(c.Servers, g.Name, func(st *status.Server) string { return st.Build.Short() }); d != "" {
			out = append(out, fmt.Sprintf("group %s: versions differ: %s", g.Name, d))
		}
		if d := differ(c.Servers, g.Name, func(st *status.Server) string { return st.ConfigHash }); d != "" {
			out = append(out, fmt.Sprintf("group %s: configuration hashes differ: %s", g.Name, d))
		}
	}
	return out
}

// differ lists "server=value" of a group's servers that answered when the
// values are not all equal, and "" when they are.
func differ(servers []status.ServerEntry, group string, f func(*status.Server) string) string {
	var pairs, values []string
	for _, e := range servers {
		if e.Group == group && e.Status != nil {
			v := f(e.Status)
			pairs = append(pairs, e.Name+"="+v)
			values = append(values, v)
		}
	}
	slices.Sort(values)
	if len(slices.Compact(values)) < 2 {
		return ""
	}
	return strings.Join(pairs, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
