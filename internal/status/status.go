// Package status is the shape of repool's status documents: Server, what
// one server answers on GET /status.json of its HTTP port, and Cluster, the view
// of a whole deployment that `server status` gathers from every server and
// every LB host of the inventory (and prints as one table, WriteTable, or
// as JSON). It holds types and their rendering only, so that whatever
// shows a status (the command, a status page) reads the same fields.
package status

import "time"

// Roles of a server (Server.Role).
const (
	// RoleActive: the server serves its group's data plane (in an HA
	// group it holds the leader lock). Its Serving says whether it can
	// right now: false while its store refuses its writes.
	RoleActive = "active"
	// RoleStandby: a healthy server of an HA group that does not hold the
	// leader lock; its Election says whether it waits on the lock.
	RoleStandby = "standby"
	// RoleNotReady: starting, restoring, or shutting down.
	RoleNotReady = "not_ready"
)

// Election states of an HA server (Election.State).
const (
	// ElectionLeader: this server holds its group's leader lock.
	ElectionLeader = "leader"
	// ElectionWaiting: a standby with an open session waiting on the
	// lock in the database; it takes a freed lock at once.
	ElectionWaiting = "waiting"
	// ElectionReconnecting: a standby without a session: its last attempt
	// failed (Election.Error says why) and it connects again shortly.
	ElectionReconnecting = "reconnecting"
	// ElectionStopped: not campaigning (shutting down, or stepped down
	// and pausing before the next campaign).
	ElectionStopped = "stopped"
)

// Server is one server's status: GET /status.json on its HTTP port. Times are
// the server's; Time is when it answered, so ages are Time minus a time,
// whatever the reader's clock says.
type Server struct {
	// Name is the server's name (--ha-name; its gRPC address by default).
	Name string `json:"name"`
	// Time is when the server answered.
	Time time.Time `json:"time"`
	// StartedAt is when the process started serving.
	StartedAt time.Time `json:"started_at"`
	// Role is RoleActive, RoleStandby or RoleNotReady.
	Role string `json:"role"`
	// Serving is what HAProxy's check sees: true when /readyz/active
	// answers 200 (the active server, ready, its store writable).
	Serving bool `json:"serving"`
	// Reason is /readyz/active's text: "active", "standby", "not ready",
	// "store not writable: REASON".
	Reason string `json:"reason"`
	// HA is true for a server of an active/standby group (--ha).
	HA bool `json:"ha"`
	// Group is the server's group (--group; "default").
	Group string `json:"group"`
	// Epoch is the epoch of the active server's term; 0 on a server that
	// has not been active since it started.
	Epoch uint32 `json:"epoch"`
	// LeaderSince is when this server became the active one; nil unless
	// it is.
	LeaderSince *time.Time `json:"leader_since"`
	// Election is the HA leader election's state; nil without --ha.
	Election *Election `json:"election,omitempty"`
	// Build is the running build.
	Build Build `json:"build"`
	// ConfigHash is a digest of the server's effective configuration
	// (every setting after defaults, secrets and file contents left out):
	// equal on two servers that were given the same settings.
	ConfigHash string `json:"config_hash"`
	// Store is the store and whether it takes this server's writes.
	Store Store `json:"store"`
	// Tenants is how many tenants this server serves now (0 on a standby).
	Tenants int `json:"tenants"`
	// LastCheckpoint is the end of the last checkpoint round in which every
	// tenant succeeded, in this server's current or last term; nil if
	// none. CheckpointAgeSeconds is Time minus it (absent with it).
	LastCheckpoint       *time.Time `json:"last_checkpoint"`
	CheckpointAgeSeconds *float64   `json:"checkpoint_age_seconds,omitempty"`
}

// Election is an HA server's leader election.
type Election struct {
	// State is ElectionLeader, ElectionWaiting, ElectionReconnecting or
	// ElectionStopped.
	State string `json:"state"`
	// Since is when it entered State.
	Since time.Time `json:"since"`
	// Error is why the last attempt failed (ElectionReconnecting).
	Error string `json:"error,omitempty"`
}

// Build is a running build (package buildinfo).
type Build struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
}

// Short is the build as a table shows it: "VERSION (REV12[+])", + for a
// tree with changes not committed.
func (b Build) Short() string {
	rev := b.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if b.Modified {
		rev += "+"
	}
	return b.Version + " (" + rev + ")"
}

// Store is a server's store as the server sees it.
type Store struct {
	// Kind is "postgres" or "sqlite".
	Kind string `json:"kind"`
	// Address is the store's URL with any password removed.
	Address string `json:"address"`
	// Writable is false from a write of the active server that the store
	// refused until a probe write succeeds; a standby writes nothing and
	// says true.
	Writable bool `json:"writable"`
	// Error is why the store is not writable.
	Error string `json:"error,omitempty"`
}

