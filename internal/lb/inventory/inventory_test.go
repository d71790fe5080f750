package inventory

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// examplePath is the inventory checked in for operators to start from.
const examplePath = "../../../haproxy/inventory.yaml"

func TestLoadExample(t *testing.T) {
	inv, err := Load(examplePath)
	if err != nil {
		t.Fatalf("Load(%s) = got error %v, want nil", examplePath, err)
	}
	if got, want := len(inv.LBHosts), 2; got != want {
		t.Errorf("len(LBHosts) = got %d, want %d", got, want)
	}
	if got, want := len(inv.Servers), 3; got != want {
		t.Errorf("len(Servers) = got %d, want %d", got, want)
	}
	// Defaults fill what the example leaves out.
	lb2 := inv.LBHosts[1]
	if got, want := lb2.Interface, "eth0"; got != want {
		t.Errorf("lb2.Interface = got %q, want %q", got, want)
	}
	if got, want := lb2.StatsSocket, DefaultStatsSocket; got != want {
		t.Errorf("lb2.StatsSocket = got %q, want %q", got, want)
	}
	if got, want := lb2.NotifyLog, "/var/log/keepalived-repool-lb2.log"; got != want {
		t.Errorf("lb2.NotifyLog = got %q, want %q", got, want)
	}
	if got, want := lb2.StateMetrics, "/var/lib/prometheus/node-exporter/keepalived-repool-lb2.prom"; got != want {
		t.Errorf("lb2.StateMetrics = got %q, want %q", got, want)
	}
	if got, want := inv.Servers[2].HTTPPort, DefaultHTTPPort; got != want {
		t.Errorf("repool3.HTTPPort = got %d, want %d", got, want)
	}
	if got, want := inv.VIP.IP().String(), "10.0.0.100"; got != want {
		t.Errorf("VIP.IP() = got %s, want %s", got, want)
	}
}

func TestParseDefaults(t *testing.T) {
	inv, err := Parse(strings.NewReader(minimal))
	if err != nil {
		t.Fatalf("Parse(minimal) = got error %v, want nil", err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"vip.grpc_port", inv.VIP.GRPCPort, DefaultGRPCPort},
		{"lb_hosts[0].monitor_port", inv.LBHosts[0].MonitorPort, DefaultMonitorPort},
		{"servers[0].grpc_port", inv.Servers[0].GRPCPort, DefaultGRPCPort},
		{"checks.inter", inv.Checks.Inter, 100 * time.Millisecond},
		{"checks.fall", inv.Checks.Fall, 3},
		{"checks.rise", inv.Checks.Rise, 1},
		{"checks.agent_inter", inv.Checks.AgentInter, 25 * time.Millisecond},
		{"timeouts.connect", inv.Timeouts.Connect, 100 * time.Millisecond},
		{"timeouts.client", inv.Timeouts.Client, time.Hour},
		{"timeouts.server", inv.Timeouts.Server, time.Hour},
		{"timeouts.tunnel", inv.Timeouts.Tunnel, time.Hour},
		{"keepalived.track_interval", inv.Keepalived.TrackInterval, 1},
		{"keepalived.track_fall", inv.Keepalived.TrackFall, 1},
		{"keepalived.track_rise", inv.Keepalived.TrackRise, 2},
		{"keepalived.vrrp_version", inv.Keepalived.VRRPVersion, 3},
		{"keepalived.advert_interval", inv.Keepalived.AdvertInterval, 0.4},
		{"keepalived.check_program", inv.Keepalived.CheckProgram, "/usr/local/bin/repool-server"},
		{"keepalived.notify_script", inv.Keepalived.NotifyScript, DefaultNotifyScript},
		{"keepalived.script_user", inv.Keepalived.ScriptUser, "root"},
		{"servers[0].group", inv.Servers[0].Group, DefaultGroup},
		{"haproxy.tenant_map", inv.HAProxy.TenantMap, DefaultTenantMap},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// minimal is the smallest valid inventory.
const minimal = `
vip: {address: 192.0.2.100/24, interface: eth0, router_id: 7}
lb_hosts:
  - {name: a, address: 192.0.2.1, priority: 150, state: BACKUP}
  - {name: b, address: 192.0.2.2, priority: 100, state: BACKUP}
servers:
  - {name: s1, address: 192.0.2.10}
`

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // substring of the error
	}{
		{"empty", "", "empty document"},
		{"unknown key", minimal + "extra: 1\n", `unknown key "extra"`},
		{"bad duration", minimal + "checks: {inter: fast}\n", "fast"},
		{"invalid after defaults", strings.Replace(minimal, "router_id: 7", "router_id: 0", 1), "vip.router_id"},
		{"syntax error on line 2", "vip: {}\n- lb_hosts\n", "yaml: line 2: did not find expected key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.yaml))
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse() = got error %v, want one wrapping ErrInvalid that contains %q", err, tt.want)
			}
		})
	}
}

