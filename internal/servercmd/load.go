package servercmd

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/limits"
	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/server"
	"github.com/repool/repool/internal/yamlerr"
)

// binding ties one Config field to its flag, its REPOOL_* variable and its
// YAML key (the flag name with dashes as underscores).
type binding struct {
	name  string
	usage string
	def   string
	set   func(*server.Config, string) error
}

// switches are the bindings given as bare flags (--ha means --ha=true).
var switches = map[string]bool{"insecure": true, "ha": true, "durable-reports": true, "store-shared-files": true, "store-fsync": true}

// textValue is a flag whose text a binding parses later, after the file
// and the environment. Unlike a flag.String, -h shows its default
// unquoted.
type textValue struct{ v *string }

func (t textValue) String() string {
	if t.v == nil {
		return ""
	}
	return *t.v
}
func (t textValue) Set(s string) error { *t.v = s; return nil }

// boolValue is a textValue that may be given without a value.
type boolValue struct{ textValue }

func (b boolValue) String() string {
	if b.v == nil {
		return "false" // so that -h omits a false default
	}
	return *b.v
}
func (boolValue) IsBoolFlag() bool { return true }

func str(f func(*server.Config) *string) func(*server.Config, string) error {
	return func(c *server.Config, v string) error { *f(c) = v; return nil }
}

func dur(f func(*server.Config) *time.Duration) func(*server.Config, string) error {
	return func(c *server.Config, v string) error {
		d, err := time.ParseDuration(v)
		*f(c) = d
		return err
	}
}

// offDur parses a duration, or "off", which it stores as -1ns (keep
// everything; zero would mean the default).
func offDur(f func(*server.Config) *time.Duration) func(*server.Config, string) error {
	return func(c *server.Config, v string) error {
		if v == "off" {
			*f(c) = -1
			return nil
		}
		d, err := time.ParseDuration(v)
		*f(c) = d
		return err
	}
}

func i64(f func(*server.Config) *int64) func(*server.Config, string) error {
	return func(c *server.Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		*f(c) = n
		return err
	}
}

func boolean(f func(*server.Config) *bool) func(*server.Config, string) error {
	return func(c *server.Config, v string) error {
		b, err := strconv.ParseBool(v)
		*f(c) = b
		return err
	}
}

func integer(f func(*server.Config) *int) func(*server.Config, string) error {
	return func(c *server.Config, v string) error {
		n, err := strconv.Atoi(v)
		*f(c) = n
		return err
	}
}

