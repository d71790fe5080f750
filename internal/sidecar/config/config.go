// Package config is the sidecar's configuration: the YAML file, the
// environment overrides, defaults applied in one place (WithDefaults), and
// validation that names the bad field (Validate).
//
// The file (sidecar.yaml; every key is optional except each provider's
// endpoint and API key):
//
//	listen: 127.0.0.1:7070        # loopback host:port, or unix:/path
//	allow_remote: false           # allow a non-loopback listen address
//	unix_socket_group: ""         # group (name or id) that may use the unix socket
//	allowed_hosts: []             # Host names accepted besides loopback and the listen host
//	allowed_origins: []           # browser origins allowed to call the sidecar
//	max_body_bytes: 1048576       # larger request bodies are refused (413)
//	max_header_bytes: 65536       # larger request headers are refused (431)
//	read_header_timeout: 10s      # to receive a request's headers
//	read_timeout: 30s             # to receive a whole request, body included
//	write_timeout: 30s            # to answer (event streams: per event, 10s)
//	idle_timeout: 2m              # keep-alive connection without a request
//	max_connections: 1024         # connections open at once; more are closed
//	shutdown_grace: 10s           # drain time on SIGTERM/SIGINT
//	log_level: info               # debug, info, warn, error
//	otlp_endpoint: ""             # OTLP/HTTP collector for spans (http://HOST:4318); empty: off
//	redis:                        # optional shared token cache
//	  addr: 127.0.0.1:6379
//	  key_prefix: "repool:"
//	  username: ""
//	  password_env: REDIS_PASSWORD
//	  db: 0
//	  timeout: 250ms
//	providers:
//	  eu:
//	    endpoint: 10.0.0.100:9090   # the VIP, host:port (or http://, https://host:port)
//	    api_key_env: REPOOL_EU_KEY  # or api_key: rpk_..., or api_key_file: /path
//	    tls: {ca_file: /etc/repool/tls/ca.crt, server_name: repool.internal,
//	          cert_file: "", key_file: ""}  # client certificate for mutual TLS
//	    insecure: false             # plaintext to a non-loopback endpoint
//	    token: {skew: 30s, refresh_at: 0.8, issue_timeout: 5s}
//	    policy: hard-outage         # a named policy below; default "default"
//	    timeout: 3s                 # the provider's own policy fields, each
//	    retry: {max_retries: 3}     # over the named policy's (see Policies)
//	policies:                       # named resilience policies
//	  hard-outage:
//	    timeout: 3s                 # one logical call, retries included
//	    retry: {max_retries: 3, initial_interval: 50ms, multiplier: 2,
//	            max_interval: 1s, randomization_factor: 1, max_elapsed: 2s}
//	    retry_budget: {ratio: 0.2, min_per_second: 10, window: 10s}
//	    breaker: {failure_ratio: 0.5, min_requests: 20, window: 10s,
//	              buckets: 10, open_timeout: 5s, half_open_probes: 3,
//	              consecutive_failures: 5, consecutive_timeouts: 3,
//	              outage_after: 200ms, silence_after: 500ms}
//	    bulkhead: {min_in_flight: 4, max_in_flight: 256, slow_after: 100ms}
//
// Without a file, one provider named "default" is built from
// REPOOL_ENDPOINT (default 127.0.0.1:9090) and REPOOL_API_KEY.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/httpbounds"
	"github.com/repool/repool/internal/sidecar/resilience"
	"github.com/repool/repool/internal/sidecar/token"
	"github.com/repool/repool/internal/tlsconf"
	"github.com/repool/repool/internal/tracing"
	"github.com/repool/repool/internal/yamlerr"
)

// DefaultProvider is the name of the provider of the no-file mode.
const DefaultProvider = "default"

// DefaultPolicy is the name of the policy of providers that name none. It
// is built in (every field its default) unless policies: defines it.
const DefaultPolicy = "default"