// Cluster is a deployment's status as `server status` gathers it: every
// LB host of the inventory as itself and as its HAProxy sees the servers,
// every server as it answers, and per group its leader and standbys.
type Cluster struct {
	// Time is when the status was gathered (the reader's clock).
	Time time.Time `json:"time"`
	// VIP is the inventory's virtual IP.
	VIP string `json:"vip"`
	// LBHosts are the inventory's LB hosts, in its order.
	LBHosts []LBHost `json:"lb_hosts"`
	// Servers are the inventory's servers, in its order.
	Servers []ServerEntry `json:"servers"`
	// Groups are the servers' groups, by name.
	Groups []Group `json:"groups"`
	// Database is the store the servers report (nil if none answered).
	Database *Database `json:"database,omitempty"`
	// DBNodes are the inventory's database nodes (its database section:
	// PostgreSQL under Patroni) as each one's Patroni answers; none when
	// the inventory has no database section.
	DBNodes []DBNode `json:"db_nodes,omitempty"`
	// Warnings are what needs a look, in words: a group without a leader
	// or with two, no VIP holder or two, a server that did not answer,
	// versions or configurations that differ within a group, a leader
	// that an LB host's HAProxy does not see UP.
	Warnings []string `json:"warnings"`
}

// LBHost is one LB host: Keepalived's VRRP state and its HAProxy.
type LBHost struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// VRRPState is MASTER, BACKUP, FAULT or STOP, as the host's
	// Keepalived last announced it (keepalived/notify.sh's state file,
	// served by the host's node exporter); "" when it could not be read
	// (VRRPError says why).
	VRRPState string `json:"vrrp_state"`
	VRRPError string `json:"vrrp_error,omitempty"`
	// HoldsVIP is true while VRRPState is MASTER.
	HoldsVIP bool `json:"holds_vip"`
	// HAProxyUp is true when the host's HAProxy answered its monitor URI
	// (/lb-health on the monitor port, what Keepalived's track script
	// checks) and its exporter; HAProxyError says why not.
	HAProxyUp    bool   `json:"haproxy_up"`
	HAProxyError string `json:"haproxy_error,omitempty"`
	// Backends is every server as this host's HAProxy sees it.
	Backends []Backend `json:"backends"`
}

// Backend is one server in one LB host's HAProxy.
type Backend struct {
	// Server is the server's name (the inventory's).
	Server string `json:"server"`
	// Proxy is HAProxy's backend (repool, or repool_GROUP).
	Proxy string `json:"proxy"`
	// State is HAProxy's: UP, NOLB, DOWN, MAINT, DRAIN (UP at weight 0
	// counts as DRAIN), or "" when HAProxy does not list it.
	State string `json:"state"`
	// Check is why: the last health check's status ("L7OK", "L7OKC":
	// 404, "L4CON": refused, "L7STS": another status, ...) with its HTTP
	// code when there was one ("L7OKC/404").
	Check string `json:"check"`
	// Weight is the server's current weight (0 for a standby).
	Weight int `json:"weight"`
}

// ServerEntry is one server of the inventory and its answer.
type ServerEntry struct {
	Name  string `json:"name"`
	Group string `json:"group"`
	// URL is where its status was asked.
	URL string `json:"url"`
	// Status is its answer; nil when it did not answer (Error says why).
	Status *Server `json:"status"`
	Error  string  `json:"error,omitempty"`
}

// Group is one group of servers: its leader and its standbys.
type Group struct {
	Name string `json:"name"`
	// Leader names the server that says it is active ("" if none does);
	// more than one is listed in Leaders (a handover in progress, or a
	// deposed leader that has not noticed yet).
	Leader      string     `json:"leader"`
	Leaders     []string   `json:"leaders,omitempty"`
	Epoch       uint32     `json:"epoch"`
	LeaderSince *time.Time `json:"leader_since"`
	// Standbys are the servers of the group that say they are standbys.
	Standbys []Standby `json:"standbys"`
	// Down are the servers of the group that did not answer, or are not
	// ready.
	Down []string `json:"down"`
}

// Standby is one standby of a group.
type Standby struct {
	Name string `json:"name"`
	// Waiting is true while it waits on the leader lock in the database
	// (it takes over at once when the lock is freed).
	Waiting bool `json:"waiting"`
}

// Database is the store the servers share, as they report it.
type Database struct {
	Kind    string `json:"kind"`
	Address string `json:"address"`
	// Writable is false when an active server says the store refuses its
	// writes (Error says why).
	Writable bool   `json:"writable"`
	Error    string `json:"error,omitempty"`
}

// DBNode is one PostgreSQL node of the database tier as its Patroni
// answers GET /patroni on its REST port.
type DBNode struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Role is Patroni's: "primary" (Patroni 3.0 says "master"), "replica",
	// "standby_leader"; "" when Patroni did not answer (Error says why).
	Role string `json:"role"`
	// State is PostgreSQL's as Patroni sees it: "running", "starting",
	// "stopped", "crashed", ...
	State    string `json:"state"`
	Timeline int64  `json:"timeline"`
	// LagBytes is how far a replica's replay is behind the primary's WAL
	// position, when both answered; nil otherwise.
	LagBytes *int64 `json:"lag_bytes,omitempty"`
	Error    string `json:"error,omitempty"`
}