// bindings lists every server.Config field. A back-quoted word in a usage names
// the flag's value in -h (flag.UnquoteUsage); switches have none.
func bindings() []binding {
	d := server.Config{}.WithDefaults()
	return append(limitBindings(d), []binding{
		{"grpc-addr", "`host:port` the data plane (gRPC) listens on", d.GRPCAddr, str(func(c *server.Config) *string { return &c.GRPCAddr })},
		{"http-addr", "`host:port` the HTTP server (health, metrics, control plane) listens on", d.HTTPAddr, str(func(c *server.Config) *string { return &c.HTTPAddr })},
		{"store", "store `URL`: sqlite:PATH or postgres://...", d.Store, str(func(c *server.Config) *string { return &c.Store })},
		{"checkpoint-interval", "time between compactions of the lease journal (`duration`)", d.CheckpointInterval.String(), dur(func(c *server.Config) *time.Duration { return &c.CheckpointInterval })},
		{"report-flush", "longest time before a report's statistics reach the store (`duration`); a crash loses at most this window", d.ReportFlush.String(), dur(func(c *server.Config) *time.Duration { return &c.ReportFlush })},
		{"store-probe-interval", "time between the active server's probe writes to its store (`duration`): a store that stops taking writes makes the server not ready within it, and ready again once a probe write succeeds", d.StoreProbeInterval.String(), dur(func(c *server.Config) *time.Duration { return &c.StoreProbeInterval })},
		{"store-lock-wait", "how long a server without --ha waits for its store when another process holds it (`duration`) — a killed predecessor's lock lasts a few seconds — logging once when it starts and once when it has it, before it gives up", d.StoreLockWait.String(), dur(func(c *server.Config) *time.Duration { return &c.StoreLockWait })},
		{"audit-max-age", "the active server deletes audit entries older than this (`duration`, or off)", d.AuditMaxAge.String(), offDur(func(c *server.Config) *time.Duration { return &c.AuditMaxAge })},
		{"audit-max-rows-per-tenant", "the active server deletes a tenant's audit entries beyond its newest `n` (or off)", strconv.FormatInt(d.AuditMaxRowsPerTenant, 10), func(c *server.Config, v string) error {
			if v == "off" {
				c.AuditMaxRowsPerTenant = -1
				return nil
			}
			n, err := strconv.ParseInt(v, 10, 64)
			c.AuditMaxRowsPerTenant = n
			return err
		}},
		{"revoked-key-max-age", "the active server deletes API keys revoked longer ago than this (`duration`, or off)", d.RevokedKeyMaxAge.String(), offDur(func(c *server.Config) *time.Duration { return &c.RevokedKeyMaxAge })},
		{"retention-interval", "time between the active server's retention rounds, which also refresh the store's size gauges (`duration`)", d.RetentionInterval.String(), dur(func(c *server.Config) *time.Duration { return &c.RetentionInterval })},
		{"retention-batch", "most rows one retention statement deletes; a round pauses 10ms after each (`n`, 1-10000)", strconv.Itoa(d.RetentionBatch), integer(func(c *server.Config) *int { return &c.RetentionBatch })},
		{"durable-reports", "answer a report only once its statistics are durable (group-committed)", "false", boolean(func(c *server.Config) *bool { return &c.DurableReports })},
		{"store-fsync", "sync a SQLite store to disk at every commit: acknowledged writes survive a power loss, not only a crash of the process", "false", boolean(func(c *server.Config) *bool { return &c.StoreFsync })},
		{"store-shared-files", "open a SQLite store whose files other local users may read (refused by default)", "false", boolean(func(c *server.Config) *bool { return &c.StoreSharedFiles })},
		{"token-ttl", "lifetime of tokens from AuthService.IssueToken, 10s to 24h (`duration`)", d.TokenTTL.String(), dur(func(c *server.Config) *time.Duration { return &c.TokenTTL })},
		{"operator-token-ttl", "lifetime of the operator token printed on first start (`duration`)", d.OperatorTokenTTL.String(), dur(func(c *server.Config) *time.Duration { return &c.OperatorTokenTTL })},
		{"global-resources", "global budget of resources (`n`)", strconv.FormatInt(d.GlobalResources, 10), i64(func(c *server.Config) *int64 { return &c.GlobalResources })},
		{"global-cells", "global budget of cells (`n`)", strconv.FormatInt(d.GlobalCells, 10), i64(func(c *server.Config) *int64 { return &c.GlobalCells })},
		{"default-tenant-share", "`percent` of each global budget that a tenant may hold when the operator set it no max_resources or max_cells (1-100)", strconv.Itoa(d.DefaultTenantShare), integer(func(c *server.Config) *int { return &c.DefaultTenantShare })},
		{"max-keys-per-tenant", "most API keys, not revoked, that a tenant may have (`n`)", strconv.Itoa(d.MaxKeysPerTenant), integer(func(c *server.Config) *int { return &c.MaxKeysPerTenant })},
		{"half-life", "quarantine and decay policy: an observation's weight halves after this long (`duration`)", d.Policy.HalfLife.String(), dur(func(c *server.Config) *time.Duration { return &c.Policy.HalfLife })},
		{"quarantine-after", "quarantine and decay policy: consecutive failures in one context that quarantine a resource for it (`n`)", strconv.Itoa(d.Policy.FailuresToQuarantine), integer(func(c *server.Config) *int { return &c.Policy.FailuresToQuarantine })},
		{"quarantine-whole-after", "quarantine and decay policy: consecutive failures over all contexts that quarantine the whole resource (`n`)", strconv.Itoa(d.Policy.FailuresToQuarantineWhole), integer(func(c *server.Config) *int { return &c.Policy.FailuresToQuarantineWhole })},
		{"quarantine-below", "quarantine and decay policy: success `rate` under which a resource is quarantined for a context, once it has quarantine-min-evidence observations (-1: off)", strconv.FormatFloat(d.Policy.QuarantineBelow, 'g', -1, 64), func(c *server.Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			c.Policy.QuarantineBelow = f
			return err
		}},
		{"quarantine-min-evidence", "quarantine and decay policy: decayed observations quarantine-below needs (`n`)", strconv.FormatFloat(d.Policy.QuarantineMinEvidence, 'g', -1, 64), func(c *server.Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			c.Policy.QuarantineMinEvidence = f
			return err
		}},
		{"cooldown-base", "quarantine and decay policy: the first quarantine's length, doubled at each relapse; a probe lease follows it (`duration`)", d.Policy.CooldownBase.String(), dur(func(c *server.Config) *time.Duration { return &c.Policy.CooldownBase })},
		{"cooldown-max", "quarantine and decay policy: the longest quarantine (`duration`)", d.Policy.CooldownMax.String(), dur(func(c *server.Config) *time.Duration { return &c.Policy.CooldownMax })},
		{"objective", "what every tenant's pool maximises unless the tenant's policy says: success (the success probability) or success_per_time (successes per unit of time, from the latency_ms outcomes carry) (`name`)", string(d.Policy.Objective), func(c *server.Config, v string) error {
			c.Policy.Objective = pool.Objective(v)
			return nil
		}},
		{"max-uses", "retirement policy: leases after which a resource is retired, unless it has its own max_uses (`n`; 0: no limit)", strconv.Itoa(d.Policy.MaxUses), integer(func(c *server.Config) *int { return &c.Policy.MaxUses })},
		{"max-age", "retirement policy: age after which a resource is retired, unless it has its own max_age (`duration`, whole seconds; 0: no limit)", d.Policy.MaxAge.String(), dur(func(c *server.Config) *time.Duration { return &c.Policy.MaxAge })},
		{"max-quarantined-share", "quarantine policy: the largest `share` of a tenant's resources in quarantine at once, as a whole or for one context; beyond it the least bad are served again (1: no cap)", strconv.FormatFloat(d.Policy.MaxQuarantinedShare, 'g', -1, 64), func(c *server.Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			c.Policy.MaxQuarantinedShare = f
			return err
		}},
		{"shutdown-grace", "bound on the graceful drain at shutdown (`duration`)", d.ShutdownGrace.String(), dur(func(c *server.Config) *time.Duration { return &c.ShutdownGrace })},
		{"http-read-header-timeout", "HTTP: time to receive a request's headers (`duration`)", d.HTTP.ReadHeaderTimeout.String(), dur(func(c *server.Config) *time.Duration { return &c.HTTP.ReadHeaderTimeout })},
		{"http-read-timeout", "HTTP: time to receive a whole request, body included (`duration`)", d.HTTP.ReadTimeout.String(), dur(func(c *server.Config) *time.Duration { return &c.HTTP.ReadTimeout })},
		{"http-write-timeout", "HTTP: time from a request's headers to the end of its answer (`duration`)", d.HTTP.WriteTimeout.String(), dur(func(c *server.Config) *time.Duration { return &c.HTTP.WriteTimeout })},
		{"http-idle-timeout", "HTTP: how long a keep-alive connection may wait for its next request (`duration`)", d.HTTP.IdleTimeout.String(), dur(func(c *server.Config) *time.Duration { return &c.HTTP.IdleTimeout })},
		{"http-max-header-bytes", "HTTP: largest request header block (`bytes`; larger: 431)", strconv.Itoa(d.HTTP.MaxHeaderBytes), integer(func(c *server.Config) *int { return &c.HTTP.MaxHeaderBytes })},
		{"http-max-connections", "HTTP: connections open at once (`n`; one more is closed at once)", strconv.Itoa(d.HTTP.MaxConnections), integer(func(c *server.Config) *int { return &c.HTTP.MaxConnections })},
		{"grpc-max-connections", "gRPC: connections open at once (`n`; one more is closed at once)", strconv.Itoa(d.GRPCMaxConnections), integer(func(c *server.Config) *int { return &c.GRPCMaxConnections })},
		{"grpc-max-concurrent-streams", "gRPC: concurrent calls and streams per connection (`n`)", strconv.Itoa(d.GRPCMaxConcurrentStreams), integer(func(c *server.Config) *int { return &c.GRPCMaxConcurrentStreams })},
		{"grpc-max-connection-idle", "gRPC: a connection without a call for this long is closed (`duration`)", d.GRPCMaxConnectionIdle.String(), dur(func(c *server.Config) *time.Duration { return &c.GRPCMaxConnectionIdle })},
		{"grpc-max-connections-per-tenant", "gRPC: connections one tenant may hold, counted by the tenant of a connection's first authenticated call (`n`; default: default-tenant-share percent of grpc-max-connections)", "0", integer(func(c *server.Config) *int { return &c.GRPCMaxConnectionsPerTenant })},
		{"grpc-max-recv-bytes", "gRPC: largest request message (`bytes`; read whole before the call is authenticated)", strconv.Itoa(d.GRPCMaxRecvBytes), integer(func(c *server.Config) *int { return &c.GRPCMaxRecvBytes })},
		{"grpc-max-calls-per-tenant", "gRPC: calls and streams in flight per tenant, counted before their requests are read (`n`)", strconv.Itoa(d.GRPCMaxCallsPerTenant), integer(func(c *server.Config) *int { return &c.GRPCMaxCallsPerTenant })},
		{"grpc-max-unverified-calls", "gRPC: calls in flight, on all connections, whose credential needs the store to check (`n`)", strconv.Itoa(d.GRPCMaxUnverifiedCalls), integer(func(c *server.Config) *int { return &c.GRPCMaxUnverifiedCalls })},
		{"grpc-max-stream-idle", "gRPC: a Leases stream without a call for this long is ended (`duration`)", d.GRPCMaxStreamIdle.String(), dur(func(c *server.Config) *time.Duration { return &c.GRPCMaxStreamIdle })},
		{"grpc-stream-window", "gRPC: HTTP/2 flow-control window of a stream, fixed (`bytes`)", strconv.Itoa(d.GRPCStreamWindow), integer(func(c *server.Config) *int { return &c.GRPCStreamWindow })},
		{"grpc-conn-window", "gRPC: HTTP/2 flow-control window of a connection, fixed (`bytes`)", strconv.Itoa(d.GRPCConnWindow), integer(func(c *server.Config) *int { return &c.GRPCConnWindow })},
		{"grpc-handshake-timeout", "gRPC: time to set up a connection, HTTP/2 preface included (`duration`)", d.GRPCHandshakeTimeout.String(), dur(func(c *server.Config) *time.Duration { return &c.GRPCHandshakeTimeout })},
		{"grpc-max-header-bytes", "gRPC: largest metadata of a call (`bytes`)", strconv.Itoa(d.GRPCMaxHeaderBytes), integer(func(c *server.Config) *int { return &c.GRPCMaxHeaderBytes })},
		{"grpc-keepalive-time", "gRPC: the server pings a connection quiet for this long (`duration`)", d.GRPCKeepaliveTime.String(), dur(func(c *server.Config) *time.Duration { return &c.GRPCKeepaliveTime })},
		{"grpc-keepalive-timeout", "gRPC: a connection that does not answer the ping within this is closed (`duration`)", d.GRPCKeepaliveTimeout.String(), dur(func(c *server.Config) *time.Duration { return &c.GRPCKeepaliveTimeout })},
		{"grpc-keepalive-min-time", "gRPC: a client that pings more often than this is disconnected (`duration`)", d.GRPCKeepaliveMinTime.String(), dur(func(c *server.Config) *time.Duration { return &c.GRPCKeepaliveMinTime })},
		{"ha", "join the active/standby group (postgres store only)", "false", boolean(func(c *server.Config) *bool { return &c.HA })},
		{"ha-name", "this server's `name` in the leader election (default: the gRPC address)", "", str(func(c *server.Config) *string { return &c.HAName })},
		{"ha-session-timeout", "how long a silent leader keeps the lock (`duration`)", d.HASessionTimeout.String(), dur(func(c *server.Config) *time.Duration { return &c.HASessionTimeout })},
		{"ha-interval", "how often the leader checks its session, and a standby's pause before reconnecting (a standby waits for the lock in the database; `duration`)", d.HAInterval.String(), dur(func(c *server.Config) *time.Duration { return &c.HAInterval })},
		{"group", "the `name` of the group of servers this one joins (tenant-sharded groups; needs --ha)", d.Group, str(func(c *server.Config) *string { return &c.Group })},
		{"placement-interval", "how often a group's active server reads where tenants are placed (`duration`)", d.PlacementInterval.String(), dur(func(c *server.Config) *time.Duration { return &c.PlacementInterval })},
		{"gc-percent", "garbage collector target, as GOGC (`percent`; -1: off, needs --memory-limit; GOGC wins if set)", strconv.Itoa(d.GCPercent), integer(func(c *server.Config) *int { return &c.GCPercent })},
		{"memory-limit", "soft memory limit, as GOMEMLIMIT (`size`: bytes or 512MiB, 2GiB; 0: none; GOMEMLIMIT wins if set)", "0", func(c *server.Config, v string) error {
			n, err := server.ParseBytes(v)
			c.MemoryLimit = n
			return err
		}},
		{"log-level", "least severe `level` logged: debug, info, warn or error (debug: a line per data-plane call, with its trace id)", d.LogLevel, str(func(c *server.Config) *string { return &c.LogLevel })},
		{"otlp-endpoint", "export OpenTelemetry spans of data-plane calls to this OTLP/HTTP collector (`URL`, http://HOST:4318); empty: off", "", str(func(c *server.Config) *string { return &c.OTLPEndpoint })},
		{"tls-cert", "serve gRPC and HTTP over TLS with this certificate chain (PEM `file`; with --tls-key; re-read on SIGHUP and on change)", "", str(func(c *server.Config) *string { return &c.TLSCert })},
		{"tls-key", "private key of --tls-cert (PEM `file`)", "", str(func(c *server.Config) *string { return &c.TLSKey })},
		{"tls-client-ca", "require client certificates signed by these CAs (PEM `file`; mutual TLS)", "", str(func(c *server.Config) *string { return &c.TLSClientCA })},
		{"insecure", "allow listening on a non-loopback address without TLS (plaintext on the network)", "false", boolean(func(c *server.Config) *bool { return &c.Insecure })},
	}...)
}