// validateCase changes a valid inventory; Validate must then name field.
type validateCase struct {
	name   string
	change func(*Inventory)
	field  string // the error must name it
}

// validateCases are the changes TestValidate makes to minimal (and
// FuzzParse starts from).
func validateCases() []validateCase {
	return []validateCase{
		{"valid", func(*Inventory) {}, ""},
		{"vip missing", func(i *Inventory) { i.VIP.Address = "" }, "vip.address"},
		{"vip without prefix", func(i *Inventory) { i.VIP.Address = "192.0.2.100" }, "vip.address"},
		{"vip IPv6", func(i *Inventory) { i.VIP.Address = "2001:db8::1/64" }, "vip.address"},
		{"vip interface", func(i *Inventory) { i.VIP.Interface = "eth 0" }, "vip.interface"},
		{"router id", func(i *Inventory) { i.VIP.RouterID = 256 }, "vip.router_id"},
		{"auth pass with VRRPv3", func(i *Inventory) { i.VIP.AuthPass = "secret" }, "vip.auth_pass"},
		{"VRRPv2", func(i *Inventory) { vrrp2(i, "secret") }, ""},
		{"auth pass missing with VRRPv2", func(i *Inventory) { vrrp2(i, "") }, "vip.auth_pass"},
		{"auth pass too long", func(i *Inventory) { vrrp2(i, "123456789") }, "vip.auth_pass"},
		{"auth pass quote", func(i *Inventory) { vrrp2(i, `a"b`) }, "vip.auth_pass"},
		{"VRRPv2 fractional advert", func(i *Inventory) { vrrp2(i, "secret"); i.Keepalived.AdvertInterval = 0.5 }, "keepalived.advert_interval"},
		{"VRRPv2 advert too long", func(i *Inventory) { vrrp2(i, "secret"); i.Keepalived.AdvertInterval = 256 }, "keepalived.advert_interval"},
		{"VRRP version", func(i *Inventory) { i.Keepalived.VRRPVersion = 4 }, "keepalived.vrrp_version"},
		{"VRRPv3 advert in thousandths", func(i *Inventory) { i.Keepalived.AdvertInterval = 0.255 }, "keepalived.advert_interval"},
		{"VRRPv3 advert too long", func(i *Inventory) { i.Keepalived.AdvertInterval = 41 }, "keepalived.advert_interval"},
		{"VRRPv3 advert negative", func(i *Inventory) { i.Keepalived.AdvertInterval = -0.4 }, "keepalived.advert_interval"},
		{"check program relative", func(i *Inventory) { i.Keepalived.CheckProgram = "repool-server" }, "keepalived.check_program"},
		{"grpc port", func(i *Inventory) { i.VIP.GRPCPort = 70000 }, "vip.grpc_port"},
		{"one host", func(i *Inventory) { i.LBHosts = i.LBHosts[:1] }, "lb_hosts"},
		{"host name", func(i *Inventory) { i.LBHosts[1].Name = "LB 2" }, "lb_hosts[1].name"},
		{"host name dup", func(i *Inventory) { i.LBHosts[1].Name = "a" }, "lb_hosts[1].name"},
		{"host address", func(i *Inventory) { i.LBHosts[0].Address = "lb1.example" }, "lb_hosts[0].address"},
		{"host address is vip", func(i *Inventory) { i.LBHosts[1].Address = "192.0.2.100" }, "lb_hosts[1].address"},
		{"host address dup", func(i *Inventory) { i.LBHosts[1].Address = "192.0.2.1" }, "lb_hosts[1].address"},
		{"priority 255", func(i *Inventory) { i.LBHosts[0].Priority = 255 }, "lb_hosts[0].priority"},
		{"priority dup", func(i *Inventory) { i.LBHosts[1].Priority = 150 }, "lb_hosts[1].priority"},
		{"preempt with one master", func(i *Inventory) { i.Keepalived.Preempt, i.LBHosts[0].State = true, StateMaster }, ""},
		{"master not highest", func(i *Inventory) {
			i.Keepalived.Preempt, i.LBHosts[0].State, i.LBHosts[1].Priority = true, StateMaster, 200
		}, "lb_hosts[0].priority"},
		{"state", func(i *Inventory) { i.LBHosts[1].State = "backup" }, "lb_hosts[1].state"},
		{"master with nopreempt", func(i *Inventory) { i.LBHosts[0].State = StateMaster }, "lb_hosts"},
		{"preempt without a master", func(i *Inventory) { i.Keepalived.Preempt = true }, "lb_hosts"},
		{"two masters", func(i *Inventory) {
			i.Keepalived.Preempt, i.LBHosts[0].State, i.LBHosts[1].State = true, StateMaster, StateMaster
		}, "lb_hosts"},
		{"haproxy user", func(i *Inventory) { i.HAProxy.User = "ha proxy" }, "haproxy.user"},
		{"frontend maxconn above global", func(i *Inventory) { i.HAProxy.FrontendMaxConn = i.HAProxy.MaxConn + 1 }, "haproxy.frontend_maxconn"},
		{"timeout check", func(i *Inventory) { i.Timeouts.Check = time.Microsecond }, "timeouts.check"},
		{"tls", func(i *Inventory) {
			i.TLS = TLS{Cert: "/etc/haproxy/tls/vip.pem", ServerCA: "/etc/haproxy/tls/ca.crt", ServerName: "repool.internal"}
		}, ""},
		{"tls without cert", func(i *Inventory) { i.TLS.ServerCA = "/etc/haproxy/tls/ca.crt" }, "tls.cert"},
		{"tls without server ca", func(i *Inventory) { i.TLS = TLS{Cert: "/etc/haproxy/tls/vip.pem", ServerName: "repool.internal"} }, "tls.server_ca"},
		{"tls without server name", func(i *Inventory) { i.TLS = TLS{Cert: "/etc/haproxy/tls/vip.pem", ServerCA: "/etc/haproxy/tls/ca.crt"} }, "tls.server_name"},
		{"stats socket relative", func(i *Inventory) { i.LBHosts[0].StatsSocket = "admin.sock" }, "lb_hosts[0].stats_socket"},
		{"monitor port is grpc port", func(i *Inventory) { i.LBHosts[0].MonitorPort = 9090 }, "lb_hosts[0].monitor_port"},
		{"notify log with space", func(i *Inventory) { i.LBHosts[1].NotifyLog = "/var/log/a b" }, "lb_hosts[1].notify_log"},
		{"state metrics not absolute", func(i *Inventory) { i.LBHosts[0].StateMetrics = "keepalived.prom" }, "lb_hosts[0].state_metrics"},
		{"no servers", func(i *Inventory) { i.Servers = nil }, "servers"},
		{"server name upper", func(i *Inventory) { i.Servers[0].Name = "S1" }, "servers[0].name"},
		{"server address", func(i *Inventory) { i.Servers[0].Address = "0.0.0.0" }, "servers[0].address"},
		{"server http port", func(i *Inventory) { i.Servers[0].HTTPPort = -1 }, "servers[0].http_port"},
		{"server same ports", func(i *Inventory) { i.Servers[0].HTTPPort = i.Servers[0].GRPCPort }, "servers[0].http_port"},
		{"server endpoint dup", func(i *Inventory) {
			i.Servers = append(i.Servers, Server{Name: "s2", Address: "192.0.2.10", GRPCPort: 9090, HTTPPort: 9091})
		}, "servers[1].grpc_port"},
		{"inter sub-millisecond", func(i *Inventory) { i.Checks.Inter = 1500 * time.Microsecond }, "checks.inter"},
		{"agent inter sub-millisecond", func(i *Inventory) { i.Checks.AgentInter = 500 * time.Microsecond }, "checks.agent_inter"},
		{"fall", func(i *Inventory) { i.Checks.Fall = -1 }, "checks.fall"},
		{"timeout client", func(i *Inventory) { i.Timeouts.Client = -time.Second }, "timeouts.client"},
		{"track interval", func(i *Inventory) { i.Keepalived.TrackInterval = -1 }, "keepalived.track_interval"},
		{"advert interval", func(i *Inventory) { i.Keepalived.AdvertInterval = 256 }, "keepalived.advert_interval"},
		{"notify script", func(i *Inventory) { i.Keepalived.NotifyScript = "/etc/../notify.sh" }, "keepalived.notify_script"},
		{"script user", func(i *Inventory) { i.Keepalived.ScriptUser = "root; rm" }, "keepalived.script_user"},
		{"two groups", func(i *Inventory) {
			i.Servers = append(i.Servers, Server{Name: "s2", Address: "192.0.2.11", GRPCPort: 9090, HTTPPort: 8081, Group: "big-1"})
		}, ""},
		{"group upper", func(i *Inventory) { i.Servers[0].Group = "Default" }, "servers[0].group"},
		{"group leading digit", func(i *Inventory) { i.Servers[0].Group = "1a" }, "servers[0].group"},
		{"group underscore", func(i *Inventory) { i.Servers[0].Group = "a_b" }, "servers[0].group"},
		{"group too long", func(i *Inventory) { i.Servers[0].Group = "a" + strings.Repeat("b", 31) }, "servers[0].group"},
		{"group empty after defaults", func(i *Inventory) { i.Servers[0].Group = "" }, "servers[0].group"},
		{"no server in the default group", func(i *Inventory) { i.Servers[0].Group = "big" }, "servers"},
		{"tenant map relative", func(i *Inventory) { i.HAProxy.TenantMap = "tenants.map" }, "haproxy.tenant_map"},
		{"tenant map with space", func(i *Inventory) { i.HAProxy.TenantMap = "/etc/haproxy/a b.map" }, "haproxy.tenant_map"},
		{"tenant map not clean", func(i *Inventory) { i.HAProxy.TenantMap = "/etc/haproxy/../a.map" }, "haproxy.tenant_map"},
		{"database", func(i *Inventory) { i.Database = testDatabase() }, ""},
		{"database port is grpc port", func(i *Inventory) { i.Database = testDatabase(); i.Database.Port = 9090 }, "database.port"},
		{"database port is control port", func(i *Inventory) { i.Database = testDatabase(); i.Database.Port = 8081 }, "database.port"},
		{"database port is monitor port", func(i *Inventory) { i.Database = testDatabase(); i.Database.Port = 8404 }, "database.port"},
		{"database one node", func(i *Inventory) { i.Database = testDatabase(); i.Database.Nodes = i.Database.Nodes[:1] }, "database.nodes"},
		{"database node name dup", func(i *Inventory) { i.Database = testDatabase(); i.Database.Nodes[1].Name = "pg1" }, "database.nodes[1].name"},
		{"database node address", func(i *Inventory) { i.Database = testDatabase(); i.Database.Nodes[0].Address = "pg1.example" }, "database.nodes[0].address"},
		{"database node rest port", func(i *Inventory) { i.Database = testDatabase(); i.Database.Nodes[2].RESTPort = 0 }, "database.nodes[2].rest_port"},
		{"database node same ports", func(i *Inventory) {
			i.Database = testDatabase()
			i.Database.Nodes[0].RESTPort = i.Database.Nodes[0].Port
		}, "database.nodes[0].rest_port"},
		{"database nodes on one host", func(i *Inventory) {
			i.Database = testDatabase()
			i.Database.Nodes[1].Address = i.Database.Nodes[0].Address
		}, "database.nodes[1].port"},
		{"database check inter", func(i *Inventory) { i.Database = testDatabase(); i.Database.Checks.Inter = 0 }, "database.checks.inter"},
		{"database agent inter", func(i *Inventory) { i.Database = testDatabase(); i.Database.Checks.AgentInter = time.Second }, "database.checks.agent_inter"},
	}
}

