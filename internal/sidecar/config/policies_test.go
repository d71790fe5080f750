package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/repool/repool/internal/sidecar/resilience"
)

// loadPolicies loads a file of the providers and policies given, with the
// defaults applied, and validates it.
func loadPolicies(t *testing.T, body string) (Config, error) {
	t.Helper()
	c, err := Load(writeFile(t, "sidecar.yaml", body), env(nil))
	if err != nil {
		return Config{}, err
	}
	c = c.WithDefaults()
	return c, c.Validate()
}

// TestPoliciesResolve: a provider that names a policy gets its fields; its
// own fields override the policy's one by one; a provider that names none
// gets "default", built in or redefined; and the per-provider form alone
// means what it meant before policies existed.
func TestPoliciesResolve(t *testing.T) {
	c, err := loadPolicies(t, `
providers:
  eu:   {endpoint: 127.0.0.1:9090, api_key: k, policy: hard-outage}
  us:   {endpoint: 127.0.0.1:9091, api_key: k, policy: hard-outage, timeout: 2s, retry: {max_retries: 1}, breaker: {min_requests: 7}, bulkhead: {slow_after: 300ms}}
  asia: {endpoint: 127.0.0.1:9092, api_key: k, retry: {max_retries: 2}}
policies:
  hard-outage:
    timeout: 5s
    retry: {max_retries: 4, initial_interval: 100ms, max_interval: 1s}
    retry_budget: {ratio: 0.1}
    breaker: {min_requests: 5, open_timeout: 10s, outage_after: 1s, silence_after: -1s}
    bulkhead: {min_in_flight: 2, max_in_flight: 16}
  spare: {timeout: 1s}
`)
	if err != nil {
		t.Fatalf("load = %v", err)
	}
	hard := resilience.Policy{Timeout: 5 * time.Second,
		Retry:       resilience.RetryPolicy{MaxRetries: 4, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second},
		RetryBudget: resilience.BudgetPolicy{Ratio: 0.1},
		Breaker:     resilience.BreakerPolicy{MinRequests: 5, OpenTimeout: 10 * time.Second, OutageAfter: time.Second, SilenceAfter: -time.Second},
		Bulkhead:    resilience.BulkheadPolicy{MinInFlight: 2, MaxInFlight: 16}}
	us := hard
	us.Timeout, us.Retry.MaxRetries, us.Breaker.MinRequests, us.Bulkhead.SlowAfter = 2*time.Second, 1, 7, 300*time.Millisecond
	asia := resilience.Policy{Retry: resilience.RetryPolicy{MaxRetries: 2}}
	for name, want := range map[string]resilience.Policy{"eu": hard, "us": us, "asia": asia} {
		if got := c.Providers[name].Resilience(); got != want.WithDefaults() {
			t.Errorf("%s's policy = %+v, want %+v", name, got, want.WithDefaults())
		}
	}
	if got := c.Unused(); !reflect.DeepEqual(got, []string{"spare"}) {
		t.Errorf("Unused() = %v, want [spare]", got)
	}
	if again := c.WithDefaults(); !reflect.DeepEqual(again.Providers, c.Providers) {
		t.Errorf("WithDefaults is not idempotent: %+v then %+v", c.Providers, again.Providers)
	}

	// A redefined default is every unnamed provider's policy.
	c, err = loadPolicies(t, `
providers:
  eu: {endpoint: 127.0.0.1:9090, api_key: k}
  us: {endpoint: 127.0.0.1:9091, api_key: k, policy: default, retry: {max_retries: 1}}
policies:
  default: {timeout: 1s, retry: {max_retries: 3}}
`)
	if err != nil {
		t.Fatalf("load with a redefined default = %v", err)
	}
	if eu, us := c.Providers["eu"], c.Providers["us"]; eu.Timeout != time.Second || eu.Retry.MaxRetries != 3 ||
		us.Timeout != time.Second || us.Retry.MaxRetries != 1 || eu.Breaker != (resilience.BreakerPolicy{}).WithDefaults() {
		t.Errorf("providers over a redefined default = %+v and %+v, want timeout 1s, max_retries 3 and 1, the default breaker", eu, us)
	}
	if got := c.Unused(); len(got) != 0 {
		t.Errorf("Unused() = %v, want none: default is used", got)
	}
}

// TestPoliciesRejected: errors name the key as the file wrote it.
func TestPoliciesRejected(t *testing.T) {
	const providers = "providers:\n  eu: {endpoint: 127.0.0.1:9090, api_key: k, policy: hard}\n"
	tests := []struct{ name, yaml, want string }{
		{"unknown policy", "providers:\n  eu: {endpoint: 127.0.0.1:9090, api_key: k, policy: hrad}\npolicies:\n  hard: {}\n",
			`config: providers.eu.policy "hrad": no such policy; want one of default, hard`},
		{"bad range in a policy", providers + "policies:\n  hard: {retry: {max_retries: 20}}\n",
			"config: policies.hard.retry.max_retries 20: want at most 10"},
		{"bad timeout in a policy", providers + "policies:\n  hard: {timeout: 1us}\n",
			"config: policies.hard.timeout 1µs: want at least 1ms"},
		{"bad breaker in an unused policy", providers + "policies:\n  hard: {}\n  spare: {breaker: {failure_ratio: 2}}\n",
			"config: policies.spare.breaker.failure_ratio 2: want a value in (0, 1]"},
		{"bad policy name", providers + "policies:\n  hard: {}\n  Hard!: {}\n",
			`config: policies: policy name "Hard!"`},
		{"the provider's field over the policy's", "providers:\n  eu: {endpoint: 127.0.0.1:9090, api_key: k, policy: hard, retry: {initial_interval: 2s}}\npolicies:\n  hard: {retry: {max_interval: 1s}}\n",
			`config: providers.eu.retry.max_interval 1s: want at least initial_interval 2s (over policy "hard")`},
		{"the provider's own bad field", "providers:\n  eu: {endpoint: 127.0.0.1:9090, api_key: k, breaker: {buckets: 5000}}\n",
			"config: providers.eu.breaker.buckets 5000: want 1 to 1000"},
		{"an attempt-level rule too long", "providers:\n  eu: {endpoint: 127.0.0.1:9090, api_key: k, breaker: {silence_after: 2m}}\n",
			"config: providers.eu.breaker.silence_after 2m0s: want at most 1m"},
		{"unknown key in a policy", providers + "policies:\n  hard: {retri: {}}\n",
			`line 4: unknown key "retri"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadPolicies(t, tt.yaml)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("load = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestMaxInFlightUnderBreakerSaysWhereItGoes: the bulkhead's bound written
// where it used to be (breaker.max_in_flight) is refused with where it
// belongs now.
func TestMaxInFlightUnderBreakerSaysWhereItGoes(t *testing.T) {
	_, err := loadPolicies(t, `
providers:
  eu: {endpoint: 127.0.0.1:9090, api_key: k, breaker: {max_in_flight: 4}}
`)
	if err == nil || !strings.Contains(err.Error(), `unknown key "max_in_flight"`) || !strings.Contains(err.Error(), "under bulkhead:") {
		t.Fatalf("load with breaker.max_in_flight = %v, want it refused, saying the key is under bulkhead:", err)
	}
}
