package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/sidecar/token"
	"github.com/repool/repool/internal/tlsconf/tlstest"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeIn writes content to dir/name and returns name.
func writeIn(t *testing.T, dir, name, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

func valid() Config {
	return Config{Providers: map[string]Provider{"eu": {Endpoint: "10.0.0.1:9090", APIKey: "rpk_x", Insecure: true}}}
}

func TestValidateNamesTheBadField(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"unix socket", func(c *Config) { c.Listen = "unix:/tmp/s.sock" }, ""},
		{"ipv6 loopback", func(c *Config) { c.Listen = "[::1]:7070" }, ""},
		{"127/8", func(c *Config) { c.Listen = "127.0.0.2:7070" }, ""},
		{"localhost", func(c *Config) { c.Listen = "localhost:7070" }, ""},
		{"all interfaces refused", func(c *Config) { c.Listen = "0.0.0.0:7070" }, "config: listen: \"0.0.0.0:7070\" is not a loopback address"},
		{"empty host refused", func(c *Config) { c.Listen = ":7070" }, "config: listen: \":7070\""},
		{"public address refused", func(c *Config) { c.Listen = "10.1.2.3:7070" }, "not a loopback address"},
		{"public address allowed remote", func(c *Config) { c.Listen, c.AllowRemote = "0.0.0.0:7070", true }, ""},
		{"listen without port", func(c *Config) { c.Listen = "127.0.0.1" }, "config: listen:"},
		{"no providers", func(c *Config) { c.Providers = nil }, "config: providers: want at least one provider"},
		{"bad provider name", func(c *Config) { c.Providers["EU!"] = c.Providers["eu"] }, "providers.EU!: provider name"},
		{"lease streams off", func(c *Config) { p := c.Providers["eu"]; p.LeaseStreams = -1; c.Providers["eu"] = p }, ""},
		{"lease streams 32", func(c *Config) { p := c.Providers["eu"]; p.LeaseStreams = 32; c.Providers["eu"] = p }, ""},
		{"lease streams over 32", func(c *Config) { p := c.Providers["eu"]; p.LeaseStreams = 33; c.Providers["eu"] = p }, "providers.eu.lease_streams 33: want 1 to 32"},
		{"lease streams below -1", func(c *Config) { p := c.Providers["eu"]; p.LeaseStreams = -2; c.Providers["eu"] = p }, "providers.eu.lease_streams -2"},
		{"missing endpoint", func(c *Config) { p := c.Providers["eu"]; p.Endpoint = ""; c.Providers["eu"] = p }, "config: providers.eu.endpoint \"\""},
		{"endpoint without port", func(c *Config) { p := c.Providers["eu"]; p.Endpoint = "vip"; c.Providers["eu"] = p }, "providers.eu.endpoint \"vip\""},
		{"endpoint as an http URL", func(c *Config) { p := c.Providers["eu"]; p.Endpoint = "http://vip:9090"; c.Providers["eu"] = p }, ""},
		{"endpoint as an http URL with a slash", func(c *Config) { p := c.Providers["eu"]; p.Endpoint = "http://[::1]:9090/"; c.Providers["eu"] = p }, ""},
		{"endpoint as an https URL", func(c *Config) {
			p := c.Providers["eu"]
			p.Endpoint, p.Insecure = "https://vip:9090", false
			c.Providers["eu"] = p
		}, ""},
		{"plaintext to a remote endpoint", func(c *Config) { p := c.Providers["eu"]; p.Insecure = false; c.Providers["eu"] = p },
			`providers.eu.endpoint "10.0.0.1:9090" is not a loopback address and TLS is off`},
		{"plaintext to a loopback endpoint", func(c *Config) {
			p := c.Providers["eu"]
			p.Endpoint, p.Insecure = "localhost:9090", false
			c.Providers["eu"] = p
		}, ""},
		{"TLS and insecure", func(c *Config) { p := c.Providers["eu"]; p.TLS.ServerName = "vip"; c.Providers["eu"] = p },
			"providers.eu.insecure: TLS is set too"},
		{"TLS cert without key", func(c *Config) {
			p := c.Providers["eu"]
			p.Insecure, p.TLS.CertFile, p.TLS.Cert = false, "c.crt", "x"
			c.Providers["eu"] = p
		}, "providers.eu.tls.cert_file and key_file go together"},
		{"TLS files not read", func(c *Config) {
			p := c.Providers["eu"]
			p.Insecure, p.TLS.CAFile = false, "ca.crt"
			c.Providers["eu"] = p
		},
			"providers.eu.tls: files not read"},
		{"TLS CA that is not PEM", func(c *Config) {
			p := c.Providers["eu"]
			p.Insecure, p.TLS.CAFile, p.TLS.CA = false, "ca.crt", "junk"
			c.Providers["eu"] = p
		}, "holds no PEM certificate"},
		{"endpoint URL with a path", func(c *Config) { p := c.Providers["eu"]; p.Endpoint = "http://vip:9090/repool"; c.Providers["eu"] = p },
			`providers.eu.endpoint "http://vip:9090/repool": want http://host:port with no path, query or user; or plain host:port`},
		{"endpoint URL without a port", func(c *Config) { p := c.Providers["eu"]; p.Endpoint = "http://vip"; c.Providers["eu"] = p }, `providers.eu.endpoint "vip"`},
		{"endpoint with another scheme", func(c *Config) { p := c.Providers["eu"]; p.Endpoint = "grpc://vip:9090"; c.Providers["eu"] = p },
			`providers.eu.endpoint "grpc://vip:9090": scheme "grpc": want host:port (or http://, https://host:port)`},
		{"no key", func(c *Config) { p := c.Providers["eu"]; p.APIKey = ""; c.Providers["eu"] = p }, "providers.eu.api_key: set exactly one of api_key, api_key_env and api_key_file (0 set)"},
		{"two key sources", func(c *Config) { p := c.Providers["eu"]; p.APIKeyEnv = "X"; c.Providers["eu"] = p }, "(2 set)"},
		{"negative timeout", func(c *Config) { p := c.Providers["eu"]; p.Timeout = -1; c.Providers["eu"] = p }, "providers.eu.timeout -1ns"},
		{"bad retry", func(c *Config) { p := c.Providers["eu"]; p.Retry.Multiplier = 0.5; c.Providers["eu"] = p }, "config: providers.eu.retry.multiplier 0.5: want at least 1"},
		{"bad breaker", func(c *Config) { p := c.Providers["eu"]; p.Breaker.FailureRatio = 2; c.Providers["eu"] = p }, "config: providers.eu.breaker.failure_ratio 2"},
		{"bad budget", func(c *Config) {
			p := c.Providers["eu"]
			p.RetryBudget.Window = time.Millisecond
			c.Providers["eu"] = p
		}, "config: providers.eu.retry_budget.window 1ms"},
		{"bad token", func(c *Config) { p := c.Providers["eu"]; p.Token.RefreshAt = 0.99; c.Providers["eu"] = p }, "config: providers.eu.token.refresh_at 0.99"},
		{"bad redis", func(c *Config) { c.Redis = &Redis{Redis: token.Redis{Addr: "nope"}} }, "config: redis.addr \"nope\""},
		{"bad log level", func(c *Config) { c.LogLevel = "loud" }, "config: log_level \"loud\""},
		{"tiny body limit", func(c *Config) { c.MaxBodyBytes = 10 }, "config: max_body_bytes 10"},
		{"allowed hosts", func(c *Config) { c.AllowedHosts = []string{"sidecar.internal", "10.0.0.1", "::1"} }, ""},
		{"allowed host with a port", func(c *Config) { c.AllowedHosts = []string{"sidecar:7070"} }, `config: allowed_hosts[0] "sidecar:7070": want a host name or an IP address`},
		{"allowed host with a scheme", func(c *Config) { c.AllowedHosts = []string{"ok", "http://x"} }, `allowed_hosts[1] "http://x"`},
		{"empty allowed host", func(c *Config) { c.AllowedHosts = []string{""} }, "allowed_hosts[0]"},
		{"allowed origins", func(c *Config) { c.AllowedOrigins = []string{"https://app.example", "http://localhost:3000/"} }, ""},
		{"null origin", func(c *Config) { c.AllowedOrigins = []string{"null"} }, `config: allowed_origins[0] "null": want an http:// or https:// origin`},
		{"origin with a path", func(c *Config) { c.AllowedOrigins = []string{"https://app.example/x"} }, "without a path"},
		{"origin of another scheme", func(c *Config) { c.AllowedOrigins = []string{"file:///tmp"} }, "want an http:// or https:// origin"},
		{"socket group on TCP", func(c *Config) { c.UnixSocketGroup = "repool" }, `config: unix_socket_group "repool": only for a unix:/path listen address`},
		{"socket group on a socket", func(c *Config) { c.Listen, c.UnixSocketGroup = "unix:/tmp/s.sock", "repool" }, ""},
		{"tiny header limit", func(c *Config) { c.HTTP.MaxHeaderBytes = 100 }, "config: max_header_bytes 100"},
		{"tiny header timeout", func(c *Config) { c.HTTP.ReadHeaderTimeout = time.Millisecond }, "config: read_header_timeout 1ms"},
		{"read timeout below the header's", func(c *Config) { c.HTTP.ReadTimeout = 5 * time.Second }, "config: read_timeout 5s: want at least read_header_timeout 10s"},
		{"tiny idle timeout", func(c *Config) { c.HTTP.IdleTimeout = time.Millisecond }, "config: idle_timeout 1ms"},
		{"no connections", func(c *Config) { c.HTTP.MaxConnections = -1 }, "config: max_connections -1"},
		{"write timeout within a provider's", func(c *Config) { c.HTTP.WriteTimeout = 3 * time.Second }, "config: write_timeout 3s: want more than providers.eu.timeout 3s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.edit(&c)
			err := c.Validate()
			if strings.Contains(fmt.Sprint(err), "too many colons") {
				t.Errorf("Validate() = %v, want our own words, not net's", err)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	c := valid().WithDefaults()
	p := c.Providers["eu"]
	if c.Listen != "127.0.0.1:7070" || c.MaxBodyBytes != 1<<20 || p.Timeout != 3*time.Second ||
		c.HTTP.MaxHeaderBytes != 64<<10 || c.HTTP.ReadHeaderTimeout != 10*time.Second || c.HTTP.ReadTimeout != 30*time.Second ||
		c.HTTP.WriteTimeout != 30*time.Second || c.HTTP.IdleTimeout != 2*time.Minute || c.HTTP.MaxConnections != 1024 ||
		p.Retry.MaxRetries != 5 || p.RetryBudget.Ratio != 0.5 || p.RetryBudget.MinPerSecond != 10 ||
		p.Breaker.FailureRatio != 0.5 || p.Breaker.MinRequests != 20 || p.Token.RefreshAt != 0.8 {
		t.Fatalf("WithDefaults() = %+v, want the documented defaults", c)
	}
}

// TestEndpointURL: an endpoint written as an http URL is the host:port the
// sidecar dials; anything that is not one stays as written, for Validate
// to refuse.
func TestEndpointURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://vip:9090":       "vip:9090",
		"http://vip:9090/":      "vip:9090",
		"http://[::1]:9090":     "[::1]:9090",
		"vip:9090":              "vip:9090",
		"https://vip:9090":      "vip:9090",
		"https://vip:9090/x":    "https://vip:9090/x",
		"http://vip:9090/x":     "http://vip:9090/x",
		"http://user@vip:9090":  "http://user@vip:9090",
		"http://vip:9090?tls=1": "http://vip:9090?tls=1",
	} {
		c := Config{Providers: map[string]Provider{"eu": {Endpoint: in, APIKey: "k"}}}.WithDefaults()
		if got := c.Providers["eu"].Endpoint; got != want {
			t.Errorf("WithDefaults() of endpoint %q = got %q, want %q", in, got, want)
		}
	}
}

