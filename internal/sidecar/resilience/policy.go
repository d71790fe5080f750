package resilience

import (
	"context"
	"fmt"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/defaults"
)

// Policy is one provider's whole resilience policy, as data: the timeout of
// a logical call, the retries, the retry budget, the circuit breaker and
// the bulkhead. The sidecar's configuration names
// policies (policies: {hard-outage: {...}}) and providers refer to them;
// NewGuard builds a provider's breaker, budget and retrier from one
// resolved Policy. The zero value of every field means its default.
type Policy struct {
	// Timeout bounds one logical call, retries included. Default 3s.
	Timeout time.Duration `yaml:"timeout"`
	// Retry is the retry policy for transient failures.
	Retry RetryPolicy `yaml:"retry"`
	// RetryBudget bounds the retries.
	RetryBudget BudgetPolicy `yaml:"retry_budget"`
	// Breaker is the circuit breaker policy.
	Breaker BreakerPolicy `yaml:"breaker"`
	// Bulkhead bounds the attempts in flight to the provider.
	Bulkhead BulkheadPolicy `yaml:"bulkhead"`
}

// DefaultTimeout is a Policy's default Timeout.
const DefaultTimeout = 3 * time.Second

// WithDefaults returns p with defaults in place of zero values.
func (p Policy) WithDefaults() Policy {
	return defaults.Fill(p, Policy{Timeout: DefaultTimeout, Retry: retryDefaults, RetryBudget: budgetDefaults, Breaker: breakerDefaults, Bulkhead: bulkheadDefaults})
}

// Validate names the first bad field by its YAML path below the policy
// ("retry.max_retries 20: ..."), after defaults.
func (p Policy) Validate() error {
	p = p.WithDefaults()
	if p.Timeout < time.Millisecond {
		return fmt.Errorf("timeout %v: want at least 1ms", p.Timeout)
	}
	if err := p.Retry.Validate(); err != nil {
		return fmt.Errorf("retry.%w", err)
	}
	if err := p.RetryBudget.Validate(); err != nil {
		return fmt.Errorf("retry_budget.%w", err)
	}
	if err := p.Breaker.Validate(); err != nil {
		return fmt.Errorf("breaker.%w", err)
	}
	if err := p.Bulkhead.Validate(); err != nil {
		return fmt.Errorf("bulkhead.%w", err)
	}
	return nil
}

// Overlay returns p with every field that o sets (not zero) taken from o,
// field by field: Overlay of {retry: {max_retries: 2}} over a policy keeps
// that policy's other retry fields.
func (p Policy) Overlay(o Policy) Policy { return defaults.Fill(o, p) }

// GuardConfig configures NewGuard.
type GuardConfig struct {
	// Provider labels the metrics and names the breaker. Required.
	Provider string
	// Policy is the provider's policy; zero fields mean their defaults. It
	// must be valid.
	Policy Policy
	// Clock tells the time for the budget, the retrier, the breaker's
	// attempt-level rules and the bulkhead, and schedules the retrier's and
	// the bulkhead's waits. Default the wall clock.
	Clock clock.Clock
	// Metrics receives the breaker's and the retrier's metrics. Default:
	// metrics that are not registered anywhere.
	Metrics *Metrics
	// Notify, Probe and OnSilence are the breaker's (BreakerConfig); the
	// probe is bounded by the policy's Timeout.
	Notify    chan<- Transition
	Probe     func(context.Context) error
	OnSilence func()
}

// Guard is one provider's resilience built from one Policy: its circuit
// breaker, its retry budget, the retrier that spends it, and its bulkhead.
// provider.Provider.Do composes them.
type Guard struct {
	// Policy is the policy it was built from, defaults applied.
	Policy   Policy
	Breaker  *Breaker
	Budget   *Budget
	Retrier  *Retrier
	Bulkhead *Bulkhead
}

// NewGuard builds the breaker, the budget, the retrier and the bulkhead of
// cfg.Policy. prev, when set, is the guard the same provider had before a
// reload, over the same connection: its breaker (with its state and counts)
// is kept if the breaker policy and the timeout (which bounds its probes)
// are unchanged, its budget (with its window) if the budget policy is, and
// its bulkhead (with its limit and the attempts in flight) if the bulkhead
// policy is.
func NewGuard(cfg GuardConfig, prev *Guard) *Guard {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	p := cfg.Policy.WithDefaults()
	g := &Guard{Policy: p}
	if prev != nil && prev.Policy.Breaker == p.Breaker && prev.Policy.Timeout == p.Timeout {
		g.Breaker = prev.Breaker
	} else {
		g.Breaker = NewBreaker(BreakerConfig{Provider: cfg.Provider, Policy: p.Breaker, Metrics: cfg.Metrics,
			Notify: cfg.Notify, Probe: cfg.Probe, ProbeTimeout: p.Timeout, OnSilence: cfg.OnSilence, Clock: cfg.Clock})
	}
	if prev != nil && prev.Policy.RetryBudget == p.RetryBudget {
		g.Budget = prev.Budget
	} else {
		g.Budget = NewBudget(p.RetryBudget, cfg.Clock)
	}
	if prev != nil && prev.Policy.Bulkhead == p.Bulkhead {
		g.Bulkhead = prev.Bulkhead
	} else {
		g.Bulkhead = NewBulkhead(BulkheadConfig{Provider: cfg.Provider, Policy: p.Bulkhead, Clock: cfg.Clock, Metrics: cfg.Metrics})
	}
	g.Retrier = NewRetrier(RetrierConfig{Provider: cfg.Provider, Policy: p.Retry, Budget: g.Budget,
		Clock: cfg.Clock, Metrics: cfg.Metrics})
	return g
}
