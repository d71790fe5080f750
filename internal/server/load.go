package server

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// binding ties one Config field to its flag, its REPOOL_* variable and its
// YAML key (the flag name with dashes as underscores).
type binding struct {
	name  string
	usage string
	def   string
	set   func(*Config, string) error
}

// switches are the bindings given as bare flags (--ha means --ha=true).
var switches = map[string]bool{"ha": true}

// boolValue is a string-valued flag that may be given without a value.
type boolValue struct{ v *string }

func (b boolValue) String() string {
	if b.v == nil {
		return ""
	}
	return *b.v
}
func (b boolValue) Set(s string) error { *b.v = s; return nil }
func (b boolValue) IsBoolFlag() bool   { return true }

func str(f func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *f(c) = v; return nil }
}

func dur(f func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		*f(c) = d
		return err
	}
}

func i64(f func(*Config) *int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		*f(c) = n
		return err
	}
}

func integer(f func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		*f(c) = n
		return err
	}
}

func bindings() []binding {
	d := Config{}.WithDefaults()
	return []binding{
		{"grpc-addr", "gRPC (h2c) listen address", d.GRPCAddr, str(func(c *Config) *string { return &c.GRPCAddr })},
		{"http-addr", "HTTP listen address (health, metrics, control plane)", d.HTTPAddr, str(func(c *Config) *string { return &c.HTTPAddr })},
		{"store", "store: sqlite:PATH or postgres://...", d.Store, str(func(c *Config) *string { return &c.Store })},
		{"checkpoint-interval", "time between checkpoints", d.CheckpointInterval.String(), dur(func(c *Config) *time.Duration { return &c.CheckpointInterval })},
		{"token-ttl", "lifetime of tokens from AuthService.IssueToken", d.TokenTTL.String(), dur(func(c *Config) *time.Duration { return &c.TokenTTL })},
		{"operator-token-ttl", "lifetime of the operator token printed on first start", d.OperatorTokenTTL.String(), dur(func(c *Config) *time.Duration { return &c.OperatorTokenTTL })},
		{"global-resources", "global budget of resources", strconv.FormatInt(d.GlobalResources, 10), i64(func(c *Config) *int64 { return &c.GlobalResources })},
		{"global-cells", "global budget of cells", strconv.FormatInt(d.GlobalCells, 10), i64(func(c *Config) *int64 { return &c.GlobalCells })},
		{"rate-per-second", "default per-tenant request rate", strconv.FormatFloat(d.RatePerSecond, 'g', -1, 64), func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			c.RatePerSecond = f
			return err
		}},
		{"burst", "default per-tenant request burst", strconv.Itoa(d.Burst), integer(func(c *Config) *int { return &c.Burst })},
		{"max-streams", "default per-tenant limit on event streams", strconv.Itoa(d.MaxStreams), integer(func(c *Config) *int { return &c.MaxStreams })},
		{"max-leases", "default per-tenant limit on outstanding leases (0: none)", strconv.Itoa(d.MaxLeases), integer(func(c *Config) *int { return &c.MaxLeases })},
		{"shutdown-grace", "bound on the graceful drain at shutdown", d.ShutdownGrace.String(), dur(func(c *Config) *time.Duration { return &c.ShutdownGrace })},
		{"ha", "join the active/standby group (postgres store only)", "false", func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			c.HA = b
			return err
		}},
		{"ha-name", "this server's name in the leader election (default: the gRPC address)", "", str(func(c *Config) *string { return &c.HAName })},
		{"ha-session-timeout", "how long a silent leader keeps the lock", d.HASessionTimeout.String(), dur(func(c *Config) *time.Duration { return &c.HASessionTimeout })},
		{"ha-interval", "how often a standby tries the lock and the leader checks its session", d.HAInterval.String(), dur(func(c *Config) *time.Duration { return &c.HAInterval })},
		{"gc-percent", "garbage collector target, as GOGC (-1: off, needs --memory-limit; GOGC wins if set)", strconv.Itoa(d.GCPercent), integer(func(c *Config) *int { return &c.GCPercent })},
		{"memory-limit", "soft memory limit, as GOMEMLIMIT: bytes or 512MiB, 2GiB (0: none; GOMEMLIMIT wins if set)", "0", func(c *Config, v string) error {
			n, err := parseBytes(v)
			c.MemoryLimit = n
			return err
		}},
	}
}

func envName(flagName string) string {
	return "REPOOL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Load builds the configuration from, in increasing precedence: defaults,
// the YAML file named by --config (or REPOOL_CONFIG), REPOOL_* environment
// variables, and flags. It registers its flags on fs and parses args.
func Load(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	bs := bindings()
	vals := make(map[string]*string, len(bs))
	for _, b := range bs {
		usage := fmt.Sprintf("%s (env %s)", b.usage, envName(b.name))
		if switches[b.name] {
			v := b.def
			vals[b.name] = &v
			fs.Var(boolValue{&v}, b.name, usage)
			continue
		}
		vals[b.name] = fs.String(b.name, b.def, usage)
	}
	file := fs.String("config", "", "YAML configuration file (env REPOOL_CONFIG); keys are the flag names with underscores")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var cfg Config
	path := *file
	if path == "" {
		path = getenv("REPOOL_CONFIG")
	}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		var m map[string]string
		if err := dec.Decode(&m); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
		known := map[string]binding{}
		for _, b := range bs {
			known[strings.ReplaceAll(b.name, "-", "_")] = b
		}
		for k, v := range m {
			b, ok := known[k]
			if !ok {
				return Config{}, fmt.Errorf("config file %s: unknown key %q", path, k)
			}
			if err := b.set(&cfg, v); err != nil {
				return Config{}, fmt.Errorf("config file %s: %s: %w", path, k, err)
			}
		}
	}
	for _, b := range bs {
		if v := getenv(envName(b.name)); v != "" {
			if err := b.set(&cfg, v); err != nil {
				return Config{}, fmt.Errorf("%s: %w", envName(b.name), err)
			}
		}
	}
	var ferr error
	byName := map[string]binding{}
	for _, b := range bs {
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
		return Config{}, ferr
	}
	return cfg.WithDefaults(), cfg.Validate()
}
