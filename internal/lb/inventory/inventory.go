// Package inventory describes the HAProxy + Keepalived front end of a repool
// cluster: the virtual IP, the load-balancer hosts that pass it
// between them with VRRP, the repool servers behind HAProxy, the
// Patroni-managed PostgreSQL nodes HAProxy sends the servers' database
// connections to (optional), and the timings of HAProxy's health checks and
// of Keepalived's track script.
//
// The HAProxy and Keepalived renderers (packages haproxy and keepalived) read
// the same Inventory, so the two configurations cannot disagree on an address
// or a port. Load and Parse return an Inventory with defaults applied (in one
// place, setDefaults) and validated; Validate names the bad field.
//
// Only IPv4 is supported: VRRP authentication (auth_type PASS) exists only in
// VRRPv2, and VRRPv2 carries IPv4 only.
//
// An Inventory is a plain value, safe for concurrent reads; nothing in this
// package holds resources.
package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/defaults"
	"github.com/repool/repool/internal/yamlerr"
)

// ErrInvalid is wrapped by every error of Validate, Parse and Load that is
// about the inventory's content (not about reading the file).
var ErrInvalid = errors.New("invalid inventory")

// Defaults for the fields that may be left out. See each field for its meaning.
const (
	DefaultGRPCPort       = 9090 // VIP.GRPCPort and Server.GRPCPort
	DefaultControlPort    = 8081 // VIP.ControlPort
	DefaultHTTPPort       = 8081 // Server.HTTPPort
	DefaultStatsSocket    = "/run/haproxy/admin.sock"
	DefaultMonitorPort    = 8404
	DefaultNotifyScript   = "/etc/keepalived/notify.sh"
	DefaultScriptUser     = "root"
	DefaultCheckInter     = 100 * time.Millisecond
	DefaultCheckFall      = 3 // a slow check on a starved host is not a dead server; a refused connection marks it DOWN at once (observe layer4)
	DefaultCheckRise      = 1
	DefaultAgentInter     = 25 * time.Millisecond  // Checks.AgentInter: a stopping server is DOWN within it
	DefaultConnectTimeout = 100 * time.Millisecond // HAProxy retries a refused connect only after min(connect, 1s): keep failover short
	DefaultClientTimeout  = time.Hour
	DefaultServerTimeout  = time.Hour
	DefaultTunnelTimeout  = time.Hour
	DefaultRequestTimeout = 10 * time.Second
	DefaultTrackInterval  = 1 // seconds
	DefaultTrackFall      = 1
	DefaultTrackRise      = 2
	DefaultVRRPVersion    = 3
	DefaultAdvertInterval = 0.4 // seconds, VRRPv3 (VRRPv2: 1)
	DefaultCheckProgram   = "/usr/local/bin/repool-server"
	DefaultCheckTimeout   = time.Second
	DefaultHAProxyUser    = "haproxy"
	DefaultMaxConn        = 20000 // HAProxy's global maxconn
	DefaultFrontendConn   = 10000 // the gRPC frontend's maxconn
	DefaultGroup          = "default"
	DefaultTenantMap      = "/etc/haproxy/repool-tenants.map"
	DefaultDBPort         = 5432                   // Database.Port and DBNode.Port
	DefaultDBRESTPort     = 8008                   // DBNode.RESTPort: Patroni's REST API
	DefaultDBCheckInter   = 250 * time.Millisecond // Database.Checks.Inter
	DefaultDBCheckFall    = 2                      // Database.Checks.Fall
	DefaultDBCheckRise    = 1                      // Database.Checks.Rise
)

// DBPrimaryURI is the path of Patroni's REST API that HAProxy checks on
// each database node: 200 on the node that runs the primary and holds the
// leader key, 503 on every other.
const DBPrimaryURI = "/primary"

// DefaultTextfileDir is the directory whose *.prom files Debian's
// prometheus-node-exporter serves (its textfile collector).
const DefaultTextfileDir = "/var/lib/prometheus/node-exporter"

// MonitorURI is the path of HAProxy's monitor frontend that Keepalived's
// track script checks: the contract between the two renderers.
const MonitorURI = "/lb-health"

// VRRP states of an LB host.
const (
	StateMaster = "MASTER"
	StateBackup = "BACKUP"
)

// Inventory is the whole front end: one VIP, its LB hosts and the servers
// behind them.
type Inventory struct {
	VIP        VIP        `yaml:"vip"`
	LBHosts    []LBHost   `yaml:"lb_hosts"`
	Servers    []Server   `yaml:"servers"`
	Checks     Checks     `yaml:"checks"`
	Timeouts   Timeouts   `yaml:"timeouts"`
	Keepalived Keepalived `yaml:"keepalived"`
	HAProxy    HAProxy    `yaml:"haproxy"`
	TLS        TLS        `yaml:"tls"`
	// Database is the PostgreSQL tier; nil (the section left out) renders
	// no database frontend.
	Database *Database `yaml:"database"`
}