// Config is the sidecar's configuration. The zero value of every field
// means its default (WithDefaults).
type Config struct {
	// Listen is the HTTP address: a loopback host:port (127.0.0.0/8, ::1 or
	// localhost) or unix:/path/to/socket. Default 127.0.0.1:7070.
	Listen string `yaml:"listen"`
	// AllowRemote permits a Listen address that is not loopback. The
	// sidecar holds credentials and has no authentication of its own: only
	// set this behind a network boundary you trust. Default false.
	AllowRemote bool `yaml:"allow_remote"`
	// UnixSocketGroup, for a unix:/path Listen, is the group (a name or a
	// numeric id) whose members may connect: the socket is created with
	// mode 0660 and that group. Default none: mode 0600, the owner only.
	UnixSocketGroup string `yaml:"unix_socket_group"`
	// AllowedHosts are Host header names (or addresses) accepted besides
	// loopback ones (localhost, 127.0.0.0/8, ::1) and the Listen host.
	// Any other Host is refused with 403: it is how DNS rebinding shows.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// AllowedOrigins are the browser origins (scheme://host[:port]) whose
	// requests are accepted. Any other request with an Origin header, or
	// that a browser marks cross-site (Sec-Fetch-Site), is refused with
	// 403. Default none.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// MaxBodyBytes bounds a request body. Default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// HTTP holds the HTTP server's deadlines and bounds, as top-level keys
	// (read_header_timeout, read_timeout, write_timeout, idle_timeout,
	// max_header_bytes, max_connections; see httpbounds.Config for their
	// defaults). write_timeout must exceed every provider's timeout; event
	// streams replace it with a deadline per event.
	HTTP httpbounds.Config `yaml:",inline"`
	// ShutdownGrace bounds the drain of in-flight requests at shutdown.
	// Default 10s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// LogLevel is debug, info, warn or error. Default info. At debug a
	// line per call, with its trace id.
	LogLevel string `yaml:"log_level"`
	// OTLPEndpoint, when set, exports OpenTelemetry spans of the calls
	// (the HTTP request and each gRPC attempt) to this OTLP/HTTP
	// collector (http://HOST:4318). Default empty: no spans; trace
	// context is still carried to the server and logged. Read at start.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Redis, when set, is the token cache shared with other sidecars.
	Redis *Redis `yaml:"redis"`
	// Providers are the reputation clusters, by name (the {p} of the URLs:
	// lower-case letters, digits, '-' and '_'). At least one.
	Providers map[string]Provider `yaml:"providers"`
	// Policies are named resilience policies (timeout, retry, retry_budget,
	// breaker) that providers refer to by name (Provider.Policy), named
	// like providers. "default", built in with every field its default, is
	// the policy of a provider that names none; defining it here changes it
	// for all of them. A policy no provider uses is allowed (one to switch
	// to by a reload) and reported by Unused.
	Policies map[string]resilience.Policy `yaml:"policies"`
}

// Redis configures the shared token cache: token.Redis (addr, key_prefix,
// username, db, timeout; its defaults), and the environment variable that
// holds the password.
type Redis struct {
	token.Redis `yaml:",inline"`
	// PasswordEnv names the environment variable holding the password;
	// empty for none. Load reads it into Password, which is never in the
	// file.
	PasswordEnv string `yaml:"password_env"`
}

