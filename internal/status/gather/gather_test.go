package gather

import (
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/lb/inventory"
	"github.com/repool/repool/internal/status"
)

const inv = `
vip: {address: 10.0.0.100/24, interface: eth0, router_id: 51, auth_pass: x}
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
