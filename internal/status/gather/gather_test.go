package gather

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/status"
)

const inv = `
vip: {address: 10.0.0.100/24, interface: eth0, router_id: 51}
lb_hosts:
  - {name: lb1, address: 10.0.0.11, priority: 250, state: BACKUP}
  - {name: lb2, address: 10.0.0.12, priority: 200, state: BACKUP}
servers:
  - {name: a, address: 10.0.0.21}
  - {name: b, address: 10.0.0.22}
  - {name: c, address: 10.0.0.23, group: solo}
`

func load(t *testing.T) *inventory.Inventory {
	t.Helper()
	i, err := inventory.Parse(strings.NewReader(inv))
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// TestBackends: each server's state in its group's backend, not in the
// control backends that track them; UP at weight 0 is DRAIN; the check's
// code follows its status.
func TestBackends(t *testing.T) {
	body := `# TYPE haproxy_server_status gauge
haproxy_server_status{proxy="repool",server="a",state="UP"} 1
haproxy_server_status{proxy="repool",server="a",state="DOWN"} 0
haproxy_server_status{proxy="repool",server="b",state="UP"} 1
haproxy_server_status{proxy="repool_solo",server="c",state="DOWN"} 1
haproxy_server_status{proxy="control_repool",server="a",state="MAINT"} 1
# TYPE haproxy_server_check_status gauge
haproxy_server_check_status{proxy="repool",server="a",state="L7OK"} 1
haproxy_server_check_status{proxy="repool",server="b",state="L7OK"} 1
haproxy_server_check_status{proxy="repool_solo",server="c",state="L4CON"} 1
# TYPE haproxy_server_check_code gauge
haproxy_server_check_code{proxy="repool",server="a"} 200
haproxy_server_check_code{proxy="repool",server="b"} 404
# TYPE haproxy_server_weight gauge
haproxy_server_weight{proxy="repool",server="a"} 1
haproxy_server_weight{proxy="repool",server="b"} 0
`
	got, err := backends([]byte(body), load(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []status.Backend{
		{Server: "a", Proxy: "repool", State: "UP", Check: "L7OK/200", Weight: 1},
		{Server: "b", Proxy: "repool", State: "DRAIN", Check: "L7OK/404"},
		{Server: "c", Proxy: "repool_solo", State: "DOWN", Check: "L4CON"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("backend %d = got %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := backends([]byte("up 1\n"), load(t)); err == nil || !strings.Contains(err.Error(), "not HAProxy's exporter") {
		t.Errorf("backends(not HAProxy) = got %v, want an error saying so", err)
	}
}

// TestWarnings: split brain, a group without leader, two leaders,
// differing configuration hashes and a leader an LB host does not see UP
// are each named.
func TestWarnings(t *testing.T) {
	i := load(t)
	srv := func(name, group, role, hash string, epoch uint32) status.ServerEntry {
		return status.ServerEntry{Name: name, Group: group, Status: &status.Server{Name: name, Role: role, Serving: role == status.RoleActive,
			Group: group, Epoch: epoch, ConfigHash: hash, Time: time.Unix(0, 0)}}
	}
	servers := []status.ServerEntry{
		srv("a", "default", status.RoleActive, "h1", 7),
		srv("b", "default", status.RoleActive, "h2", 6),
		srv("c", "solo", status.RoleStandby, "h1", 0),
	}
	c := status.Cluster{
		LBHosts: []status.LBHost{
			{Name: "lb1", VRRPState: "MASTER", HoldsVIP: true, HAProxyUp: true, Backends: []status.Backend{{Server: "a", State: "NOLB", Check: "L7OKC/404"}}},
			{Name: "lb2", VRRPState: "MASTER", HoldsVIP: true, HAProxyUp: true},
		},
		Servers: servers,
	}
	c.Groups = groups(i, servers)
	if g := c.Groups[0]; g.Leader != "a" || g.Epoch != 7 || len(g.Leaders) != 2 {
		t.Errorf("group default = got %+v, want leader a (the higher epoch) of two", g)
	}
	got := strings.Join(warnings(c), "\n")
	for _, want := range []string{
		"the VIP is held by lb1 and lb2: split brain",
		"group default: a, b all say they are active",
		"group default: no standby",
		"group default: LB host lb1's HAProxy sees the leader a NOLB (L7OKC/404)",
		"group default: configuration hashes differ: a=h1, b=h2",
		"group solo: no active server",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings = got\n%s\nwant %q", got, want)
		}
	}
}

// TestDBNodes: each database node's role, state and timeline as its
// Patroni answers GET /patroni (3.0 says "master" for the primary), a
// replica's lag behind the primary's WAL position, a node whose Patroni
// does not answer, and the warnings of a tier without one primary.
func TestDBNodes(t *testing.T) {
	answer := func(code int, body string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/patroni" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(code)
			io.WriteString(w, body)
		}))
		t.Cleanup(s.Close)
		return s
	}
	primary := answer(200, `{"state": "running", "role": "master", "timeline": 3, "xlog": {"location": 50331648}, "patroni": {"version": "3.0.2", "scope": "repool"}}`)
	replica := answer(200, `{"state": "running", "role": "replica", "timeline": 3, "xlog": {"received_location": 50331648, "replayed_location": 50327552, "paused": false}}`)
	stopped := answer(503, `{"state": "stopped", "role": "replica"}`)
	node := func(name string, s *httptest.Server) inventory.DBNode {
		u, _ := url.Parse(s.URL)
		port, _ := strconv.Atoi(u.Port())
		return inventory.DBNode{Name: name, Address: u.Hostname(), RESTPort: port}
	}
	cfg := Config{LB: http.DefaultClient, Timeout: 5 * time.Second}
	var nodes []status.DBNode
	var at []walPosition
	for _, n := range []inventory.DBNode{node("db1", primary), node("db2", replica), node("db3", stopped)} {
		got, pos := cfg.dbNode(context.Background(), n)
		nodes, at = append(nodes, got), append(at, pos)
	}
	lags(nodes, at)
	if n := nodes[0]; n.Role != "primary" || n.State != "running" || n.Timeline != 3 || n.LagBytes != nil {
		t.Errorf("db1 = %+v, want the running primary on timeline 3", n)
	}
	if n := nodes[1]; n.Role != "replica" || n.LagBytes == nil || *n.LagBytes != 4096 {
		t.Errorf("db2 = %+v, want a replica 4096 bytes behind", n)
	}
	if n := nodes[2]; n.Error == "" || n.Role != "" {
		t.Errorf("db3 = %+v, want the error of a Patroni that answered 503", n)
	}
	w := warnings(status.Cluster{DBNodes: nodes})
	if !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "database node db3") }) {
		t.Errorf("warnings = %q, want one for db3", w)
	}
	nodes[0].Role = "replica"
	if w := warnings(status.Cluster{DBNodes: nodes}); !slices.Contains(w, "the database tier has no running primary") {
		t.Errorf("warnings without a primary = %q, want it said", w)
	}
	var b strings.Builder
	if err := (status.Cluster{DBNodes: nodes}).WriteTable(&b); err != nil || !strings.Contains(b.String(), "DB NODE") || !strings.Contains(b.String(), "4096 B") {
		t.Errorf("WriteTable = %v:\n%s\nwant the DB NODE rows with db2's lag", err, b.String())
	}
}

// TestLBHostCutOff: a LB host whose monitor answers 503 is one whose
// HAProxy runs but fails its monitor (it sees no server and no other LB
// host): the status says so, where any other failure is shown as it is.
func TestLBHostCutOff(t *testing.T) {
	for _, tt := range []struct {
		code int
		want bool
	}{{http.StatusServiceUnavailable, true}, {http.StatusInternalServerError, false}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tt.code)
		}))
		u, _ := url.Parse(srv.URL)
		port, _ := strconv.Atoi(u.Port())
		cfg := Config{Inventory: load(t), LB: srv.Client(), Timeout: time.Second, NodeExporterPort: port}
		got := cfg.lbHost(context.Background(), inventory.LBHost{Name: "lb1", Address: u.Hostname(), MonitorPort: port})
		srv.Close()
		if got.HAProxyUp || !strings.HasPrefix(got.HAProxyError, "monitor URI: "+strconv.Itoa(tt.code)) || strings.Contains(got.HAProxyError, "cut off") != tt.want {
			t.Errorf("monitor answering %d: HAProxyUp %v, HAProxyError %q; want down, and 'cut off' said %v", tt.code, got.HAProxyUp, got.HAProxyError, tt.want)
		}
	}
}