// Provider configures one reputation cluster.
type Provider struct {
	// Endpoint is the cluster's VIP, host:port. Required. http://host:port
	// means the same (WithDefaults strips the scheme); https://host:port
	// means host:port with TLS on (tls.enabled); other URLs are refused.
	Endpoint string `yaml:"endpoint"`
	// TLS connects to the endpoint over TLS, verifying its certificate.
	// Default off, which only a loopback endpoint or Insecure allows.
	TLS TLS `yaml:"tls"`
	// Insecure allows plaintext (h2c) to an endpoint that is not loopback:
	// the API key and tokens then cross the network readable. Default off.
	Insecure bool `yaml:"insecure"`
	// APIKey, APIKeyEnv and APIKeyFile give the API key: inline, from an
	// environment variable, or from a file (trimmed; a relative path is
	// relative to the configuration file). Exactly one. Load resolves
	// APIKeyEnv and APIKeyFile into APIKey, on every (re)load.
	APIKey     string `yaml:"api_key"`
	APIKeyEnv  string `yaml:"api_key_env"`
	APIKeyFile string `yaml:"api_key_file"`
	// Token is the token cache policy.
	Token token.Policy `yaml:"token"`
	// LeaseStreams is how many of the server's Leases streams carry the
	// provider's Acquire, Release, Report and Renew calls at most
	// (leases.Client): 0 means the default, leases.DefaultStreams; -1
	// makes them unary calls. At most 32, a tenant's default
	// max_lease_streams.
	LeaseStreams int `yaml:"lease_streams"`
	// Policy names the provider's resilience policy in Config.Policies.
	// Default "default".
	Policy string `yaml:"policy"`
	// Timeout, Retry, RetryBudget, Breaker and Bulkhead are the provider's own
	// resilience settings (resilience.Policy's fields, the same keys): each
	// field set here overrides that field of the named policy, one by one;
	// a field left out (zero) is the policy's. WithDefaults resolves them:
	// afterwards they hold the provider's whole policy (Resilience).
	//
	// Timeout bounds one logical call, retries included. Default 3s.
	Timeout time.Duration `yaml:"timeout"`
	// Retry is the retry policy for transient failures.
	Retry resilience.RetryPolicy `yaml:"retry"`
	// RetryBudget bounds the retries.
	RetryBudget resilience.BudgetPolicy `yaml:"retry_budget"`
	// Breaker is the circuit breaker policy.
	Breaker resilience.BreakerPolicy `yaml:"breaker"`
	// Bulkhead bounds the attempts in flight to the provider.
	Bulkhead resilience.BulkheadPolicy `yaml:"bulkhead"`
}

// Resilience returns the provider's own resilience fields as a policy:
// after WithDefaults, its whole resolved policy.
func (p Provider) Resilience() resilience.Policy {
	return resilience.Policy{Timeout: p.Timeout, Retry: p.Retry, RetryBudget: p.RetryBudget, Breaker: p.Breaker, Bulkhead: p.Bulkhead}
}

// policyName returns the name of the provider's policy.
func (p Provider) policyName() string {
	if p.Policy == "" {
		return DefaultPolicy
	}
	return p.Policy
}

// resolvePolicy returns p with its resilience fields laid over the policy named
// (every field left out is the policy's), defaults applied. An unknown
// name (Validate refuses it) resolves over the built-in default.
func (c Config) resolvePolicy(p Provider) Provider {
	r := c.Policies[p.policyName()].Overlay(p.Resilience()).WithDefaults()
	p.Timeout, p.Retry, p.RetryBudget, p.Breaker, p.Bulkhead = r.Timeout, r.Retry, r.RetryBudget, r.Breaker, r.Bulkhead
	return p
}