// testDatabase is a valid database section with defaults applied.
func testDatabase() *Database {
	db := &Database{Port: DefaultDBPort, Checks: Checks{Inter: DefaultDBCheckInter, Fall: DefaultDBCheckFall, Rise: DefaultDBCheckRise}}
	for i, a := range []string{"192.0.2.31", "192.0.2.32", "192.0.2.33"} {
		db.Nodes = append(db.Nodes, DBNode{Name: fmt.Sprintf("pg%d", i+1), Address: a, Port: DefaultDBPort, RESTPort: DefaultDBRESTPort})
	}
	return db
}

// TestParseDatabaseDefaults: a database section that names only its
// nodes' names and addresses gets the documented ports and check timings.
func TestParseDatabaseDefaults(t *testing.T) {
	inv, err := Parse(strings.NewReader(minimal + `
database:
  nodes:
    - {name: pg1, address: 192.0.2.31}
    - {name: pg2, address: 192.0.2.32}
`))
	if err != nil {
		t.Fatalf("Parse(minimal + database) = got error %v, want nil", err)
	}
	db := inv.Database
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"database.port", db.Port, 5432},
		{"database.nodes[1].port", db.Nodes[1].Port, 5432},
		{"database.nodes[1].rest_port", db.Nodes[1].RESTPort, 8008},
		{"database.checks.inter", db.Checks.Inter, 250 * time.Millisecond},
		{"database.checks.fall", db.Checks.Fall, 2},
		{"database.checks.rise", db.Checks.Rise, 1},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if inv, err := Parse(strings.NewReader(minimal)); err != nil || inv.Database != nil {
		t.Errorf("Parse(minimal).Database = got %v (error %v), want nil: the section is optional", inv.Database, err)
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range validateCases() {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := Parse(strings.NewReader(minimal))
			if err != nil {
				t.Fatalf("Parse(minimal) = got error %v, want nil", err)
			}
			tt.change(inv)
			err = inv.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = got error %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), ": "+tt.field+": ") {
				t.Fatalf("Validate() = got error %v, want one wrapping ErrInvalid that names %s", err, tt.field)
			}
		})
	}
}