func TestLoadNoFileMode(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Provider
		wantErr string
	}{
		{"key and endpoint", map[string]string{"REPOOL_ENDPOINT": "vip:9090", "REPOOL_API_KEY": "rpk_a"}, Provider{Endpoint: "vip:9090", APIKey: "rpk_a"}, ""},
		{"default endpoint", map[string]string{"REPOOL_API_KEY": "rpk_a"}, Provider{Endpoint: "127.0.0.1:9090", APIKey: "rpk_a"}, ""},
		{"no key", map[string]string{}, Provider{}, "set REPOOL_API_KEY"},
		{"insecure", map[string]string{"REPOOL_ENDPOINT": "10.0.0.1:9090", "REPOOL_API_KEY": "rpk_a", "REPOOL_INSECURE": "true"},
			Provider{Endpoint: "10.0.0.1:9090", APIKey: "rpk_a", Insecure: true}, ""},
		{"insecure not a boolean", map[string]string{"REPOOL_API_KEY": "rpk_a", "REPOOL_INSECURE": "maybe"}, Provider{}, `INSECURE "maybe": want true or false`},
		{"CA file missing", map[string]string{"REPOOL_API_KEY": "rpk_a", "REPOOL_TLS_CA_FILE": "/nonexistent/ca.crt"}, Provider{}, "providers.default.tls.ca_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load("", env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(c.Providers) != 1 || c.Providers[DefaultProvider] != tt.want {
				t.Fatalf("Load() = %+v, %v; want provider default %+v", c.Providers, err, tt.want)
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	keyFile := writeFile(t, "key", "rpk_from_file\n")
	caFile := tlstest.NewCA(t, "test CA").WriteCA(t.TempDir(), "ca.crt")
	path := writeFile(t, "sidecar.yaml", `
listen: unix:/tmp/repool-sidecar.sock
redis:
  addr: 127.0.0.1:6379
  password_env: REDIS_PW
providers:
  eu:
    endpoint: 10.0.0.1:9090
    insecure: true
    api_key_env: EU_KEY
    timeout: 1500ms
    retry: {max_retries: -1}
    breaker: {min_requests: 50, open_timeout: 2s}
  us:
    endpoint: 10.0.1.1:9090
    api_key_file: `+keyFile+`
    tls: {ca_file: `+caFile+`, server_name: repool.us}
  asia:
    endpoint: 10.0.2.1:9090
    api_key: rpk_inline
`)
	c, err := Load(path, env(map[string]string{
		"EU_KEY": "rpk_from_env", "REDIS_PW": "pw",
		"REPOOL_PROVIDER_ASIA_ENDPOINT": "10.9.9.9:9090", "REPOOL_SIDECAR_LISTEN": "127.0.0.1:7171", "REPOOL_PROVIDER_ASIA_INSECURE": "true",
	}))
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	eu, us, asia := c.Providers["eu"], c.Providers["us"], c.Providers["asia"]
	switch {
	case c.Listen != "127.0.0.1:7171":
		t.Errorf("listen = %q, want the environment's 127.0.0.1:7171", c.Listen)
	case eu.APIKey != "rpk_from_env" || us.APIKey != "rpk_from_file" || asia.APIKey != "rpk_inline":
		t.Errorf("API keys = %q, %q, %q; want them resolved from env, file, inline", eu.APIKey, us.APIKey, asia.APIKey)
	case !us.TLS.On() || !strings.Contains(us.TLS.CA, "BEGIN CERTIFICATE") || us.TLS.ServerName != "repool.us" || eu.TLS.On() || !eu.Insecure || !asia.Insecure:
		t.Errorf("TLS of us = %+v, insecure of eu, asia = %v, %v; want the CA read, and insecure from the file and the environment", us.TLS, eu.Insecure, asia.Insecure)
	case asia.Endpoint != "10.9.9.9:9090":
		t.Errorf("asia endpoint = %q, want the environment's", asia.Endpoint)
	case eu.Timeout != 1500*time.Millisecond || eu.Retry.MaxRetries != -1 || eu.Breaker.MinRequests != 50 || eu.Breaker.OpenTimeout != 2*time.Second || eu.Breaker.FailureRatio != 0.5:
		t.Errorf("eu policies = %+v, want the file's values over the defaults", eu)
	case c.Redis == nil || c.Redis.Password != "pw" || c.Redis.KeyPrefix != "repool:":
		t.Errorf("redis = %+v, want the password from REDIS_PW and the default prefix", c.Redis)
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, writeIn(t, dir, "big.key", "rpk_"+strings.Repeat("k", 4<<10)))
	tests := []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"unknown key", "providers: {eu: {endpoint: a:1, api_key: k, retries: 3}}", nil, `unknown key "retries"`},
		{"not yaml", "providers: [", nil, "config file"},
		{"syntax error on line 2", "listen: 127.0.0.1:7070\n- providers\n", nil, "yaml: line 2: did not find expected key"},
		{"flow mapping opened on line 3", "listen: 127.0.0.1:7070\nproviders:\n  eu: {endpoint: a:1, api_key: k\n", nil, "yaml: line 3: did not find expected ',' or '}'"},
		{"unset key variable", "providers: {eu: {endpoint: a:1, api_key_env: NOPE}}", nil, "providers.eu.api_key_env: environment variable NOPE is empty or unset"},
		{"missing key file", "providers: {eu: {endpoint: a:1, api_key_file: /nonexistent/key}}", nil, "providers.eu.api_key_file"},
		{"key file is a device", "providers: {eu: {endpoint: a:1, api_key_file: /dev/zero}}", nil, "providers.eu.api_key_file: /dev/zero is not a regular file"},
		{"key file is a directory", "providers: {eu: {endpoint: a:1, api_key_file: /}}", nil, "providers.eu.api_key_file: / is a directory"},
		{"key file too large", "providers: {eu: {endpoint: a:1, api_key_file: big.key}}", nil, "providers.eu.api_key_file: " + big + " is larger than 4096 bytes"},
		{"two key sources", "providers: {eu: {endpoint: a:1, api_key: k, api_key_env: K}}", map[string]string{"K": "v"}, "set exactly one"},
		{"bad bool", "providers: {eu: {endpoint: a:1, api_key: k}}", map[string]string{"REPOOL_SIDECAR_ALLOW_REMOTE": "maybe"}, "REPOOL_SIDECAR_ALLOW_REMOTE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(filepath.Join(dir, writeIn(t, dir, "c.yaml", tt.yaml)), env(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := Load("/nonexistent/sidecar.yaml", env(nil)); err == nil {
		t.Fatal("Load(missing file) = nil, want an error")
	}
}