// Unused returns the names of the policies that no provider uses, sorted.
func (c Config) Unused() []string {
	used := map[string]bool{}
	for _, p := range c.Providers {
		used[p.policyName()] = true
	}
	var unused []string
	for name := range c.Policies {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	return unused
}

// TLS is a provider's TLS settings. Any field set turns TLS on.
type TLS struct {
	// Enabled turns TLS on with the system's CA certificates when no
	// other field is set (https:// endpoints set it).
	Enabled bool `yaml:"enabled"`
	// CAFile is the CA certificate (PEM) the endpoint's certificate must
	// be signed by. Default the system's CA certificates.
	CAFile string `yaml:"ca_file"`
	// ServerName is the name the certificate must be valid for. Default
	// the endpoint's host.
	ServerName string `yaml:"server_name"`
	// CertFile and KeyFile are a client certificate and its key (PEM),
	// for a server that requires them (mutual TLS). Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// CA, Cert and Key are the files' contents, read by Load on every
	// (re)load: a reload after a rotation reconnects with the new ones.
	CA   string `yaml:"-"`
	Cert string `yaml:"-"`
	Key  string `yaml:"-"`
}

// On reports whether TLS is on.
func (t TLS) On() bool {
	return t.Enabled || t.CAFile != "" || t.ServerName != "" || t.CertFile != "" || t.KeyFile != ""
}

// Client returns the client side of t, as tlsconf builds it.
func (t TLS) Client() tlsconf.Client {
	return tlsconf.Client{CAPEM: t.CA, ServerName: t.ServerName, CertPEM: t.Cert, KeyPEM: t.Key}
}

// validate checks t after Load resolved its files.
func (t TLS) validate(field string) error {
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return fmt.Errorf("%s.cert_file and key_file go together: set both or neither", field)
	case t.CAFile != "" && t.CA == "", t.CertFile != "" && (t.Cert == "" || t.Key == ""):
		return fmt.Errorf("%s: files not read (config.Load reads ca_file, cert_file and key_file)", field)
	}
	if _, err := t.Client().Config(field); err != nil {
		return err
	}
	return nil
}

// WithDefaults returns c with defaults in place of zero values, in the
// configuration and in every provider and policy.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7070"
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	c.HTTP = c.HTTP.WithDefaults()
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.Redis != nil {
		r := *c.Redis
		r.Redis = r.Redis.WithDefaults()
		c.Redis = &r
	}
	providers := make(map[string]Provider, len(c.Providers))
	for name, p := range c.Providers {
		if e, ok := tlsEndpoint(p.Endpoint); ok {
			p.Endpoint, p.TLS.Enabled = e, true
		}
		p.Endpoint = plainEndpoint(p.Endpoint)
		p.Token = p.Token.WithDefaults()
		providers[name] = c.resolvePolicy(p)
	}
	c.Providers = providers
	return c
}

