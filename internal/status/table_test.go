package status

import (
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

// cluster is a deployment of two LB hosts and three servers: repool1
// active, repool2 a standby waiting on the lock, repool3 down.
func cluster() Cluster {
	now := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	build := Build{Version: "v1.2.3", Revision: "0123456789abcdef", GoVersion: "go1.26.8"}
	active := &Server{Name: "repool1", Time: now, Role: RoleActive, Serving: true, Reason: "active", HA: true, Group: "default",
		Epoch: 486790, LeaderSince: ptr(now.Add(-5*time.Minute - 12*time.Second)),
		Election: &Election{State: ElectionLeader}, Build: build, ConfigHash: "3fa2c1d09e11",
		Store:   Store{Kind: "postgres", Address: "postgres://repool:xxxxx@10.0.0.31:5432/repool", Writable: true},
		Tenants: 12, LastCheckpoint: ptr(now.Add(-850 * time.Millisecond))}
	standby := &Server{Name: "repool2", Time: now, Role: RoleStandby, Reason: "standby", HA: true, Group: "default",
		Election: &Election{State: ElectionWaiting}, Build: build, ConfigHash: "3fa2c1d09e11",
		Store: Store{Kind: "postgres", Address: "postgres://repool:xxxxx@10.0.0.31:5432/repool", Writable: true}}
	backends := []Backend{
		{Server: "repool1", Proxy: "repool", State: "UP", Check: "L7OK/200", Weight: 100},
		{Server: "repool2", Proxy: "repool", State: "NOLB", Check: "L7OKC/404"},
		{Server: "repool3", Proxy: "repool", State: "DOWN", Check: "L4CON"},
	}
	return Cluster{
		Time: now, VIP: "10.0.0.100/24",
		LBHosts: []LBHost{
			{Name: "lb1", Address: "10.0.0.11", VRRPState: "MASTER", HoldsVIP: true, HAProxyUp: true, Backends: backends},
			{Name: "lb2", Address: "10.0.0.12", VRRPState: "BACKUP", HAProxyUp: true, Backends: backends},
		},
		Servers: []ServerEntry{
			{Name: "repool1", Group: "default", Status: active},
			{Name: "repool2", Group: "default", Status: standby},
			{Name: "repool3", Group: "default", Error: "dial tcp 10.0.0.23:8081: connect: connection refused"},
		},
		Groups: []Group{{Name: "default", Leader: "repool1", Epoch: 486790, LeaderSince: active.LeaderSince,
			Standbys: []Standby{{Name: "repool2", Waiting: true}}, Down: []string{"repool3"}}},
		Database: &Database{Kind: "postgres", Address: "postgres://repool:xxxxx@10.0.0.31:5432/repool", Writable: true},
		Warnings: []string{"server repool3: no status (dial tcp 10.0.0.23:8081: connect: connection refused)"},
	}
}

// TestWriteTable: the whole table of a healthy group with one server down.
func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := cluster().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := `LB HOST  ADDRESS    VRRP    VIP 10.0.0.100/24  HAPROXY
lb1      10.0.0.11  MASTER  held               up
lb2      10.0.0.12  BACKUP  -                  up

SERVER   GROUP    ROLE     EPOCH   LEADER SINCE  LOCK     LB1             LB2             VERSION                CONFIG        CHECKPOINT  TENANTS
repool1  default  active   486790  5m12s         held     UP L7OK/200     UP L7OK/200     v1.2.3 (0123456789ab)  3fa2c1d09e11  850ms       12
repool2  default  standby  -       -             waiting  NOLB L7OKC/404  NOLB L7OKC/404  v1.2.3 (0123456789ab)  3fa2c1d09e11  -           0
repool3  default  ?        -       -             -        DOWN L4CON      DOWN L4CON      -                      -             -           -

GROUP    LEADER   EPOCH   SINCE                 STANDBYS
default  repool1  486790  2026-12-05T03:54:48Z  repool2 (waiting on the lock), repool3 (down)

DATABASE  postgres postgres://repool:xxxxx@10.0.0.31:5432/repool, writable

WARNINGS
  - server repool3: no status (dial tcp 10.0.0.23:8081: connect: connection refused)

(as of 2026-12-05T04:00:00Z)
`
	if got := b.String(); got != want {
		t.Errorf("WriteTable = got\n%s\nwant\n%s", got, want)
	}
}

// TestWriteTableFaults: an LB host whose HAProxy and Keepalived do not
// answer shows "?" for what it would see; an active server whose store
// refuses writes says why in its role; two servers active in one group are
// both named leader; a group without one says none.
func TestWriteTableFaults(t *testing.T) {
	c := cluster()
	c.LBHosts[1] = LBHost{Name: "lb2", Address: "10.0.0.12", HAProxyError: "monitor URI: connection refused", VRRPError: "node exporter: connection refused"}
	c.Servers[0].Status.Serving, c.Servers[0].Status.Reason = false, "store not writable: disk full"
	c.Groups = append(c.Groups, Group{Name: "solo", Standbys: []Standby{}, Down: []string{}})
	c.Groups[0].Leaders = []string{"repool1", "repool2"}
	var b strings.Builder
	if err := c.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"lb2      10.0.0.12  ?       -                  DOWN\n",
		"repool1  default  active (store not writable: disk full)  486790",
		"UP L7OK/200     ?   ",
		"default  repool1+repool2  486790",
		"solo     none             -       -                     none\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("WriteTable = got\n%s\nwant it to hold %q", b.String(), want)
		}
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 850 * time.Millisecond: "850ms", 42 * time.Second: "42s", 5*time.Minute + 12*time.Second: "5m12s",
		3*time.Hour + 4*time.Minute: "3h04m", 51 * time.Hour: "2d03h",
	} {
		if got := Ago(now, now.Add(-d)); got != want {
			t.Errorf("Ago(%v) = got %q, want %q", d, got, want)
		}
	}
}
