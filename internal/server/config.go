package server

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"time"

	"github.com/repool/repool/internal/budget"
	"github.com/repool/repool/internal/control"
	"github.com/repool/repool/internal/defaults"
	"github.com/repool/repool/internal/gctune"
	"github.com/repool/repool/internal/httpbounds"
	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/retention"
	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/open"
	"github.com/repool/repool/internal/tenants"
	"github.com/repool/repool/internal/tlsconf"
	"github.com/repool/repool/internal/tracing"
)

// Config is the server's configuration. Every field can be set in the YAML
// file, as a REPOOL_* environment variable and as a flag (see cmd/server).
// The zero value of every field means its default, applied by
// WithDefaults.
type Config struct {
	// GRPCAddr is the data plane's listen address (h2c, or TLS). Default
	// 127.0.0.1:9090.
	GRPCAddr string
	// HTTPAddr serves health, metrics and the control plane. Default
	// 127.0.0.1:8081.
	HTTPAddr string
	// Store is sqlite:PATH or postgres://... Default sqlite:./data/repool.db.
	Store string
	// CheckpointInterval is the time between compactions of the lease
	// journal (journaled leases that expired are removed). Default 10s.
	CheckpointInterval time.Duration
	// ReportFlush is the longest time between a report's acknowledgement
	// and its statistics reaching the store: every ReportFlush the pools'
	// changes are written (incrementally). A crash loses at most this
	// window of statistics. Default 1s.
	ReportFlush time.Duration
	// StoreProbeInterval is the time between the active server's probe
	// writes to its store (a counter row; on SQLite also a 64 KiB scratch
	// file): a store that stops taking writes makes the server not ready
	// within it, with or without traffic, and one that takes them again
	// ready. Default 1s.
	StoreProbeInterval time.Duration
	// AuditMaxAge: the active server deletes audit entries older than
	// this (retention rounds every RetentionInterval). Negative keeps
	// them at any age. Default 720h (30 days).
	AuditMaxAge time.Duration
	// AuditMaxRowsPerTenant: the active server deletes a tenant's audit
	// entries beyond its newest AuditMaxRowsPerTenant. Negative keeps any
	// number. Default 100,000.
	AuditMaxRowsPerTenant int64
	// RevokedKeyMaxAge: the active server deletes API keys revoked longer
	// ago than this. Negative keeps them. Default 720h (30 days).
	RevokedKeyMaxAge time.Duration
	// RetentionInterval is the time between the active server's retention
	// rounds, which also read the store's size for its gauges. Default
	// 1m; 1s to 24h.
	RetentionInterval time.Duration
	// RetentionBatch is the most rows one retention statement deletes; a
	// round pauses retention.DefaultPause (10ms) after each. Default 1000;
	// 1 to store.MaxPruneBatch (10,000).
	RetentionBatch int
	// StoreLockWait is how long a server that is not in an active/standby
	// group waits for its store's writer claim when another process holds
	// it, before it gives up: a killed predecessor's PostgreSQL session, or
	// its SQLite lock, lasts a few seconds after the process is gone, and a
	// restart in that window must wait, not exit. It logs once when it
	// starts waiting (naming the holder) and once when it has the claim.
	// Default 30s; at most 10m.
	StoreLockWait time.Duration
	// DurableReports answers Report (and Release with an outcome) only
	// once its statistics are durable, group-committed per tenant, so a
	// crash loses none. Default off.
	DurableReports bool
	// StoreSharedFiles lets the server open a SQLite store whose files
	// other local users may read. Default off: such a store is refused.
	StoreSharedFiles bool
	// StoreFsync syncs a SQLite store's log to disk at every commit, so
	// that acknowledged writes survive a power loss of the host too, not
	// only a crash of the process. Default off.
	StoreFsync bool
	// TokenTTL is the lifetime of tokens from AuthService.IssueToken.
	// Default 15m.
	TokenTTL time.Duration
	// OperatorTokenTTL is the lifetime of the operator token printed on
	// first start. Default 24h.
	OperatorTokenTTL time.Duration
	// GlobalResources and GlobalCells are the global state budgets.
	// Defaults budget.DefaultResources and budget.DefaultCells.
	GlobalResources int64
	GlobalCells     int64
	// DefaultTenantShare is the percentage of each global budget that a
	// tenant may hold when the operator set it no max_resources or
	// max_cells: a new tenant cannot take the whole budget and lock the
	// others out. 1 to 100. Default 25.
	DefaultTenantShare int
	// MaxKeysPerTenant caps a tenant's API keys that are not revoked.
	// Default control.DefaultMaxKeysPerTenant (100).
	MaxKeysPerTenant int
	// Limits are the defaults of a tenant's limits, by limits.Limit,
	// that the server's flags set: a value for each limit with a flag
	// (limits.Spec.FlagUsage; the flag is named for the limit), unset
	// meaning the built-in default (limits.Spec.Default); a value set to 0
	// is 0 (--max-lease-streams 0 allows no Leases stream). The control
	// plane sets a tenant's own values. Every other limit must stay unset
	// here: its default is none for a reservation, DefaultTenantShare
	// percent of a global budget for a ceiling of resources or cells
	// (LimitRules).
	Limits limits.Values
	// Policy is the quarantine and decay policy of every tenant's pool
	// (docs/pool.md, "Quarantine"). Zero fields: the pool's defaults.
	Policy tenants.Policy
	// ShutdownGrace bounds the graceful drain on shutdown. Default 10s.
	ShutdownGrace time.Duration
	// HTTP holds the HTTP server's deadlines and bounds (flags
	// --http-read-header-timeout, ...; defaults in httpbounds.Config).
	HTTP httpbounds.Config
	// gRPC server bounds: connections open at once (default 4096; one
	// more is closed at once), concurrent streams per connection (256),
	// the time a connection may go without a call before it is closed
	// (5m), the time to set a connection up, HTTP/2 preface included
	// (10s), and the size of a call's metadata (64 KiB).
	GRPCMaxConnections       int
	GRPCMaxConcurrentStreams int
	GRPCMaxConnectionIdle    time.Duration
	GRPCHandshakeTimeout     time.Duration
	GRPCMaxHeaderBytes       int
	// GRPCStreamWindow and GRPCConnWindow are the HTTP/2 flow-control
	// windows the server grants a stream and a connection (defaults 64
	// KiB and 1 MiB). Setting them turns off gRPC's window growth (BDP
	// estimation, up to 16 MiB a stream), which let a client that sends
	// and never reads make the server buffer 16 MiB per stream.
	GRPCStreamWindow int
	GRPCConnWindow   int
	// GRPCMaxStreamIdle ends a Leases stream without a call for this long
	// (found within twice as long), so that it does not keep its
	// connection from counting as idle. Default 1m.
	GRPCMaxStreamIdle time.Duration
	// GRPCMaxConnectionsPerTenant is the most gRPC connections one tenant
	// may hold: a connection belongs to the tenant of the first
	// authenticated call on it, and one more is refused
	// (RESOURCE_EXHAUSTED) and closed. Default DefaultTenantShare percent
	// of GRPCMaxConnections (1,024 of 4,096). A connection on which no
	// call authenticated within GRPCHandshakeTimeout is closed.
	GRPCMaxConnectionsPerTenant int
	// GRPCMaxRecvBytes bounds one request message (default 1 MiB: a
	// Register of about 9,000 short resources or 30 with the longest ids
	// and 64 labels; every other request is under 40 KiB). gRPC reads a
	// call's request whole before authenticating it.
	GRPCMaxRecvBytes int
	// GRPCMaxCallsPerTenant bounds the calls and streams in flight of one
	// tenant, counted from before gRPC reads their requests by the tenant
	// their credential claims without the store (a token's signature, a
	// key seen before); one more is RESOURCE_EXHAUSTED. Default 128.
	GRPCMaxCallsPerTenant int
	// GRPCMaxUnverifiedCalls bounds, across all connections, the calls in
	// flight whose credential cannot be checked without the store (a key
	// this server has not seen authenticate; health checks and
	// reflection); each is ended if not authenticated within
	// GRPCHandshakeTimeout. Default 64.
	GRPCMaxUnverifiedCalls int
	// gRPC keepalive: the server pings a connection quiet for
	// GRPCKeepaliveTime (default 1m) and closes it if the ping is not
	// answered within GRPCKeepaliveTimeout (20s); a client that pings
	// more often than every GRPCKeepaliveMinTime (10s) is disconnected
	// (the enforcement policy; pings without calls in flight are allowed).
	GRPCKeepaliveTime    time.Duration
	GRPCKeepaliveTimeout time.Duration
	GRPCKeepaliveMinTime time.Duration
	// HA joins the active/standby group on a PostgreSQL store: the server
	// serves the data plane only while it holds the leader lock. Default
	// off.
	HA bool
	// HAName names this server in the database's session list. Default the
	// gRPC address.
	HAName string
	// HASessionTimeout is how long a silent leader keeps the lock (and so
	// how long a paused or cut-off leader delays failover). Default 2s.
	HASessionTimeout time.Duration
	// HAInterval is how often the leader checks its session, and how long
	// a standby pauses before it reconnects after its session failed. It
	// does not pace takeover: a standby waits for the lock in the database
	// and gets it as soon as it is freed (each wait lasts at most
	// HAInterval, then starts again). Default 250ms.
	HAInterval time.Duration
	// Group is the group of servers this one joins (tenant-sharded groups,
	// HA only): the active/standby set that serves the tenants placed on
	// it. Default store.DefaultGroup, the one group of a deployment that
	// does not shard.
	Group string
	// PlacementInterval is how often a group's active server reads the
	// tenants' placements, to take in the tenants moved to its group and
	// tenants created elsewhere and placed on it. Default 200ms.
	PlacementInterval time.Duration
	// GCPercent is the garbage collector's target (GOGC) that TuneRuntime
	// applies: the heap may grow by this percentage of the live heap
	// before a collection. -1 turns the collector off and needs a
	// MemoryLimit. Default 400.
	GCPercent int
	// MemoryLimit is the soft memory limit (GOMEMLIMIT) in bytes that
	// TuneRuntime applies; the collector runs as often as it must to stay
	// under it. 0 means none. Default 0.
	MemoryLimit int64
	// OTLPEndpoint, when set, exports OpenTelemetry spans of the data
	// plane's calls to this OTLP/HTTP collector (http://HOST:4318).
	// Default empty: no spans; trace context is still read and logged.
	OTLPEndpoint string
	// LogLevel is the least severe level that cmd/server logs: debug,
	// info, warn or error. Default info.
	LogLevel string
	// TLSCert and TLSKey (PEM files) serve both listeners over TLS: gRPC
	// (h2 by ALPN) and HTTP. TLSClientCA (a PEM file of CA certificates)
	// also requires clients to present a certificate signed by it. The
	// files are re-read on SIGHUP and when they change; a bad new pair
	// keeps the old one. Default none: plaintext.
	TLSCert, TLSKey, TLSClientCA string
	// Insecure lets the server listen on an address that is not loopback
	// without TLS. Default off: such a server refuses to start.
	Insecure bool
}