// providerName is what a provider may be called: it appears in URLs,
// metric labels and environment variable names.
var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate names the first bad field (by its YAML path), after defaults.
// Providers are checked in name order.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if err := CheckListen(c.Listen, c.AllowRemote); err != nil {
		return fmt.Errorf("config: listen: %w", err)
	}
	if err := c.checkCallers(); err != nil {
		return err
	}
	if err := c.HTTP.Validate(""); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var lv slog.Level
	switch {
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("config: max_body_bytes %d: want at least 1024", c.MaxBodyBytes)
	case c.ShutdownGrace < 0:
		return fmt.Errorf("config: shutdown_grace %v: must not be negative", c.ShutdownGrace)
	case tracing.CheckEndpoint(c.OTLPEndpoint) != nil:
		return fmt.Errorf("config: otlp_endpoint: %w", tracing.CheckEndpoint(c.OTLPEndpoint))
	case lv.UnmarshalText([]byte(c.LogLevel)) != nil:
		return fmt.Errorf("config: log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	if r := c.Redis; r != nil {
		switch {
		case checkHostPort(r.Addr) != nil:
			return fmt.Errorf("config: redis.addr %q: %w", r.Addr, checkHostPort(r.Addr))
		case r.DB < 0:
			return fmt.Errorf("config: redis.db %d: must not be negative", r.DB)
		case r.Timeout < time.Millisecond:
			return fmt.Errorf("config: redis.timeout %v: want at least 1ms", r.Timeout)
		}
	}
	if len(c.Providers) == 0 {
		return errors.New("config: providers: want at least one provider")
	}
	if err := c.checkPolicies(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for _, name := range c.Names() {
		p := c.Providers[name]
		if _, ok := c.Policies[p.policyName()]; !ok && p.policyName() != DefaultPolicy {
			return fmt.Errorf("config: providers.%s.policy %q: no such policy; want one of %s", name, p.Policy, strings.Join(c.policyNames(), ", "))
		}
		if err := p.validate(name); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if c.HTTP.WriteTimeout <= p.Timeout {
			return fmt.Errorf("config: write_timeout %v: want more than providers.%s.timeout %v, or its answers could not be written", c.HTTP.WriteTimeout, name, p.Timeout)
		}
	}
	return nil
}

// checkPolicies checks every named policy on its own, in name order.
func (c Config) checkPolicies() error {
	for _, name := range c.policyNames() {
		if !providerName.MatchString(name) {
			return fmt.Errorf("policies: policy name %q: want 1 to 63 of a-z, 0-9, '-' and '_', starting with a letter or digit", name)
		}
		if err := c.Policies[name].Validate(); err != nil {
			return fmt.Errorf("policies.%s.%w", name, err)
		}
	}
	return nil
}

// policyNames returns the policies' names, "default" included, sorted.
func (c Config) policyNames() []string {
	names := []string{DefaultPolicy}
	for n := range c.Policies {
		if n != DefaultPolicy {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// checkCallers checks allowed_hosts, allowed_origins and unix_socket_group.
func (c Config) checkCallers() error {
	for i, h := range c.AllowedHosts {
		if h == "" || (strings.ContainsAny(h, "/:@ []") && net.ParseIP(h) == nil) {
			return fmt.Errorf("config: allowed_hosts[%d] %q: want a host name or an IP address, without a scheme or a port", i, h)
		}
	}
	for i, o := range c.AllowedOrigins {
		if _, err := ParseOrigin(o); err != nil {
			return fmt.Errorf("config: allowed_origins[%d] %q: %w", i, o, err)
		}
	}
	if c.UnixSocketGroup != "" && !strings.HasPrefix(c.Listen, "unix:") {
		return fmt.Errorf("config: unix_socket_group %q: only for a unix:/path listen address", c.UnixSocketGroup)
	}
	return nil
}

// ParseOrigin returns the canonical form of a browser origin,
// scheme://host[:port] in lower case, as an Origin header states it: http
// or https, a host, no path, query, fragment or user. "null" (what
// sandboxed pages and files send) is not an origin that can be allowed.
func ParseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("want scheme://host[:port]: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("want an http:// or https:// origin")
	case u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", errors.New("want scheme://host[:port], without a path, query, fragment or user")
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// Names returns the provider names, sorted.
func (c Config) Names() []string {
	names := make([]string, 0, len(c.Providers))
	for n := range c.Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (p Provider) validate(name string) error {
	field := "providers." + name
	if !providerName.MatchString(name) {
		return fmt.Errorf("%s: provider name %q: want 1 to 63 of a-z, 0-9, '-' and '_', starting with a letter or digit", field, name)
	}
	if err := checkEndpoint(p.Endpoint); err != nil {
		return fmt.Errorf("%s.endpoint %q: %w", field, p.Endpoint, err)
	}
	if p.TLS.On() {
		if p.Insecure {
			return fmt.Errorf("%s.insecure: TLS is set too; insecure allows plaintext, remove one of them", field)
		}
		if err := p.TLS.validate(field + ".tls"); err != nil {
			return err
		}
	} else if host, _, _ := net.SplitHostPort(p.Endpoint); !p.Insecure && !tlsconf.IsLoopback(host) {
		return fmt.Errorf("%s.endpoint %q is not a loopback address and TLS is off, so the API key and tokens would cross the network in plaintext: "+
			"set %s.tls (ca_file, server_name; or an https:// endpoint), or %s.insecure: true to send plaintext anyway", field, p.Endpoint, field, field)
	}
	sources := 0
	for _, s := range []string{p.APIKey, p.APIKeyEnv, p.APIKeyFile} {
		if s != "" {
			sources++
		}
	}
	switch {
	case sources != 1:
		return fmt.Errorf("%s.api_key: set exactly one of api_key, api_key_env and api_key_file (%d set)", field, sources)
	case p.APIKeyEnv != "" || p.APIKeyFile != "":
		return fmt.Errorf("%s.api_key: not resolved (api_key_env and api_key_file are read by config.Load)", field)
	case strings.ContainsAny(p.APIKey, " \t\r\n"):
		return fmt.Errorf("%s.api_key: contains white space", field)
	}
	if p.LeaseStreams < -1 || p.LeaseStreams > 32 {
		return fmt.Errorf("%s.lease_streams %d: want 1 to 32 streams, 0 for the default (8) or -1 for unary calls", field, p.LeaseStreams)
	}
	if err := p.Token.Validate(); err != nil {
		return fmt.Errorf("%s.token.%w", field, err)
	}
	// Each named policy is valid on its own (checkPolicies): what fails
	// here is the provider's own field, or how it combines with the
	// policy's.
	if err := p.Resilience().Validate(); err != nil {
		if p.Policy != "" {
			return fmt.Errorf("%s.%w (over policy %q)", field, err, p.Policy)
		}
		return fmt.Errorf("%s.%w", field, err)
	}
	return nil
}

// CheckListen accepts unix:/path, and host:port with a loopback host
// (127.0.0.0/8, ::1, localhost) — or any host when allowRemote is set.
func CheckListen(addr string, allowRemote bool) error {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return fmt.Errorf("%q: want unix:/path/to/socket", addr)
		}
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, hostPortProblem(addr))
	}
	if err := checkHostPort(addr); err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if allowRemote || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address (127.0.0.0/8, ::1, localhost) or unix:/path; the sidecar holds credentials and has no authentication of its own (--allow-remote overrides this)", addr)
	}
	return nil
}

// tlsEndpoint returns host:port of an https://host:port endpoint (a
// trailing slash allowed), and whether it was one.
func tlsEndpoint(e string) (string, bool) {
	rest, ok := strings.CutPrefix(e, "https://")
	if !ok {
		return e, false
	}
	if rest = strings.TrimSuffix(rest, "/"); strings.ContainsAny(rest, "/?#@") {
		return e, false
	}
	return rest, true
}

// plainEndpoint returns an endpoint written as a URL, http://host:port (a
// trailing slash allowed), as the host:port the sidecar dials (plaintext
// unless the provider sets tls). Anything else is returned as it is, for
// checkEndpoint to judge.
func plainEndpoint(e string) string {
	rest, ok := strings.CutPrefix(e, "http://")
	if !ok {
		return e
	}
	if rest = strings.TrimSuffix(rest, "/"); strings.ContainsAny(rest, "/?#@") {
		return e
	}
	return rest
}

// checkEndpoint accepts host:port; plainEndpoint has made an http:// URL
// one. Other URLs are refused with what to write instead.
func checkEndpoint(e string) error {
	if scheme, _, ok := strings.Cut(e, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http", "https":
			return fmt.Errorf("want %s://host:port with no path, query or user; or plain host:port", strings.ToLower(scheme))
		}
		return fmt.Errorf("scheme %q: want host:port (or http://, https://host:port): gRPC", scheme)
	}
	return checkHostPort(e)
}

// hostPortProblem says, in our words, why addr is not host:port
// (net.SplitHostPort's text, "too many colons in address", is not for
// users).
func hostPortProblem(addr string) error {
	switch {
	case !strings.Contains(addr, ":"):
		return errors.New("missing port: want host:port, for example 127.0.0.1:7000")
	case strings.Count(addr, ":") > 1 && !strings.HasPrefix(addr, "["):
		return errors.New("want host:port; an IPv6 host goes in brackets, for example [::1]:7000")
	}
	return errors.New("want host:port, for example 127.0.0.1:7000 or [::1]:7000")
}

// checkHostPort accepts host:port with a non-empty host and a port number.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return hostPortProblem(addr)
	}
	if host == "" {
		return errors.New("missing host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}

// Load builds the configuration from, in increasing precedence, the YAML
// file at path (none if path is empty: the no-file mode) and the
// environment (getenv), and resolves API keys and the Redis password. It
// neither applies defaults nor validates: callers apply their flags, then
// WithDefaults and Validate.
//
// Environment overrides:
//
//	REPOOL_SIDECAR_LISTEN, REPOOL_SIDECAR_ALLOW_REMOTE (true/false),
//	REPOOL_SIDECAR_LOG_LEVEL, REPOOL_REDIS_ADDR, REPOOL_REDIS_KEY_PREFIX,
//	REPOOL_PROVIDER_<NAME>_ENDPOINT, REPOOL_PROVIDER_<NAME>_API_KEY,
//	REPOOL_PROVIDER_<NAME>_TLS_CA_FILE, REPOOL_PROVIDER_<NAME>_INSECURE
//	  (NAME upper-cased, '-' as '_'; the provider must exist),
//	REPOOL_ENDPOINT, REPOOL_API_KEY, REPOOL_TLS_CA_FILE, REPOOL_INSECURE
//	  for the provider "default" (created in the no-file mode, with
//	  endpoint 127.0.0.1:9090 unless set).
func Load(path string, getenv func(string) string) (Config, error) {
	var c Config
	dir := "."
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			err = yamlerr.Fix(err)
			if strings.Contains(err.Error(), `unknown key "max_in_flight"`) {
				// The bulkhead has a section of its own now.
				return Config{}, fmt.Errorf("config file %s: %w; the bulkhead's keys are under bulkhead: {min_in_flight, max_in_flight, slow_after}, not breaker:", path, err)
			}
			return Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
		dir = filepath.Dir(path)
	} else {
		c.Providers = map[string]Provider{DefaultProvider: {Endpoint: "127.0.0.1:9090"}}
	}
	if err := c.applyEnv(getenv); err != nil {
		return Config{}, err
	}
	if err := c.resolve(dir, getenv); err != nil {
		return Config{}, err
	}
	return c, nil
}

// applyEnv applies the environment overrides.
func (c *Config) applyEnv(getenv func(string) string) error {
	if v := getenv("REPOOL_SIDECAR_LISTEN"); v != "" {
		c.Listen = v
	}
	if v := getenv("REPOOL_SIDECAR_ALLOW_REMOTE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("REPOOL_SIDECAR_ALLOW_REMOTE %q: want true or false", v)
		}
		c.AllowRemote = b
	}
	if v := getenv("REPOOL_SIDECAR_LOG_LEVEL"); v != "" {
		c.LogLevel = v
	}
	if v := getenv("REPOOL_SIDECAR_OTLP_ENDPOINT"); v != "" {
		c.OTLPEndpoint = v
	}
	if v := getenv("REPOOL_REDIS_ADDR"); v != "" {
		if c.Redis == nil {
			c.Redis = &Redis{}
		}
		c.Redis.Addr = v
	}
	if v := getenv("REPOOL_REDIS_KEY_PREFIX"); v != "" && c.Redis != nil {
		c.Redis.KeyPrefix = v
	}
	providers := make(map[string]Provider, len(c.Providers))
	for name, p := range c.Providers {
		env := "REPOOL_PROVIDER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_"
		endpoint, key := getenv(env+"ENDPOINT"), getenv(env+"API_KEY")
		if name == DefaultProvider {
			endpoint = firstSet(endpoint, getenv("REPOOL_ENDPOINT"))
			key = firstSet(key, getenv("REPOOL_API_KEY"))
		}
		if endpoint != "" {
			p.Endpoint = endpoint
		}
		if key != "" {
			p.APIKey, p.APIKeyEnv, p.APIKeyFile = key, "", ""
		}
		ca, insecure := getenv(env+"TLS_CA_FILE"), getenv(env+"INSECURE")
		if name == DefaultProvider {
			ca = firstSet(ca, getenv("REPOOL_TLS_CA_FILE"))
			insecure = firstSet(insecure, getenv("REPOOL_INSECURE"))
		}
		if ca != "" {
			p.TLS.CAFile = ca
		}
		if insecure != "" {
			b, err := strconv.ParseBool(insecure)
			if err != nil {
				return fmt.Errorf("%sINSECURE %q: want true or false", env, insecure)
			}
			p.Insecure = b
		}
		providers[name] = p
	}
	c.Providers = providers
	return nil
}