// Database is the PostgreSQL tier under Patroni: HAProxy listens on the
// VIP's Port (TCP: the servers' TLS to PostgreSQL passes through
// untouched) and sends each connection to the one node whose Patroni
// answers 200 on DBPrimaryURI. A node marked down has its connections
// cut (on-marked-down shutdown-sessions), so no server keeps talking to
// a demoted primary. docs/ha.md, "The database tier".
type Database struct {
	// Port is HAProxy's PostgreSQL frontend on the VIP, the port in the
	// servers' --store. Default 5432.
	Port int `yaml:"port"`
	// Nodes are the PostgreSQL nodes, each with its Patroni. At least 2.
	Nodes []DBNode `yaml:"nodes"`
	// Checks time HAProxy's checks of Patroni's REST API. Defaults inter
	// 250ms (a newly promoted primary takes connections within 250 ms, for
	// 4 requests a second to each Patroni from each LB host), fall 2 (one
	// slow answer of Patroni's REST API must not cut every session of the
	// primary), rise 1.
	Checks Checks `yaml:"checks"`
}

// DBNode is one PostgreSQL node managed by Patroni.
type DBNode struct {
	// Name is the node's HAProxy server name (Patroni's name for it, by
	// convention): lowercase letters, digits, '-' and '_'. Required,
	// unique among the nodes.
	Name string `yaml:"name"`
	// Address is the node's IPv4 address. Required.
	Address string `yaml:"address"`
	// Port is PostgreSQL's port on the node. Default 5432.
	Port int `yaml:"port"`
	// RESTPort is Patroni's REST API port on the node (restapi.listen),
	// where HAProxy checks GET /primary over HTTP. Default 8008.
	RESTPort int `yaml:"rest_port"`
}

// HAProxy is how HAProxy runs: as its own user and group (it starts as
// root to bind and read its certificates, then drops to them), and with
// bounded connections.
type HAProxy struct {
	// User and Group HAProxy runs as. Default haproxy (Debian's package
	// creates both).
	User  string `yaml:"user"`
	Group string `yaml:"group"`
	// MaxConn is the global maxconn: connections HAProxy holds at once,
	// both sides counted. Default 20000.
	MaxConn int `yaml:"maxconn"`
	// FrontendMaxConn is the gRPC frontend's maxconn: client connections
	// accepted at once on the VIP (more wait in the kernel's backlog). At
	// most MaxConn. Default 10000.
	FrontendMaxConn int `yaml:"frontend_maxconn"`
	// TenantMap is the map file (tenant id -> group backend) the gRPC
	// frontend routes by when the servers form more than one group; the
	// placement sync keeps it current. Absolute. Default
	// /etc/haproxy/repool-tenants.map. Unused with one group.
	TenantMap string `yaml:"tenant_map"`
}

// TLS is TLS through HAProxy: terminated on the VIP and re-encrypted to
// the servers (docs/ha.md says why). Cert turns it on; the other paths
// are then required except ClientCA and ClientCert.
type TLS struct {
	// Cert is the VIP's certificate chain and key in one PEM file (as
	// HAProxy's crt reads it). Its names are what sidecars verify.
	Cert string `yaml:"cert"`
	// ClientCA, when set, requires clients (sidecars) to present a
	// certificate signed by it on the VIP (mutual TLS).
	ClientCA string `yaml:"client_ca"`
	// ServerCA is the CA (PEM) the servers' certificates are verified
	// with, on calls and on health checks.
	ServerCA string `yaml:"server_ca"`
	// ServerName is the name every server's certificate must hold (sent
	// as SNI and verified).
	ServerName string `yaml:"server_name"`
	// ClientCert is HAProxy's own certificate and key (one PEM file) for
	// servers that require client certificates (--tls-client-ca).
	ClientCert string `yaml:"client_cert"`
}

// On reports whether TLS is on.
func (t TLS) On() bool { return t.Cert != "" }

// VIP is the virtual IP clients and sidecars dial; Keepalived holds it on
// exactly one LB host at a time.
type VIP struct {
	// Address is the VIP with its prefix length, e.g. "10.0.0.100/24".
	// Required, IPv4.
	Address string `yaml:"address"`
	// Interface carries the VIP on every LB host whose own Interface is
	// empty. Required.
	Interface string `yaml:"interface"`
	// RouterID is the VRRP virtual_router_id, 1..255, the same on all LB
	// hosts and unique on their network. Required.
	RouterID int `yaml:"router_id"`
	// AuthPass is the VRRP PASS authentication password, 1..8 printable
	// characters without spaces or quotes (VRRPv2 uses only the first 8, so
	// longer ones are refused rather than silently cut). Required with
	// keepalived.vrrp_version 2; refused with 3, which has no
	// authentication.
	AuthPass string `yaml:"auth_pass"`
	// GRPCPort is the port of HAProxy's gRPC frontend on the VIP (TLS
	// with the tls section, h2c without).
	// Default 9090.
	GRPCPort int `yaml:"grpc_port"`
	// ControlPort is the port of HAProxy's control-plane frontend on the
	// VIP (HTTP/1.1; TLS with the tls section): /api/v1/ requests go to
	// the active server of the group of the tenant the path names (the
	// default group's for the others). Default 8081.
	ControlPort int `yaml:"control_port"`
}