// TestLoadRedis: every redis key of the file lands in the token cache's
// settings, and the password comes only from the environment.
func TestLoadRedis(t *testing.T) {
	path := writeFile(t, "sidecar.yaml", `
redis: {addr: "10.0.0.5:6380", key_prefix: "x:", username: u, password_env: PW, db: 2, timeout: 1s}
providers: {eu: {endpoint: a:1, api_key: k}}
`)
	c, err := Load(path, env(map[string]string{"PW": "secret"}))
	want := Redis{Redis: token.Redis{Addr: "10.0.0.5:6380", KeyPrefix: "x:", Username: "u", Password: "secret", DB: 2, Timeout: time.Second}, PasswordEnv: "PW"}
	if err != nil || c.Redis == nil || *c.Redis != want {
		t.Fatalf("Load() redis = %+v, %v; want %+v", c.Redis, err, want)
	}
	path = writeFile(t, "sidecar.yaml", "redis: {addr: a:1, password: secret}\nproviders: {eu: {endpoint: a:1, api_key: k}}\n")
	if _, err := Load(path, env(nil)); err == nil || !strings.Contains(err.Error(), `unknown key "password"`) {
		t.Fatalf("Load(redis.password in the file) = %v, want an error containing %q", err, `unknown key "password"`)
	}
}