func TestGroups(t *testing.T) {
	inv, err := Parse(strings.NewReader(minimal + `  - {name: s2, address: 192.0.2.11, group: zeta}
  - {name: s3, address: 192.0.2.12, group: alpha}
  - {name: s4, address: 192.0.2.13, group: zeta}
`))
	if err != nil {
		t.Fatalf("Parse(three groups) = got error %v, want nil", err)
	}
	if got, want := inv.Groups(), []string{"default", "alpha", "zeta"}; !slices.Equal(got, want) {
		t.Errorf("Groups() = got %q, want %q (default first, then sorted)", got, want)
	}
}

func TestHost(t *testing.T) {
	inv, err := Parse(strings.NewReader(minimal))
	if err != nil {
		t.Fatalf("Parse(minimal) = got error %v, want nil", err)
	}
	h, err := inv.Host("b")
	if err != nil || h.Address != "192.0.2.2" {
		t.Errorf("Host(b) = got %+v, %v, want address 192.0.2.2", h, err)
	}
	if _, err := inv.Host("c"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Host(c) = got error %v, want ErrInvalid", err)
	}
}

// vrrp2 switches i to VRRPv2 with whole-second adverts and pass.
func vrrp2(i *Inventory, pass string) {
	i.Keepalived.VRRPVersion, i.Keepalived.AdvertInterval, i.VIP.AuthPass = 2, 1, pass
}

// TestVRRPv2Defaults: with vrrp_version 2 and no advert_interval the
// adverts are a second apart, the only interval VRRPv2's default can be.
func TestVRRPv2Defaults(t *testing.T) {
	inv, err := Parse(strings.NewReader(strings.Replace(minimal, "router_id: 7}", "router_id: 7, auth_pass: secret}", 1) + "keepalived: {vrrp_version: 2}\n"))
	if err != nil {
		t.Fatalf("Parse(minimal with VRRPv2) = got error %v, want nil", err)
	}
	if inv.Keepalived.AdvertInterval != 1 {
		t.Errorf("keepalived.advert_interval with VRRPv2 = %v, want 1", inv.Keepalived.AdvertInterval)
	}
}