// IP returns the VIP without its prefix length. It is meaningful only on a
// validated inventory (the zero netip.Addr otherwise).
func (v VIP) IP() netip.Addr {
	p, _ := netip.ParsePrefix(v.Address)
	return p.Addr()
}

// LBHost is one host running HAProxy and Keepalived.
type LBHost struct {
	// Name identifies the host (keepalived router_id, --host flags):
	// lowercase letters, digits, '-' and '_'. Required, unique.
	Name string `yaml:"name"`
	// Address is the host's own IPv4 address: Keepalived's unicast source
	// and its peers' unicast_peer, and where its track script reaches
	// HAProxy's monitor frontend. Required, unique.
	Address string `yaml:"address"`
	// Interface is the interface VRRP runs on and the VIP is added to.
	// Default VIP.Interface.
	Interface string `yaml:"interface"`
	// Priority is the VRRP priority, 1..254, unique; the MASTER's must be the
	// highest. The backup's priority sets how fast it takes over when the
	// master gives up the VIP: after (256-priority)/256 advert intervals.
	// Required.
	Priority int `yaml:"priority"`
	// State is the initial VRRP state: BACKUP on every host with
	// nopreempt (the default); with keepalived.preempt, MASTER on exactly
	// one host (the highest priority) and BACKUP on the others. Required.
	State string `yaml:"state"`
	// StatsSocket is the path of this host's HAProxy runtime API socket
	// (stats socket, level admin). Absolute. Default /run/haproxy/admin.sock.
	StatsSocket string `yaml:"stats_socket"`
	// MonitorPort is the port of HAProxy's monitor frontend (monitor-uri
	// /lb-health) that Keepalived's track script checks. It must differ from
	// VIP.GRPCPort. Default 8404.
	MonitorPort int `yaml:"monitor_port"`
	// NotifyLog is the file keepalived/notify.sh appends VRRP transitions
	// to. Absolute. Default /var/log/keepalived-repool-<name>.log.
	NotifyLog string `yaml:"notify_log"`
	// StateMetrics is the file keepalived/notify.sh rewrites at every VRRP
	// transition with this host's state as Prometheus metrics
	// (repool_keepalived_master, repool_keepalived_state), for the node
	// exporter's textfile collector to serve. Absolute. Default
	// /var/lib/prometheus/node-exporter/keepalived-repool-<name>.prom (the
	// directory Debian's prometheus-node-exporter reads).
	StateMetrics string `yaml:"state_metrics"`
}

// Server is one repool server behind HAProxy.
type Server struct {
	// Name is the HAProxy server name in its group's backend: lowercase
	// letters, digits, '-' and '_' (HAProxy's CSV stats are read
	// case-insensitively by client-native). Required, unique.
	Name string `yaml:"name"`
	// Address is the server's IPv4 address. Required.
	Address string `yaml:"address"`
	// GRPCPort is the server's gRPC port. Default 9090.
	GRPCPort int `yaml:"grpc_port"`
	// HTTPPort is the server's HTTP port, where HAProxy checks
	// GET /readyz/active and asks its agent (package agent). Default 8081.
	HTTPPort int `yaml:"http_port"`
	// Group is the group the server belongs to (its --group): a lowercase
	// letter, then lowercase letters, digits and '-', at most 31. Each
	// group is a backend of its own. Default "default"; with more than one
	// group, the default group needs a server.
	Group string `yaml:"group"`
}

// Checks are HAProxy's health-check timings for every server
// (fast checks make a handover take well under a second).
type Checks struct {
	// Inter is the time between two checks of a server, a whole number of
	// milliseconds. Default 100ms: the new active server is UP at most
	// about 100ms after it took the lock, for 10 checks/s per server per
	// LB host (each a small GET of /readyz/active).
	Inter time.Duration `yaml:"inter"`
	// Fall is the number of consecutive failed checks that mark a server
	// DOWN. Default 3: a check that times out because the server's host is
	// starved of CPU (its TLS handshake past the 100ms connect timeout) is
	// not a dead server. A dead one is marked DOWN sooner by traffic: the
	// first call whose connection to it fails marks it DOWN (observe
	// layer4, on-error mark-down).
	Fall int `yaml:"fall"`
	// Rise is the number of consecutive passed checks that mark a server
	// UP. Default 1.
	Rise int `yaml:"rise"`
	// AgentInter is the time between two agent checks of a server (package
	// agent: a line on its HTTP port, which says active, standby or down),
	// a whole number of milliseconds; repool's servers only, refused in
	// database.checks. Default 25ms: a server that stops announces it
	// (its agent answers down for 250 ms before its port closes), and
	// HAProxy marks it DOWN at its next agent check, so a group whose
	// servers all stop gets the cluster-down answer within about 25 ms
	// instead of after fall refused checks. The cost: 40 connections a
	// second per server per LB host, each one line each way.
	AgentInter time.Duration `yaml:"agent_inter"`
}