// TestLoadCallersAndDeadlines: the keys of who may call the sidecar and of
// its HTTP server's deadlines are top-level keys of the file.
func TestLoadCallersAndDeadlines(t *testing.T) {
	path := writeFile(t, "sidecar.yaml", `
listen: unix:/tmp/repool-sidecar.sock
unix_socket_group: repool
allowed_hosts: [sidecar.internal]
allowed_origins: ["https://app.example"]
read_header_timeout: 2s
read_timeout: 5s
write_timeout: 9s
idle_timeout: 1m
max_header_bytes: 8192
max_connections: 7
providers:
  eu:
    endpoint: 10.0.0.1:9090
    insecure: true
    api_key: rpk_inline
`)
	c, err := Load(path, env(nil))
	if err != nil {
		t.Fatalf("Load() = got error %v, want nil", err)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = got error %v, want nil", err)
	}
	h := c.HTTP
	if c.UnixSocketGroup != "repool" || len(c.AllowedHosts) != 1 || c.AllowedOrigins[0] != "https://app.example" ||
		h.ReadHeaderTimeout != 2*time.Second || h.ReadTimeout != 5*time.Second || h.WriteTimeout != 9*time.Second ||
		h.IdleTimeout != time.Minute || h.MaxHeaderBytes != 8192 || h.MaxConnections != 7 {
		t.Fatalf("Load() = %+v, want every key of the file", c)
	}
	bad := writeFile(t, "bad.yaml", "read_timeout_s: 5\nproviders: {eu: {endpoint: 10.0.0.1:9090, api_key: k}}\n")
	if _, err := Load(bad, env(nil)); err == nil || !strings.Contains(err.Error(), "read_timeout_s") {
		t.Fatalf("Load(unknown key) = got %v, want an error naming read_timeout_s", err)
	}
}