// TLSFiles returns the server's TLS files.
func (c Config) TLSFiles() tlsconf.Files {
	return tlsconf.Files{CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA}
}

// checkPlaintext refuses a listen address that is not loopback when TLS
// is off and Insecure does not allow it. An empty host (every address)
// is not loopback.
func (c Config) checkPlaintext() error {
	if c.TLSCert != "" || c.Insecure {
		return nil
	}
	for _, a := range []struct{ key, addr string }{{"grpc_addr", c.GRPCAddr}, {"http_addr", c.HTTPAddr}} {
		host, _, _ := net.SplitHostPort(a.addr)
		if !tlsconf.IsLoopback(host) {
			return fmt.Errorf("config: %s %q is not a loopback address and TLS is off, so API keys and tokens would cross the network in plaintext: "+
				"set tls_cert and tls_key (--tls-cert, --tls-key), or insecure: true (--insecure) to serve plaintext anyway", a.key, a.addr)
		}
	}
	return nil
}

// WithDefaults returns c with defaults in place of zero values.
func (c Config) WithDefaults() Config {
	c = defaults.Fill(c, Config{
		GRPCAddr: "127.0.0.1:9090", HTTPAddr: "127.0.0.1:8081", Store: "sqlite:./data/repool.db",
		CheckpointInterval: 10 * time.Second, ReportFlush: time.Second, StoreProbeInterval: time.Second, StoreLockWait: 30 * time.Second,
		AuditMaxAge: DefaultAuditMaxAge, AuditMaxRowsPerTenant: DefaultAuditMaxRowsPerTenant, RevokedKeyMaxAge: DefaultAuditMaxAge,
		RetentionInterval: time.Minute, RetentionBatch: retention.DefaultBatch,
		TokenTTL: 15 * time.Minute, OperatorTokenTTL: 24 * time.Hour,
		GlobalResources: budget.DefaultResources, GlobalCells: budget.DefaultCells, DefaultTenantShare: 25,
		MaxKeysPerTenant:   control.DefaultMaxKeysPerTenant,
		ShutdownGrace:      10 * time.Second,
		GRPCMaxConnections: 4096, GRPCMaxConcurrentStreams: 256, GRPCMaxConnectionIdle: 5 * time.Minute,
		GRPCHandshakeTimeout: 10 * time.Second, GRPCMaxHeaderBytes: 64 << 10,
		GRPCStreamWindow: 64 << 10, GRPCConnWindow: 1 << 20, GRPCMaxStreamIdle: time.Minute,
		GRPCMaxRecvBytes: 1 << 20, GRPCMaxCallsPerTenant: 128, GRPCMaxUnverifiedCalls: 64,
		GRPCKeepaliveTime: time.Minute, GRPCKeepaliveTimeout: 20 * time.Second, GRPCKeepaliveMinTime: 10 * time.Second,
		HASessionTimeout: 2 * time.Second, HAInterval: 250 * time.Millisecond,
		Group: store.DefaultGroup, PlacementInterval: 200 * time.Millisecond,
		GCPercent: gctune.DefaultPercent, LogLevel: "info",
	})
	for l := range limits.Count {
		if _, set := c.Limits.Get(l); !set && l.Flag() != "" {
			c.Limits.Set(l, l.Spec().Default)
		}
	}
	c.Policy = tenants.PolicyDefaults(c.Policy)
	c.HTTP = c.HTTP.WithDefaults()
	if c.HAName == "" {
		c.HAName = c.GRPCAddr
	}
	if c.GRPCMaxConnectionsPerTenant == 0 && c.DefaultTenantShare > 0 {
		c.GRPCMaxConnectionsPerTenant = max(1, c.GRPCMaxConnections*c.DefaultTenantShare/100)
	}
	return c
}