// Timeouts are HAProxy's proxy timeouts, whole numbers of milliseconds.
// Client, Server and Tunnel are long because SubscribeEvents is a
// server-streaming RPC that may stay quiet for a long time; in HTTP/2 an idle
// stream is bounded by timeout client/server, not by timeout tunnel, which
// only covers upgraded connections.
type Timeouts struct {
	// Connect bounds a TCP connect to a server. Default 100ms
	// (DefaultConnectTimeout): HAProxy retries a refused connect only
	// after min(connect, 1s).
	Connect time.Duration `yaml:"connect"`
	// Client is the client-side inactivity timeout. Default 1h.
	Client time.Duration `yaml:"client"`
	// Server is the server-side inactivity timeout. Default 1h.
	Server time.Duration `yaml:"server"`
	// Tunnel is the inactivity timeout of an upgraded (tunnelled)
	// connection. Default 1h.
	Tunnel time.Duration `yaml:"tunnel"`
	// HTTPRequest bounds the time to receive a request's headers.
	// Default 10s.
	HTTPRequest time.Duration `yaml:"http_request"`
	// Check bounds a health check once connected (the TLS handshake and
	// the answer). Default 1s.
	Check time.Duration `yaml:"check"`
}

// Keepalived tunes the VRRP side. keepalived 2.2.7 runs a vrrp_script at
// most once a second, so the track script ("server keepalived check")
// does not check once per run: it asks HAProxy's monitor every 100 ms for
// all but the last 200 ms of its interval and fails at the first bad
// answer. A fractional advert_int needs VRRPv3, which has no
// authentication.
//
// When the holder's link goes, the other host takes the VIP after its
// master-down interval, 3*AdvertInterval + (256-priority)/256*AdvertInterval
// (1.29 s with the defaults and priority 200). When the holder's HAProxy
// dies, or the holder is cut off with its link up (its HAProxy then sees no
// server and no peer), the check fails within about 0.3 s of the monitor
// failing, the holder enters FAULT and sends a priority-0 advert, and the
// other host takes over after its skew time, (256-priority)/256*AdvertInterval
// (0.09 s): the holder lets go well before the other's master-down interval
// ends, so the two never hold the VIP together.
type Keepalived struct {
	// VRRPVersion is 3 (default: adverts every AdvertInterval, fractions
	// of a second allowed; no authentication, adverts are taken only from
	// the other LB hosts' addresses, check_unicast_src) or 2 (whole
	// seconds; vip.auth_pass).
	VRRPVersion int `yaml:"vrrp_version"`
	// TrackInterval is the seconds between two runs of the track script.
	// At least 1. Default 1.
	TrackInterval int `yaml:"track_interval"`
	// TrackFall is the consecutive failed runs that put the instance in
	// FAULT. Default 1.
	TrackFall int `yaml:"track_fall"`
	// TrackRise is the consecutive successful runs that leave FAULT.
	// Default 2.
	TrackRise int `yaml:"track_rise"`
	// AdvertInterval is the VRRP advert_int in seconds: with VRRPv3
	// 0.01..40.95 in hundredths, default 0.4; with VRRPv2 whole seconds
	// 1..255, default 1.
	AdvertInterval float64 `yaml:"advert_interval"`
	// CheckProgram is the installed repool-server the track script runs
	// ("CheckProgram keepalived check"). Absolute. Default
	// /usr/local/bin/repool-server.
	CheckProgram string `yaml:"check_program"`
	// NotifyScript is the installed path of keepalived/notify.sh. Absolute.
	// Default /etc/keepalived/notify.sh.
	NotifyScript string `yaml:"notify_script"`
	// ScriptUser runs the track and notify scripts (script_user; scripts
	// are run with enable_script_security). Default root.
	ScriptUser string `yaml:"script_user"`
	// Preempt lets a recovered host with a higher priority take the VIP
	// back, a second interruption. Default false: nopreempt, the VIP
	// stays where it is until its holder fails. Keepalived honours
	// nopreempt only with initial state BACKUP, so every host's state
	// must then be BACKUP (the highest priority wins the first election);
	// with preempt, exactly one host is MASTER.
	Preempt bool `yaml:"preempt"`
}

