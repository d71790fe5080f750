package server

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/repool/repool/internal/budget"
	"github.com/repool/repool/internal/ratelimit"
)

// Config is the server's configuration. Every field can be set in the YAML
// file, as a REPOOL_* environment variable and as a flag (see cmd/server).
// The zero value of every field means its default, applied by
// WithDefaults.
type Config struct {
	// GRPCAddr is the data plane's listen address (h2c). Default
	// 127.0.0.1:9090.
	GRPCAddr string
	// HTTPAddr serves health, metrics and the control plane. Default
	// 127.0.0.1:8081.
	HTTPAddr string
	// Store is sqlite:PATH or postgres://... Default sqlite:./data/repool.db.
	Store string
	// CheckpointInterval is the time between checkpoint rounds. Default 10s.
	CheckpointInterval time.Duration
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
	// RatePerSecond and Burst are a tenant's default request limit.
	// Defaults ratelimit.DefaultRate and ratelimit.DefaultBurst.
	RatePerSecond float64
	Burst         int
	// MaxStreams is a tenant's default limit on event streams. Default 8.
	MaxStreams int
	// MaxLeases is a tenant's default limit on outstanding leases; 0 means
	// none. Default 0.
	MaxLeases int
	// ShutdownGrace bounds the graceful drain on shutdown. Default 10s.
	ShutdownGrace time.Duration
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
	// HAInterval is how often a standby tries the lock and the leader
	// checks its session. Default 250ms.
	HAInterval time.Duration
	// GCPercent is the garbage collector's target (GOGC) that TuneRuntime
	// applies: the heap may grow by this percentage of the live heap
	// before a collection. -1 turns the collector off and needs a
	// MemoryLimit. Default 400.
	GCPercent int
	// MemoryLimit is the soft memory limit (GOMEMLIMIT) in bytes that
	// TuneRuntime applies; the collector runs as often as it must to stay
	// under it. 0 means none. Default 0.
	MemoryLimit int64
	// LogLevel is the least severe level that cmd/server logs: debug,
	// info, warn or error. Default info.
	LogLevel string
}

// WithDefaults returns c with defaults in place of zero values.
func (c Config) WithDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.GRPCAddr, "127.0.0.1:9090")
	def(&c.HTTPAddr, "127.0.0.1:8081")
	def(&c.Store, "sqlite:./data/repool.db")
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 10 * time.Second
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = 15 * time.Minute
	}
	if c.OperatorTokenTTL == 0 {
		c.OperatorTokenTTL = 24 * time.Hour
	}
	if c.GlobalResources == 0 {
		c.GlobalResources = budget.DefaultResources
	}
	if c.GlobalCells == 0 {
		c.GlobalCells = budget.DefaultCells
	}
	if c.RatePerSecond == 0 {
		c.RatePerSecond = ratelimit.DefaultRate
	}
	if c.Burst == 0 {
		c.Burst = ratelimit.DefaultBurst
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 8
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.HAName == "" {
		c.HAName = c.GRPCAddr
	}
	if c.HASessionTimeout == 0 {
		c.HASessionTimeout = 2 * time.Second
	}
	if c.HAInterval == 0 {
		c.HAInterval = 250 * time.Millisecond
	}
	if c.GCPercent == 0 {
		c.GCPercent = 400
	}
	def(&c.LogLevel, "info")
	return c
}

// Validate names the first bad field, after defaults.
func (c Config) Validate() error {
	c = c.WithDefaults()
	for name, addr := range map[string]string{"grpc_addr": c.GRPCAddr, "http_addr": c.HTTPAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("config: %s %q: %v", name, addr, err)
		}
	}
	if err := validStore(c.Store); err != nil {
		return err
	}
	switch {
	case c.CheckpointInterval < 100*time.Millisecond:
		return fmt.Errorf("config: checkpoint_interval %v is below 100ms", c.CheckpointInterval)
	case c.TokenTTL < time.Minute || c.TokenTTL > 24*time.Hour:
		return fmt.Errorf("config: token_ttl %v is outside [1m, 24h]", c.TokenTTL)
	case c.OperatorTokenTTL < time.Minute:
		return fmt.Errorf("config: operator_token_ttl %v is below 1m", c.OperatorTokenTTL)
	case c.GlobalResources < 1 || c.GlobalCells < 1:
		return errors.New("config: global_resources and global_cells must be positive")
	case math.IsNaN(c.RatePerSecond) || math.IsInf(c.RatePerSecond, 0) || c.RatePerSecond < 0 || c.Burst < 1:
		return fmt.Errorf("config: rate_per_second %v / burst %d: want a finite positive rate and a positive burst", c.RatePerSecond, c.Burst)
	case c.MaxStreams < 0 || c.MaxLeases < 0:
		return errors.New("config: max_streams and max_leases must not be negative")
	case c.ShutdownGrace < 0:
		return errors.New("config: shutdown_grace must not be negative")
	case c.HA && !strings.HasPrefix(c.Store, "postgres"):
		return errors.New("config: ha needs a postgres:// store (the servers share it)")
	case c.HAInterval < 0 || c.HASessionTimeout < 0:
		return fmt.Errorf("config: ha_interval %v / ha_session_timeout %v: want positive durations", c.HAInterval, c.HASessionTimeout)
	case c.HASessionTimeout <= c.HAInterval:
		return fmt.Errorf("config: ha_session_timeout %v must exceed ha_interval %v", c.HASessionTimeout, c.HAInterval)
	case c.GCPercent != -1 && (c.GCPercent < 10 || c.GCPercent > 10000):
		return fmt.Errorf("config: gc_percent %d: want -1 (off, with a memory_limit) or 10..10000", c.GCPercent)
	case c.GCPercent == -1 && c.MemoryLimit == 0:
		return errors.New("config: gc_percent -1 turns the collector off and needs a memory_limit")
	case c.MemoryLimit < 0:
		return errors.New("config: memory_limit must not be negative")
	case c.MemoryLimit > 0 && c.MemoryLimit < 64<<20:
		return fmt.Errorf("config: memory_limit %d bytes is below 64MiB", c.MemoryLimit)
	case !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel):
		return fmt.Errorf("config: log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

// validStore checks the scheme of Config.Store. The error quotes only the
// scheme: the rest of a URL may hold a password.
func validStore(url string) error {
	if !strings.HasPrefix(url, "sqlite:") && !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		scheme, _, _ := strings.Cut(url, ":")
		return fmt.Errorf("config: store: scheme %q: want sqlite:PATH or postgres://...", scheme)
	}
	return nil
}
