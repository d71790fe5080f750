package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/repool/repool/internal/testenv"
)

// The secrets FuzzLoad's configurations can reach: from the environment
// and from the key file next to the configuration file.
const (
	fuzzEnvKey   = "rpk_fromTheEnvironment0123"
	fuzzFileKey  = "rpk_fromTheKeyFile4567"
	fuzzRedisPW  = "redis-password-89ab"
	fuzzKeyFile  = "eu.key"
	fuzzFileName = "sidecar.yaml"
)

// FuzzLoad feeds arbitrary files to Load, then WithDefaults and Validate,
// as cmd/sidecar does. No error of either ever quotes an API key (inline,
// from the environment or from a key file) or the Redis password. A
// refused file yields no configuration. An accepted one keeps its
// defaults (WithDefaults changes it no more), and written back as YAML it
// loads again to the same configuration (parse, render, parse). No input
// takes longer than testenv.FuzzBound.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, fuzzKeyFile), []byte(fuzzFileKey+"\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, fuzzFileName)
	getenv := env(map[string]string{"EU_KEY": fuzzEnvKey, "REDIS_PW": fuzzRedisPW})
	for _, doc := range []string{
		// The package documentation's example.
		`listen: 127.0.0.1:7070
allow_remote: false
max_body_bytes: 1048576
shutdown_grace: 10s
log_level: info
redis:
  addr: 127.0.0.1:6379
  key_prefix: "repool:"
  username: ""
  password_env: REDIS_PW
  db: 0
  timeout: 250ms
providers:
  eu:
    endpoint: 10.0.0.100:9090
    api_key_env: EU_KEY
    timeout: 3s
    token: {skew: 30s, refresh_at: 0.8, issue_timeout: 5s}
    retry: {max_retries: 3, initial_interval: 50ms, multiplier: 2,
            max_interval: 1s, randomization_factor: 1, max_elapsed: 2s}
    retry_budget: {ratio: 0.2, min_per_second: 10, window: 10s}
    breaker: {failure_ratio: 0.5, min_requests: 20, window: 10s,
              buckets: 10, open_timeout: 5s, half_open_probes: 3}
`,
		// docs/sidecar.md's example, with the key file next to this one.
		`listen: 127.0.0.1:7070
redis:
  addr: 127.0.0.1:6379
providers:
  eu:
    endpoint: 10.0.0.100:9090
    api_key_env: EU_KEY
  us:
    endpoint: 10.1.0.100:9090
    api_key_file: ` + fuzzKeyFile + `
    timeout: 2s
    breaker: {min_requests: 50, open_timeout: 10s}
`,
		"listen: unix:/tmp/repool-sidecar.sock\nproviders: {asia: {endpoint: 10.0.2.1:9090, api_key: rpk_inlineKey0123}}\n",
		"providers: {eu: {endpoint: a:1, api_key: k, retries: 3}}",
		"providers: [",
		"providers: {eu: {endpoint: a:1, api_key_env: NOPE}}",
		"providers: {eu: {endpoint: a:1, api_key_file: /nonexistent/key}}",
		"providers: {eu: {endpoint: a:1, api_key_file: /}}",
		"providers: {eu: {endpoint: a:1, api_key: k, api_key_env: EU_KEY}}",
		"providers: {eu: {endpoint: rpk_inlineKey0123, api_key: rpk_inlineKey0123}}",
		"providers: {eu: {endpoint: a:1, api_key: rpk_inline Key0123}}",
		"providers: {eu: {endpoint: a:1, api_key: {rpk_inlineKey0123: 1}}}",
		"providers: {EU!: {endpoint: a:1, api_key: k}}",
		"listen: 0.0.0.0:7070\nproviders: {eu: {endpoint: a:1, api_key: k}}",
		"redis: {addr: \"10.0.0.5:6380\", key_prefix: \"x:\", username: u, password_env: REDIS_PW, db: 2, timeout: 1s}\nproviders: {eu: {endpoint: a:1, api_key: k}}\n",
		"redis: {addr: a:1, password: secret}\nproviders: {eu: {endpoint: a:1, api_key: k}}\n",
		"providers: {eu: {endpoint: a:1, api_key: k, retry: {multiplier: 0.5}, breaker: {failure_ratio: 2}}}",
		"", "---", "a: &a [*a, *a]",
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if err := os.WriteFile(path, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		secrets := append(inlineKeys(doc), fuzzEnvKey, fuzzFileKey, fuzzRedisPW)
		var c Config
		var err error
		testenv.Timed(t, "Load and Validate", func() {
			c, err = Load(path, getenv)
			if err == nil {
				c = c.WithDefaults()
				err = c.Validate()
			} else if !reflect.DeepEqual(c, Config{}) {
				t.Fatalf("Load() = %+v with error %v, want no configuration", c, err)
			}
		})
		if err != nil {
			testenv.NoSecret(t, "Load or Validate error", err.Error(), secrets...)
			return
		}
		if again := c.WithDefaults(); !reflect.DeepEqual(again, c) {
			t.Fatalf("WithDefaults(WithDefaults(c)) = %+v, want %+v", again, c)
		}
		raw, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("yaml.Marshal(loaded configuration) = %v", err)
		}
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := Load(path, getenv)
		if err == nil {
			again = again.WithDefaults()
			err = again.Validate()
		}
		if err != nil {
			t.Fatalf("Load(Marshal(Load(doc))) = %v, want the configuration again; rendered:\n%s", err, raw)
		}
		// An empty list renders as [] and loads as an empty, not a nil,
		// slice: the same configuration.
		for _, cfg := range []*Config{&again, &c} {
			if len(cfg.AllowedHosts) == 0 {
				cfg.AllowedHosts = nil
			}
			if len(cfg.AllowedOrigins) == 0 {
				cfg.AllowedOrigins = nil
			}
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("Load(Marshal(Load(doc))) = %+v, want %+v; rendered:\n%s", again, c, raw)
		}
	})
}

// inlineKeys returns the api_key values of doc that it holds once: a
// message that quotes one of them quotes the key, not a coincidence.
func inlineKeys(doc []byte) []string {
	var c struct {
		Providers map[string]struct {
			APIKey string `yaml:"api_key"`
		} `yaml:"providers"`
	}
	_ = yaml.Unmarshal(doc, &c) // whatever part decodes
	var keys []string
	for _, p := range c.Providers {
		if k := strings.TrimSpace(p.APIKey); bytes.Count(doc, []byte(k)) == 1 {
			keys = append(keys, k)
		}
	}
	return keys
}