// Load reads the inventory file at path and parses it like Parse. Errors
// about the content wrap ErrInvalid and name the file; a failure to read it
// wraps the os error.
func Load(path string) (*Inventory, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	inv, err := Parse(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return inv, nil
}

// Parse decodes a YAML inventory (unknown keys are errors), applies the
// defaults and validates it.
func Parse(r io.Reader) (*Inventory, error) {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	var inv Inventory
	if err := dec.Decode(&inv); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, yamlerr.Fix(err))
	}
	inv.setDefaults()
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	return &inv, nil
}

// setDefaults fills every zero field that has a default. It is the only
// place defaults are applied.
func (inv *Inventory) setDefaults() {
	orDefault(&inv.VIP.GRPCPort, DefaultGRPCPort)
	orDefault(&inv.VIP.ControlPort, DefaultControlPort)
	for i := range inv.LBHosts {
		h := &inv.LBHosts[i]
		def := LBHost{Interface: inv.VIP.Interface, StatsSocket: DefaultStatsSocket, MonitorPort: DefaultMonitorPort}
		if h.Name != "" {
			def.NotifyLog = "/var/log/keepalived-repool-" + h.Name + ".log"
			def.StateMetrics = DefaultTextfileDir + "/keepalived-repool-" + h.Name + ".prom"
		}
		*h = defaults.Fill(*h, def)
	}
	for i := range inv.Servers {
		inv.Servers[i] = defaults.Fill(inv.Servers[i], Server{GRPCPort: DefaultGRPCPort, HTTPPort: DefaultHTTPPort, Group: DefaultGroup})
	}
	inv.Checks = defaults.Fill(inv.Checks, Checks{Inter: DefaultCheckInter, Fall: DefaultCheckFall, Rise: DefaultCheckRise, AgentInter: DefaultAgentInter})
	inv.Timeouts = defaults.Fill(inv.Timeouts, Timeouts{
		Connect: DefaultConnectTimeout, Client: DefaultClientTimeout, Server: DefaultServerTimeout,
		Tunnel: DefaultTunnelTimeout, HTTPRequest: DefaultRequestTimeout, Check: DefaultCheckTimeout,
	})
	if db := inv.Database; db != nil {
		orDefault(&db.Port, DefaultDBPort)
		for i := range db.Nodes {
			db.Nodes[i] = defaults.Fill(db.Nodes[i], DBNode{Port: DefaultDBPort, RESTPort: DefaultDBRESTPort})
		}
		db.Checks = defaults.Fill(db.Checks, Checks{Inter: DefaultDBCheckInter, Fall: DefaultDBCheckFall, Rise: DefaultDBCheckRise})
	}
	inv.HAProxy = defaults.Fill(inv.HAProxy, HAProxy{User: DefaultHAProxyUser, Group: DefaultHAProxyUser, MaxConn: DefaultMaxConn, TenantMap: DefaultTenantMap})
	orDefault(&inv.HAProxy.FrontendMaxConn, min(DefaultFrontendConn, inv.HAProxy.MaxConn))
	inv.Keepalived = defaults.Fill(inv.Keepalived, Keepalived{
		VRRPVersion:   DefaultVRRPVersion,
		TrackInterval: DefaultTrackInterval, TrackFall: DefaultTrackFall, TrackRise: DefaultTrackRise,
		NotifyScript: DefaultNotifyScript, ScriptUser: DefaultScriptUser, CheckProgram: DefaultCheckProgram,
	})
	if inv.Keepalived.VRRPVersion == 2 {
		orDefault(&inv.Keepalived.AdvertInterval, 1)
	} else {
		orDefault(&inv.Keepalived.AdvertInterval, DefaultAdvertInterval)
	}
}

// orDefault sets *v to def if it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

var (
	nameRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
	interfaceRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)
	userRE      = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	hostRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	// safePathRE keeps paths free of spaces and quotes: they are written
	// into keepalived's quoted script lines and HAProxy's config.
	safePathRE = regexp.MustCompile(`^/[A-Za-z0-9_./@+-]*$`)
	// groupRE is the servers' --group rule.
	groupRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)
)

// ValidGroup reports whether name is a valid group name (a server's
// --group): a lowercase letter, then lowercase letters, digits and '-', at
// most 31 characters.
func ValidGroup(name string) bool { return groupRE.MatchString(name) }