// limitBindings are the bindings of Config.Limits: one for each limit of
// the internal/limits table that has a server flag, named for the limit
// (--max-lease-streams, max_lease_streams), its default d's. A whole
// number parses as an int, a rate as a float.
func limitBindings(d server.Config) []binding {
	var out []binding
	for l := range limits.Count {
		if l.Flag() == "" {
			continue
		}
		def := strconv.FormatFloat(d.Limits.Value(l), 'g', -1, 64)
		if l.Spec().Integer {
			def = strconv.Itoa(int(d.Limits.Value(l)))
		}
		out = append(out, binding{l.Flag(), l.Spec().FlagUsage, def, func(c *server.Config, v string) error {
			if !l.Spec().Integer {
				f, err := strconv.ParseFloat(v, 64)
				c.Limits.Set(l, f)
				return err
			}
			n, err := strconv.Atoi(v)
			c.Limits.Set(l, float64(n))
			return err
		}})
	}
	return out
}

func envName(flagName string) string {
	return "REPOOL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Load builds the configuration from, in increasing precedence: defaults,
// the YAML file named by --config (or REPOOL_CONFIG), REPOOL_* environment
// variables, and flags. It registers its flags on fs and parses args.
func Load(fs *flag.FlagSet, args []string, getenv func(string) string) (server.Config, error) {
	cfg, err := load(fs, args, getenv, bindings())
	if err != nil {
		return server.Config{}, err
	}
	return cfg.WithDefaults(), cfg.Validate()
}

// LoadStore resolves Config.Store alone, as Load does: --store, then
// REPOOL_STORE, then the YAML file named by --config (or REPOOL_CONFIG),
// then the default. It is for tools that open the server's store, such as
// `server admin-token`: it registers only --store and --config on fs, which
// may hold the tool's own flags, and parses args. The file is read whole,
// so an unknown key or a value that does not parse fails here too; the
// other fields' environment variables are ignored.
func LoadStore(fs *flag.FlagSet, args []string, getenv func(string) string) (string, error) {
	cfg, err := loadOwn(fs, args, getenv, "store")
	return cfg.Store, err
}

// loadOwn is LoadStore for a command that reads more of the server's
// settings: the bindings named (store among them) as flags, REPOOL_*
// variables and --config keys, with the server's defaults.
func loadOwn(fs *flag.FlagSet, args []string, getenv func(string) string, names ...string) (server.Config, error) {
	var own []binding
	for _, b := range bindings() {
		if slices.Contains(names, b.name) {
			own = append(own, b)
		}
	}
	cfg, err := load(fs, args, getenv, own)
	if err != nil {
		return server.Config{}, err
	}
	cfg = cfg.WithDefaults()
	if _, err := cfg.StoreURL(); err != nil {
		return server.Config{}, err
	}
	return cfg, nil
}

// load registers --config and a flag for each of own on fs, parses args,
// and sets a Config, without defaults, from the file (which may hold any
// binding's key), then own's environment variables, then own's flags.
func load(fs *flag.FlagSet, args []string, getenv func(string) string, own []binding) (server.Config, error) {
	vals := make(map[string]*string, len(own))
	for _, b := range own {
		usage := fmt.Sprintf("%s (env %s)", b.usage, envName(b.name))
		v := b.def
		vals[b.name] = &v
		if switches[b.name] {
			fs.Var(boolValue{textValue{&v}}, b.name, usage)
		} else {
			fs.Var(textValue{&v}, b.name, usage)
		}
	}
	file := fs.String("config", "", "YAML configuration `file` (env REPOOL_CONFIG); keys are the flag names with underscores")
	if err := fs.Parse(args); err != nil {
		return server.Config{}, err
	}
	if fs.NArg() > 0 {
		return server.Config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var cfg server.Config
	path := *file
	if path == "" {
		path = getenv("REPOOL_CONFIG")
	}
	if path != "" {
		if err := loadFile(&cfg, path); err != nil {
			return server.Config{}, err
		}
	}
	for _, b := range own {
		if v := getenv(envName(b.name)); v != "" {
			if err := b.set(&cfg, v); err != nil {
				return server.Config{}, fmt.Errorf("%s: %w", envName(b.name), err)
			}
		}
	}
	var ferr error
	byName := map[string]binding{}
	for _, b := range own {
		byName[b.name] = b
	}
	fs.Visit(func(f *flag.Flag) {
		if b, ok := byName[f.Name]; ok && ferr == nil {
			if err := b.set(&cfg, *vals[f.Name]); err != nil {
				ferr = fmt.Errorf("--%s: %w", f.Name, err)
			}
		}
	})
	if ferr != nil {
		return server.Config{}, ferr
	}
	return cfg, nil
}

// loadFile sets cfg from the YAML file at path: a mapping from the flag
// names, with underscores, to scalar values. An empty or comment-only file
// sets nothing.
func loadFile(cfg *server.Config, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var m map[string]string
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("config file %s: %w", path, yamlerr.Fix(err))
	}
	known := map[string]binding{}
	for _, b := range bindings() {
		known[strings.ReplaceAll(b.name, "-", "_")] = b
	}
	for k, v := range m {
		b, ok := known[k]
		if !ok {
			return fmt.Errorf("config file %s: unknown key %q", path, k)
		}
		if err := b.set(cfg, v); err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
	}
	return nil
}