// Validate names the first bad field, after defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	for name, addr := range map[string]string{"grpc_addr": c.GRPCAddr, "http_addr": c.HTTPAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("config: %s %q: want host:port, for example 127.0.0.1:9090 (an IPv6 host in brackets: [::1]:9090)", name, addr)
		}
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if _, err := c.StoreURL(); err != nil {
		return err
	}
	if err := c.TLSFiles().Validate("tls_"); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.checkPlaintext(); err != nil {
		return err
	}
	if err := c.HTTP.Validate("http_"); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.checkLimits(); err != nil {
		return err
	}
	for _, d := range []struct {
		key      string
		v, least time.Duration
	}{
		{"grpc_max_connection_idle", c.GRPCMaxConnectionIdle, 10 * time.Millisecond},
		{"grpc_handshake_timeout", c.GRPCHandshakeTimeout, 10 * time.Millisecond},
		{"grpc_keepalive_time", c.GRPCKeepaliveTime, time.Second},
		{"grpc_keepalive_timeout", c.GRPCKeepaliveTimeout, 10 * time.Millisecond},
		{"grpc_keepalive_min_time", c.GRPCKeepaliveMinTime, 10 * time.Millisecond},
		{"grpc_max_stream_idle", c.GRPCMaxStreamIdle, 10 * time.Millisecond},
	} {
		if d.v < d.least {
			return fmt.Errorf("config: %s %v: want at least %v", d.key, d.v, d.least)
		}
	}
	switch {
	case c.CheckpointInterval < 100*time.Millisecond:
		return fmt.Errorf("config: checkpoint_interval %v is below 100ms", c.CheckpointInterval)
	case c.ReportFlush < 10*time.Millisecond || c.ReportFlush > time.Minute:
		return fmt.Errorf("config: report_flush %v is outside [10ms, 1m]", c.ReportFlush)
	case c.StoreProbeInterval < 10*time.Millisecond || c.StoreProbeInterval > time.Minute:
		return fmt.Errorf("config: store_probe_interval %v is outside [10ms, 1m]", c.StoreProbeInterval)
	case c.StoreLockWait < time.Millisecond || c.StoreLockWait > 10*time.Minute:
		return fmt.Errorf("config: store_lock_wait %v is outside [1ms, 10m]", c.StoreLockWait)
	case c.AuditMaxAge > 0 && c.AuditMaxAge < time.Second:
		return fmt.Errorf("config: audit_max_age %v: want at least 1s, or off", c.AuditMaxAge)
	case c.RevokedKeyMaxAge > 0 && c.RevokedKeyMaxAge < time.Second:
		return fmt.Errorf("config: revoked_key_max_age %v: want at least 1s, or off", c.RevokedKeyMaxAge)
	case c.RetentionInterval < time.Second || c.RetentionInterval > 24*time.Hour:
		return fmt.Errorf("config: retention_interval %v is outside [1s, 24h]", c.RetentionInterval)
	case c.RetentionBatch < 1 || c.RetentionBatch > store.MaxPruneBatch:
		return fmt.Errorf("config: retention_batch %d: want 1 to %d rows", c.RetentionBatch, store.MaxPruneBatch)
	case c.TokenTTL < 10*time.Second || c.TokenTTL > 24*time.Hour:
		return fmt.Errorf("config: token_ttl %v is outside [10s, 24h]", c.TokenTTL)
	case c.OperatorTokenTTL < time.Minute:
		return fmt.Errorf("config: operator_token_ttl %v is below 1m", c.OperatorTokenTTL)
	case c.GlobalResources < 1 || c.GlobalCells < 1 || c.GlobalResources > budget.MaxBudget || c.GlobalCells > budget.MaxBudget:
		return fmt.Errorf("config: global_resources and global_cells must be from 1 to %d", budget.MaxBudget)
	case c.DefaultTenantShare < 1 || c.DefaultTenantShare > 100:
		return fmt.Errorf("config: default_tenant_share %d: want a percentage from 1 to 100", c.DefaultTenantShare)
	case c.MaxKeysPerTenant < 1:
		return fmt.Errorf("config: max_keys_per_tenant %d: want at least 1", c.MaxKeysPerTenant)
	case c.ShutdownGrace < 0:
		return errors.New("config: shutdown_grace must not be negative")
	case c.GRPCMaxConnections < 1 || c.GRPCMaxConcurrentStreams < 1:
		return fmt.Errorf("config: grpc_max_connections %d / grpc_max_concurrent_streams %d: want at least 1", c.GRPCMaxConnections, c.GRPCMaxConcurrentStreams)
	case c.GRPCStreamWindow < 64<<10 || c.GRPCStreamWindow > 16<<20 || c.GRPCConnWindow < 64<<10 || c.GRPCConnWindow > 1<<30:
		return fmt.Errorf("config: grpc_stream_window %d / grpc_conn_window %d: want 65536 to 16777216 / 65536 to 1073741824 bytes", c.GRPCStreamWindow, c.GRPCConnWindow)
	case c.GRPCMaxConnectionsPerTenant < 1 || c.GRPCMaxConnectionsPerTenant > c.GRPCMaxConnections:
		return fmt.Errorf("config: grpc_max_connections_per_tenant %d: want 1 to grpc_max_connections (%d)", c.GRPCMaxConnectionsPerTenant, c.GRPCMaxConnections)
	case c.GRPCMaxRecvBytes < 64<<10 || c.GRPCMaxRecvBytes > 64<<20:
		return fmt.Errorf("config: grpc_max_recv_bytes %d: want 65536 to 67108864", c.GRPCMaxRecvBytes)
	case c.GRPCMaxCallsPerTenant < 1 || c.GRPCMaxUnverifiedCalls < 1:
		return fmt.Errorf("config: grpc_max_calls_per_tenant %d / grpc_max_unverified_calls %d: want at least 1", c.GRPCMaxCallsPerTenant, c.GRPCMaxUnverifiedCalls)
	case c.GRPCMaxHeaderBytes < 4096 || c.GRPCMaxHeaderBytes > 16<<20:
		return fmt.Errorf("config: grpc_max_header_bytes %d: want 4096 to 16777216", c.GRPCMaxHeaderBytes)
	case c.HA && !isPostgres(c.Store):
		return errors.New("config: ha needs a postgres:// store (the servers share it)")
	case c.HAInterval < 0 || c.HASessionTimeout < 0:
		return fmt.Errorf("config: ha_interval %v / ha_session_timeout %v: want positive durations", c.HAInterval, c.HASessionTimeout)
	case c.HASessionTimeout <= c.HAInterval:
		return fmt.Errorf("config: ha_session_timeout %v must exceed ha_interval %v", c.HASessionTimeout, c.HAInterval)
	case c.Group != store.DefaultGroup && store.ValidateGroup(c.Group) != nil:
		return fmt.Errorf("config: group %q: want a lowercase letter, then up to %d of [a-z0-9-]", c.Group, store.MaxGroupLen-1)
	case c.Group != store.DefaultGroup && !c.HA:
		return fmt.Errorf("config: group %q needs ha: a group is an active/standby set of servers sharing a postgres:// store", c.Group)
	case c.PlacementInterval <= 0:
		return fmt.Errorf("config: placement_interval %v: want a positive duration", c.PlacementInterval)
	case c.GCPercent != -1 && (c.GCPercent < 10 || c.GCPercent > 10000):
		return fmt.Errorf("config: gc_percent %d: want -1 (off, with a memory_limit) or 10..10000", c.GCPercent)
	case c.GCPercent == -1 && c.MemoryLimit == 0:
		return errors.New("config: gc_percent -1 turns the collector off and needs a memory_limit")
	case c.MemoryLimit < 0:
		return errors.New("config: memory_limit must not be negative")
	case c.MemoryLimit > 0 && c.MemoryLimit < 64<<20:
		return fmt.Errorf("config: memory_limit %d bytes is below 64MiB", c.MemoryLimit)
	case tracing.CheckEndpoint(c.OTLPEndpoint) != nil:
		return fmt.Errorf("config: otlp_endpoint: %w", tracing.CheckEndpoint(c.OTLPEndpoint))
	case !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel):
		return fmt.Errorf("config: log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// The defaults of audit retention: 30 days (revoked keys too), and
// 100,000 entries per tenant (about 20 MB of a SQLite store;
// docs/server.md, "Retention").
const (
	DefaultAuditMaxAge           = 30 * 24 * time.Hour
	DefaultAuditMaxRowsPerTenant = 100_000
)

// Retention returns the retention policy of this configuration: the
// negative ("off") settings as zero, which the policy reads as no bound.
func (c Config) Retention() retention.Policy {
	c = c.WithDefaults()
	return retention.Policy{
		AuditMaxAge: max(c.AuditMaxAge, 0), AuditMaxRows: max(c.AuditMaxRowsPerTenant, 0),
		RevokedKeyMaxAge: max(c.RevokedKeyMaxAge, 0), Batch: c.RetentionBatch,
	}
}

// StoreURL parses Config.Store (internal/store/open owns the syntax). The
// error quotes only the scheme or a SQLite path: the rest of a URL may
// hold a password.
func (c Config) StoreURL() (open.URL, error) {
	u, err := open.ParseURL(c.Store)
	if err != nil {
		return open.URL{}, fmt.Errorf("config: store: %w", err)
	}
	return u, nil
}

// isPostgres reports whether store names a PostgreSQL database.
func isPostgres(store string) bool {
	u, err := open.ParseURL(store)
	return err == nil && u.Kind == open.Postgres
}

// checkLimits names the first default of Limits out of its limit's range,
// or set for a limit that has no flag.
func (c Config) checkLimits() error {
	for l := range limits.Count {
		s := l.Spec()
		v, set := c.Limits.Get(l)
		switch {
		case l.Flag() == "" && set:
			return fmt.Errorf("config: Limits[%s] %s: the limit has no server default to set", l, limits.Format(v))
		case !set:
		case s.DefaultAboveZero && v <= 0:
			return fmt.Errorf("config: %s %s: want more than 0 as the default of every tenant (a tenant of its own may be set to 0 through the control plane)", l, limits.Format(v))
		case math.IsNaN(v) || v < s.Min || v > s.Max || s.Integer && v != math.Trunc(v):
			lo := limits.Format(s.Min)
			if s.ZeroUnbounded && s.Min == 0 {
				lo += " (no cap)"
			}
			return fmt.Errorf("config: %s %s: want %s to %s", l, limits.Format(v), lo, limits.Format(s.Max))
		}
	}
	return nil
}

// LimitRules returns the defaults and bounds of tenants' limits that this
// configuration gives: Limits for the limits with a flag, no reservation,
// and ceilings of DefaultTenantShare percent of the global budgets (at
// least 1).
func (c Config) LimitRules() control.LimitRules {
	c = c.WithDefaults()
	var d store.Limits
	for l := range limits.Count {
		v := c.Limits.Value(l)
		switch s := l.Spec(); {
		case s.Share && s.Budget == limits.ResourceBudget:
			v = float64(c.share(c.GlobalResources))
		case s.Share && s.Budget == limits.CellBudget:
			v = float64(c.share(c.GlobalCells))
		}
		d.Values.Set(l, v)
	}
	d.Policy = c.Policy.Stored()
	return control.LimitRules{Defaults: d, GlobalResources: c.GlobalResources, GlobalCells: c.GlobalCells}
}

// share is DefaultTenantShare percent of budget, at least 1.
func (c Config) share(budget int64) int64 {
	return max(1, budget*int64(c.DefaultTenantShare)/100)
}