// Groups returns the groups of the servers, sorted, the default group
// first.
func (inv *Inventory) Groups() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range inv.Servers {
		if !seen[s.Group] {
			seen[s.Group] = true
			out = append(out, s.Group)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == DefaultGroup:
			return -1
		case b == DefaultGroup:
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

// Validate reports the first invalid field, named by its YAML path (for
// example "lb_hosts[1].priority"). The error wraps ErrInvalid. It does not
// apply defaults: Parse and Load do that first.
func (inv *Inventory) Validate() error {
	var v validator
	v.vip(inv.VIP)
	if len(inv.LBHosts) < 2 {
		v.fail("lb_hosts", "need at least 2 LB hosts (a VRRP pair), got %d", len(inv.LBHosts))
	}
	names := map[string]string{}
	addrs := map[netip.Addr]string{}
	if vip := inv.VIP.IP(); vip.IsValid() {
		addrs[vip] = "vip.address"
	}
	prios := map[int]string{}
	masters := 0
	for i, h := range inv.LBHosts {
		f := fmt.Sprintf("lb_hosts[%d]", i)
		v.name(f+".name", h.Name, names)
		v.addr(f+".address", h.Address, addrs)
		v.iface(f+".interface", h.Interface)
		switch {
		case h.Priority < 1 || h.Priority > 254:
			v.fail(f+".priority", "%d is outside 1..254 (255 means address owner and cannot be lowered by the track script)", h.Priority)
		case prios[h.Priority] != "":
			v.fail(f+".priority", "%d is already the priority of %s; VRRP priorities must differ", h.Priority, prios[h.Priority])
		default:
			prios[h.Priority] = f
		}
		switch h.State {
		case StateMaster:
			masters++
		case StateBackup:
		default:
			v.fail(f+".state", "%q is neither MASTER nor BACKUP", h.State)
		}
		v.path(f+".stats_socket", h.StatsSocket)
		v.port(f+".monitor_port", h.MonitorPort)
		if h.MonitorPort == inv.VIP.GRPCPort {
			v.fail(f+".monitor_port", "%d is also vip.grpc_port", h.MonitorPort)
		}
		if h.MonitorPort == inv.VIP.ControlPort {
			v.fail(f+".monitor_port", "%d is also vip.control_port", h.MonitorPort)
		}
		v.path(f+".notify_log", h.NotifyLog)
		v.path(f+".state_metrics", h.StateMetrics)
	}
	switch {
	case !inv.Keepalived.Preempt && masters > 0:
		v.fail("lb_hosts", "with nopreempt (the default; keepalived.preempt false) every host must have state BACKUP, as keepalived requires; got %d MASTER", masters)
	case inv.Keepalived.Preempt && len(inv.LBHosts) > 0 && masters != 1:
		v.fail("lb_hosts", "with keepalived.preempt exactly one host must have state MASTER, got %d", masters)
	}
	for i, h := range inv.LBHosts {
		if h.State == StateMaster {
			for _, o := range inv.LBHosts {
				if o.State == StateBackup && o.Priority >= h.Priority {
					v.fail(fmt.Sprintf("lb_hosts[%d].priority", i), "MASTER %s has priority %d, not above BACKUP %s (%d)", h.Name, h.Priority, o.Name, o.Priority)
					break
				}
			}
		}
	}
	if len(inv.Servers) == 0 {
		v.fail("servers", "need at least one server")
	}
	snames := map[string]string{}
	endpoints := map[netip.AddrPort]string{}
	defaultGroup := false
	for i, s := range inv.Servers {
		f := fmt.Sprintf("servers[%d]", i)
		v.name(f+".name", s.Name, snames)
		v.addr(f+".address", s.Address, nil)
		v.port(f+".grpc_port", s.GRPCPort)
		v.port(f+".http_port", s.HTTPPort)
		if a, err := netip.ParseAddr(s.Address); err == nil {
			for _, p := range []struct {
				field string
				port  int
			}{{"grpc_port", s.GRPCPort}, {"http_port", s.HTTPPort}} {
				ap := netip.AddrPortFrom(a, uint16(p.port))
				if other, dup := endpoints[ap]; dup {
					v.fail(f+"."+p.field, "%s is also %s", ap, other)
				}
				endpoints[ap] = f + "." + p.field
			}
		}
		if !groupRE.MatchString(s.Group) {
			v.fail(f+".group", "%q is not a group name (a lowercase letter, then lowercase letters, digits, '-'; at most 31)", s.Group)
		}
		defaultGroup = defaultGroup || s.Group == DefaultGroup
	}
	if len(inv.Servers) > 0 && !defaultGroup {
		v.fail("servers", "no server is in group %q: calls without a tenant (a new sidecar's first IssueToken), control-plane requests about no tenant and tenants missing from the tenant map go to it", DefaultGroup)
	}
	v.ms("checks.inter", inv.Checks.Inter)
	v.ms("checks.agent_inter", inv.Checks.AgentInter)
	v.positive("checks.fall", inv.Checks.Fall)
	v.positive("checks.rise", inv.Checks.Rise)
	v.ms("timeouts.connect", inv.Timeouts.Connect)
	v.ms("timeouts.client", inv.Timeouts.Client)
	v.ms("timeouts.server", inv.Timeouts.Server)
	v.ms("timeouts.tunnel", inv.Timeouts.Tunnel)
	v.ms("timeouts.http_request", inv.Timeouts.HTTPRequest)
	v.ms("timeouts.check", inv.Timeouts.Check)
	for _, u := range []struct{ field, name string }{{"haproxy.user", inv.HAProxy.User}, {"haproxy.group", inv.HAProxy.Group}} {
		if !userRE.MatchString(u.name) {
			v.fail(u.field, "%q is not a user or group name", u.name)
		}
	}
	v.positive("haproxy.maxconn", inv.HAProxy.MaxConn)
	v.positive("haproxy.frontend_maxconn", inv.HAProxy.FrontendMaxConn)
	if inv.HAProxy.FrontendMaxConn > inv.HAProxy.MaxConn {
		v.fail("haproxy.frontend_maxconn", "%d is above haproxy.maxconn %d", inv.HAProxy.FrontendMaxConn, inv.HAProxy.MaxConn)
	}
	v.path("haproxy.tenant_map", inv.HAProxy.TenantMap)
	if t := inv.TLS; t.On() {
		v.path("tls.cert", t.Cert)
		v.path("tls.server_ca", t.ServerCA)
		if !hostRE.MatchString(t.ServerName) {
			v.fail("tls.server_name", "%q is not a host name (the name every server's certificate holds; required with tls.cert)", t.ServerName)
		}
		if t.ClientCA != "" {
			v.path("tls.client_ca", t.ClientCA)
		}
		if t.ClientCert != "" {
			v.path("tls.client_cert", t.ClientCert)
		}
	} else if t != (TLS{}) {
		v.fail("tls.cert", "required when any tls key is set (the VIP's certificate and key, one PEM file)")
	}
	v.database(inv)
	v.positive("keepalived.track_interval", inv.Keepalived.TrackInterval)
	v.positive("keepalived.track_fall", inv.Keepalived.TrackFall)
	v.positive("keepalived.track_rise", inv.Keepalived.TrackRise)
	v.vrrp(inv.Keepalived, inv.VIP.AuthPass)
	v.path("keepalived.notify_script", inv.Keepalived.NotifyScript)
	v.path("keepalived.check_program", inv.Keepalived.CheckProgram)
	if !userRE.MatchString(inv.Keepalived.ScriptUser) {
		v.fail("keepalived.script_user", "%q is not a user name", inv.Keepalived.ScriptUser)
	}
	return v.err
}

// vrrp checks the VRRP version, the advert interval it allows and the
// authentication it has.
func (v *validator) vrrp(k Keepalived, authPass string) {
	a := k.AdvertInterval
	switch k.VRRPVersion {
	case 2:
		if a < 1 || a > 255 || a != math.Trunc(a) {
			v.fail("keepalived.advert_interval", "%v is not whole seconds 1..255 (VRRPv2; keepalived.vrrp_version 3 takes fractions)", a)
		}
		if authPass == "" {
			v.fail("vip.auth_pass", "required with keepalived.vrrp_version 2 (PASS authentication)")
		}
	case 3:
		if cs := a * 100; a < 0.01 || a > 40.95 || math.Abs(cs-math.Round(cs)) > 1e-9 {
			v.fail("keepalived.advert_interval", "%v is not 0.01..40.95 seconds in hundredths (VRRPv3)", a)
		}
		if authPass != "" {
			v.fail("vip.auth_pass", "VRRPv3 (keepalived.vrrp_version 3, the default) has no authentication: remove vip.auth_pass "+
				"(adverts are taken only from the other LB hosts' addresses; allow IP protocol 112 only between them), "+
				"or set keepalived.vrrp_version: 2 for PASS authentication and whole-second adverts")
		}
	default:
		v.fail("keepalived.vrrp_version", "%d is not 2 or 3", k.VRRPVersion)
	}
}

// Host returns the LB host called name; an unknown name is an error
// wrapping ErrInvalid that lists the known ones.
func (inv *Inventory) Host(name string) (LBHost, error) {
	var known []string
	for _, h := range inv.LBHosts {
		if h.Name == name {
			return h, nil
		}
		known = append(known, h.Name)
	}
	return LBHost{}, fmt.Errorf("%w: no LB host %q (have %s)", ErrInvalid, name, strings.Join(known, ", "))
}

// validator keeps the first failure.
type validator struct{ err error }

func (v *validator) fail(field, format string, args ...any) {
	if v.err == nil {
		v.err = fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
}

func (v *validator) vip(vip VIP) {
	p, err := netip.ParsePrefix(vip.Address)
	switch {
	case vip.Address == "":
		v.fail("vip.address", "required (an IPv4 address with prefix length, e.g. 10.0.0.100/24)")
	case err != nil || !p.Addr().Is4():
		v.fail("vip.address", "%q is not an IPv4 address with prefix length (e.g. 10.0.0.100/24)", vip.Address)
	case p.Addr().IsUnspecified() || p.Addr().IsMulticast():
		v.fail("vip.address", "%q cannot be a virtual IP", vip.Address)
	}
	v.iface("vip.interface", vip.Interface)
	if vip.RouterID < 1 || vip.RouterID > 255 {
		v.fail("vip.router_id", "%d is outside 1..255", vip.RouterID)
	}
	switch {
	case vip.AuthPass == "":
		// Required with VRRPv2 only (vrrp).
	case len(vip.AuthPass) > 8:
		v.fail("vip.auth_pass", "longer than 8 characters (VRRPv2 PASS authentication uses only 8)")
	case strings.ContainsAny(vip.AuthPass, " \t\"'\\{}#!"):
		v.fail("vip.auth_pass", "must not contain spaces, quotes, backslashes, braces, '#' or '!'")
	default:
		for _, r := range vip.AuthPass {
			if r < 0x21 || r > 0x7e {
				v.fail("vip.auth_pass", "must be printable ASCII")
				break
			}
		}
	}
	v.port("vip.grpc_port", vip.GRPCPort)
	v.port("vip.control_port", vip.ControlPort)
	if vip.ControlPort == vip.GRPCPort {
		v.fail("vip.control_port", "%d is also vip.grpc_port", vip.ControlPort)
	}
}

// database checks the database section, if any: its frontend port must
// differ from the VIP's other ports and the LB hosts' monitor ports, and
// every node's endpoints must be distinct.
func (v *validator) database(inv *Inventory) {
	db := inv.Database
	if db == nil {
		return
	}
	v.port("database.port", db.Port)
	switch db.Port {
	case inv.VIP.GRPCPort:
		v.fail("database.port", "%d is also vip.grpc_port", db.Port)
	case inv.VIP.ControlPort:
		v.fail("database.port", "%d is also vip.control_port", db.Port)
	}
	for i, h := range inv.LBHosts {
		if h.MonitorPort == db.Port {
			v.fail("database.port", "%d is also lb_hosts[%d].monitor_port", db.Port, i)
		}
	}
	if len(db.Nodes) < 2 {
		v.fail("database.nodes", "need at least 2 PostgreSQL nodes (a primary and a synchronous standby to fail over to), got %d", len(db.Nodes))
	}
	names := map[string]string{}
	endpoints := map[netip.AddrPort]string{}
	for i, n := range db.Nodes {
		f := fmt.Sprintf("database.nodes[%d]", i)
		v.name(f+".name", n.Name, names)
		v.addr(f+".address", n.Address, nil)
		v.port(f+".port", n.Port)
		v.port(f+".rest_port", n.RESTPort)
		if a, err := netip.ParseAddr(n.Address); err == nil {
			for _, p := range []struct {
				field string
				port  int
			}{{"port", n.Port}, {"rest_port", n.RESTPort}} {
				ap := netip.AddrPortFrom(a, uint16(p.port))
				if other, dup := endpoints[ap]; dup {
					v.fail(f+"."+p.field, "%s is also %s", ap, other)
				}
				endpoints[ap] = f + "." + p.field
			}
		}
	}
	v.ms("database.checks.inter", db.Checks.Inter)
	if db.Checks.AgentInter != 0 {
		v.fail("database.checks.agent_inter", "Patroni has no agent check: remove it")
	}
	v.positive("database.checks.fall", db.Checks.Fall)
	v.positive("database.checks.rise", db.Checks.Rise)
}

func (v *validator) name(field, name string, seen map[string]string) {
	switch {
	case !nameRE.MatchString(name):
		v.fail(field, "%q is not a name (lowercase letters, digits, '-', '_'; at most 32)", name)
	case seen[name] != "":
		v.fail(field, "%q is also %s", name, seen[name])
	default:
		seen[name] = field
	}
}

// addr checks an IPv4 host address; with seen it must also be unique.
func (v *validator) addr(field, s string, seen map[netip.Addr]string) {
	a, err := netip.ParseAddr(s)
	switch {
	case s == "":
		v.fail(field, "required (an IPv4 address)")
	case err != nil || !a.Is4():
		v.fail(field, "%q is not an IPv4 address", s)
	case a.IsUnspecified() || a.IsMulticast():
		v.fail(field, "%q is not a host address", s)
	case seen != nil && seen[a] != "":
		v.fail(field, "%s is also %s", a, seen[a])
	case seen != nil:
		seen[a] = field
	}
}

func (v *validator) iface(field, name string) {
	if !interfaceRE.MatchString(name) {
		v.fail(field, "%q is not an interface name", name)
	}
}

func (v *validator) port(field string, p int) {
	if p < 1 || p > 65535 {
		v.fail(field, "%d is not a port (1..65535)", p)
	}
}

func (v *validator) positive(field string, n int) {
	if n < 1 {
		v.fail(field, "%d is below 1", n)
	}
}

func (v *validator) ms(field string, d time.Duration) {
	if d < time.Millisecond || d%time.Millisecond != 0 {
		v.fail(field, "%s is not a positive whole number of milliseconds", d)
	}
}

func (v *validator) path(field, p string) {
	if !safePathRE.MatchString(p) || filepath.Clean(p) != p {
		v.fail(field, "%q is not a clean absolute path (letters, digits, _ . / @ + - only)", p)
	}
}