// firstSet returns the first non-empty string.
func firstSet(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// resolve reads API keys from their environment variables and files, and
// the Redis password from its variable.
func (c *Config) resolve(dir string, getenv func(string) string) error {
	for name, p := range c.Providers {
		field := "providers." + name
		switch {
		case p.APIKey != "" && (p.APIKeyEnv != "" || p.APIKeyFile != ""),
			p.APIKeyEnv != "" && p.APIKeyFile != "":
			return fmt.Errorf("config: %s.api_key: set exactly one of api_key, api_key_env and api_key_file", field)
		case p.APIKeyEnv != "":
			if p.APIKey = getenv(p.APIKeyEnv); p.APIKey == "" {
				return fmt.Errorf("config: %s.api_key_env: environment variable %s is empty or unset", field, p.APIKeyEnv)
			}
		case p.APIKeyFile != "":
			path := p.APIKeyFile
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			raw, err := readKeyFile(path)
			if err != nil {
				return fmt.Errorf("config: %s.api_key_file: %w", field, err)
			}
			if p.APIKey = strings.TrimSpace(string(raw)); p.APIKey == "" {
				return fmt.Errorf("config: %s.api_key_file: %s is empty", field, path)
			}
		case p.APIKey == "" && name == DefaultProvider && len(c.Providers) == 1:
			return fmt.Errorf("config: %s.api_key: no API key: set REPOOL_API_KEY (or use --config)", field)
		}
		p.APIKeyEnv, p.APIKeyFile = "", ""
		for _, f := range []struct {
			key, path string
			into      *string
		}{{"ca_file", p.TLS.CAFile, &p.TLS.CA}, {"cert_file", p.TLS.CertFile, &p.TLS.Cert}, {"key_file", p.TLS.KeyFile, &p.TLS.Key}} {
			if f.path == "" {
				continue
			}
			path := f.path
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			raw, err := readFile(path, maxPEMFileBytes, "PEM")
			if err != nil {
				return fmt.Errorf("config: %s.tls.%s: %w", field, f.key, err)
			}
			*f.into = string(raw)
		}
		c.Providers[name] = p
	}
	if c.Redis != nil && c.Redis.PasswordEnv != "" {
		if c.Redis.Password = getenv(c.Redis.PasswordEnv); c.Redis.Password == "" {
			return fmt.Errorf("config: redis.password_env: environment variable %s is empty or unset", c.Redis.PasswordEnv)
		}
	}
	return nil
}

// maxKeyFileBytes bounds an API key file: it holds one key (and maybe a
// newline), far below this.
const maxKeyFileBytes = 4 << 10

// readKeyFile reads an API key file: a regular file (or a link to one) of
// at most maxKeyFileBytes. A device or a FIFO is refused before it is
// opened, so that a key file of /dev/zero or a pipe nobody writes to
// cannot hang a start or a reload.
func readKeyFile(path string) ([]byte, error) {
	return readFile(path, maxKeyFileBytes, "the API key")
}

// maxPEMFileBytes bounds a CA, certificate or key file.
const maxPEMFileBytes = 1 << 20

// readFile reads a regular file of at most limit bytes that holds what.
func readFile(path string, limit int64, what string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory; want a file holding %s", path, what)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (a device, pipe or socket); want a file holding %s", path, what)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes; want a file holding only %s", path, limit, what)
	}
	return raw, nil
}
