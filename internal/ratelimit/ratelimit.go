package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	repoolv1 "github.com/repool/repool/api/repool/v1"
	"github.com/repool/repool/internal/clock"
)

// Defaults of Config.
const (
	// DefaultRate is a tenant's default sustained rate, in tokens per second.
	DefaultRate = 10
	// DefaultBurst is a tenant's default bucket size, in tokens.
	DefaultBurst = 50
	// DefaultCost is the cost of a method missing from the cost table.
	DefaultCost = 1
	// DefaultErrorLogInterval is the default minimum time between two log
	// records about backend faults.
	DefaultErrorLogInterval = time.Second
)

// DefaultCosts returns a new copy of the default cost table: methods that
// create state or scan a whole pool cost more than the rest, and opening an
// event stream costs more to damp reconnect storms. Methods not listed cost
// Config.DefaultCost.
func DefaultCosts() map[string]int {
	return map[string]int{
		repoolv1.PoolService_Register_FullMethodName:        5,
		repoolv1.PoolService_ListResources_FullMethodName:   5,
		repoolv1.PoolService_SubscribeEvents_FullMethodName: 5,
	}
}

// Config tunes a Limiter. The zero value of every field means its default;
// defaults are applied by New.
type Config struct {
	// Rate is a tenant's default sustained rate in tokens per second, used
	// by the default backend. Default DefaultRate; must be positive
	// (math.Inf(1) means unlimited).
	Rate float64
	// Burst is a tenant's default bucket size in tokens, used by the
	// default backend. Default DefaultBurst.
	Burst int
	// Costs maps a gRPC full method name ("/repool.v1.PoolService/Register")
	// to the tokens a call costs; every cost must be at least 1. nil means
	// DefaultCosts(); an empty map makes every method cost DefaultCost. The
	// map is copied by New.
	Costs map[string]int
	// DefaultCost is the cost of a method missing from Costs. Default
	// DefaultCost.
	DefaultCost int
	// Backend holds the buckets. Default a Local backend with Rate and
	// Burst (which are then ignored when a Backend is given).
	Backend Backend
	// Clock tells the time at which tokens are spent. Default the wall
	// clock.
	Clock clock.Clock
	// Logger receives backend faults at ERROR. Default discards them.
	Logger *slog.Logger
	// ErrorLogInterval is the minimum time between two fault records; the
	// faults in between are counted in the next record's "suppressed"
	// attribute (every fault is always counted in the metric). Default
	// DefaultErrorLogInterval; negative logs every fault.
	ErrorLogInterval time.Duration
	// Registerer receives the metrics. Default none: the metrics are kept
	// but not exported.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	if c.Costs == nil {
		c.Costs = DefaultCosts()
	}
	if c.DefaultCost == 0 {
		c.DefaultCost = DefaultCost
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ErrorLogInterval == 0 {
		c.ErrorLogInterval = DefaultErrorLogInterval
	}
	return c
}

// Validate reports the first field that is out of range, after defaults,
// as an error wrapping ErrInvalidArgument.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := checkLimit(c.Rate, c.Burst); err != nil {
		return err
	}
	if c.DefaultCost < 1 {
		return fmt.Errorf("%w: DefaultCost %d is below 1", ErrInvalidArgument, c.DefaultCost)
	}
	for m, cost := range c.Costs {
		if cost < 1 {
			return fmt.Errorf("%w: Costs[%q] %d is below 1", ErrInvalidArgument, m, cost)
		}
	}
	return nil
}

// checkLimit validates a rate and a burst in which 0 means the default.
func checkLimit(rps float64, burst int) error {
	switch {
	case math.IsNaN(rps) || rps < 0:
		return fmt.Errorf("%w: rate %v is not positive", ErrInvalidArgument, rps)
	case burst < 0:
		return fmt.Errorf("%w: burst %d is negative", ErrInvalidArgument, burst)
	}
	return nil
}

// Reason says why a Decision was taken.
type Reason uint8

// The reasons of a Decision.
const (
	// ReasonOK: the bucket held the request's cost, which was spent.
	ReasonOK Reason = iota
	// ReasonRateLimited: the bucket did not hold the request's cost;
	// RetryAfter says when it will.
	ReasonRateLimited
	// ReasonCostExceedsBurst: the request costs more than the bucket can
	// ever hold; it cannot pass until the tenant's burst is raised.
	ReasonCostExceedsBurst
	// ReasonFailedOpen: the backend failed, so the request was let through.
	ReasonFailedOpen
)

// String returns a short, stable description of r, fit for a log or a
// client-facing message.
func (r Reason) String() string {
	switch r {
	case ReasonOK:
		return "ok"
	case ReasonRateLimited:
		return "rate limit exceeded"
	case ReasonCostExceedsBurst:
		return "cost exceeds burst"
	case ReasonFailedOpen:
		return "limiter failed open"
	default:
		return fmt.Sprintf("Reason(%d)", uint8(r))
	}
}

// Decision is the outcome of Allow.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Reason says why.
	Reason Reason
	// RetryAfter, for ReasonRateLimited, is how long until the bucket holds
	// the request's cost, if nothing else spends it meanwhile. Zero
	// otherwise.
	RetryAfter time.Duration
	// Cost is the tokens the request costs.
	Cost int
}

// Backend holds the tenants' token buckets. Implementations must be safe
// for concurrent use. An error from Take means the backend could not decide
// (it is unreachable, timed out, ...); it must not be used for refusals.
type Backend interface {
	// Take spends cost tokens from tenant's bucket at now if the bucket
	// holds them. Otherwise it spends nothing and returns a refusal:
	// ReasonRateLimited with the time until the bucket will hold them, or
	// ReasonCostExceedsBurst if it never can.
	Take(ctx context.Context, tenant string, cost int, now time.Time) (Decision, error)
	// Set changes tenant's rate (tokens per second) and burst at now, live,
	// keeping the tokens its bucket holds (capped at the new burst). A zero
	// rate or burst means the backend's default.
	Set(tenant string, rps float64, burst int, now time.Time) error
	// Forget drops tenant's bucket and settings.
	Forget(tenant string)
}

// Limiter decides whether a tenant's request may proceed. Create one with
// New. Safe for concurrent use; it owns no goroutines and needs no cleanup.
type Limiter struct {
	backend     Backend
	clock       clock.Clock
	log         *slog.Logger
	costs       map[string]int // read-only after New
	defaultCost int
	logEvery    time.Duration

	rejected *prometheus.CounterVec
	faults   *prometheus.CounterVec

	// lastLog is the clock time, in Unix nanoseconds, of the last fault
	// logged; suppressed counts the faults not logged since.
	lastLog    atomic.Int64
	suppressed atomic.Int64
}

// New returns a Limiter configured by cfg, with its metrics registered on
// cfg.Registerer. It fails with an error wrapping ErrInvalidArgument if cfg
// is invalid or the metrics cannot be registered (for example because they
// already are).
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Backend == nil {
		local, err := NewLocal(cfg.Rate, cfg.Burst)
		if err != nil {
			return nil, err
		}
		cfg.Backend = local
	}
	l := &Limiter{
		backend:     cfg.Backend,
		clock:       cfg.Clock,
		log:         cfg.Logger.With("component", "ratelimit"),
		costs:       make(map[string]int, len(cfg.Costs)),
		defaultCost: cfg.DefaultCost,
		logEvery:    cfg.ErrorLogInterval,
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_ratelimit_rejected_total",
			Help: "Requests refused by the tenant's request rate limit.",
		}, []string{"tenant"}),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "repool_ratelimit_errors_total",
			Help: "Rate limiter backend faults; each let a request through (fail open).",
		}, []string{"tenant"}),
	}
	for m, c := range cfg.Costs {
		l.costs[m] = c
	}
	l.lastLog.Store(math.MinInt64)
	if r := cfg.Registerer; r != nil {
		for _, c := range []prometheus.Collector{l.rejected, l.faults} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("%w: registering metrics: %w", ErrInvalidArgument, err)
			}
		}
	}
	return l, nil
}

// Cost returns the tokens a call of method (a gRPC full method name)
// costs. Safe for concurrent use.
func (l *Limiter) Cost(method string) int {
	if c, ok := l.costs[method]; ok {
		return c
	}
	return l.defaultCost
}

// Allow decides whether tenant may call method now, and spends the call's
// cost if so.
//
// An allowed request returns a Decision with Allowed set and a nil error. A
// refused one returns a Decision with its Reason and, for
// ReasonRateLimited, a RetryAfter, and an error wrapping ErrLimited that
// says the same in words; nothing is spent and the refusal is counted in
// repool_ratelimit_rejected_total. If the backend fails, the request is
// allowed (ReasonFailedOpen), the fault is counted in
// repool_ratelimit_errors_total and logged at ERROR (at most once per
// Config.ErrorLogInterval), and no error is returned — unless ctx is done,
// in which case ctx's error is returned. An empty tenant is a wiring bug
// and fails with an error wrapping ErrInvalidArgument.
//
// Allow is safe for concurrent use; with the Local backend it allocates
// nothing when it allows a request.
func (l *Limiter) Allow(ctx context.Context, tenant, method string) (Decision, error) {
	if tenant == "" {
		return Decision{}, fmt.Errorf("%w: no tenant for %s", ErrInvalidArgument, method)
	}
	cost := l.Cost(method)
	now := l.clock.Now()
	d, err := l.backend.Take(ctx, tenant, cost, now)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Decision{Cost: cost}, ctxErr
		}
		l.faults.WithLabelValues(tenant).Inc()
		l.logFault(now, tenant, method, err)
		return Decision{Allowed: true, Reason: ReasonFailedOpen, Cost: cost}, nil
	}
	d.Cost = cost
	if d.Allowed {
		return d, nil
	}
	l.rejected.WithLabelValues(tenant).Inc()
	switch d.Reason {
	case ReasonCostExceedsBurst:
		d.RetryAfter = 0
		return d, fmt.Errorf("%w: %s costs %d tokens, more than the tenant's burst: it cannot pass until the limit is raised",
			ErrLimited, method, cost)
	default:
		d.Reason = ReasonRateLimited
		return d, fmt.Errorf("%w: %s costs %d tokens; retry after %v", ErrLimited, method, cost, d.RetryAfter)
	}
}

// logFault logs a backend fault at ERROR unless another was logged less
// than logEvery ago, in which case it only counts it.
func (l *Limiter) logFault(now time.Time, tenant, method string, err error) {
	if l.logEvery > 0 {
		t, last := now.UnixNano(), l.lastLog.Load()
		if last != math.MinInt64 && t-last < int64(l.logEvery) || !l.lastLog.CompareAndSwap(last, t) {
			l.suppressed.Add(1)
			return
		}
	}
	l.log.Error("rate limiter failed; request allowed",
		"tenant", tenant, "method", method, "err", err, "suppressed", l.suppressed.Swap(0))
}

// Set changes tenant's rate (tokens per second) and burst, live: the
// tokens its bucket holds are kept (capped at the new burst). A zero rate
// or burst means the default. It fails with an error wrapping
// ErrInvalidArgument, and changes nothing, if the tenant is empty, the rate
// is negative or NaN or the burst negative; with an error wrapping
// ErrBackend if the backend fails. Safe for concurrent use.
func (l *Limiter) Set(tenant string, rps float64, burst int) error {
	if tenant == "" {
		return fmt.Errorf("%w: empty tenant", ErrInvalidArgument)
	}
	if err := checkLimit(rps, burst); err != nil {
		return err
	}
	if err := l.backend.Set(tenant, rps, burst, l.clock.Now()); err != nil {
		if errors.Is(err, ErrInvalidArgument) {
			return err
		}
		return fmt.Errorf("%w: setting the rate limit of tenant %q: %w", ErrBackend, tenant, err)
	}
	// The tenant's counters exist, at 0, from its first limit on: an
	// alert's increase() sees its first refusal.
	l.rejected.WithLabelValues(tenant)
	l.faults.WithLabelValues(tenant)
	return nil
}

// Forget drops tenant's bucket, settings and metric series; call it once
// the tenant is deleted. A later request of the same tenant starts with a
// full bucket at the defaults. Safe for concurrent use.
func (l *Limiter) Forget(tenant string) {
	l.backend.Forget(tenant)
	l.rejected.DeleteLabelValues(tenant)
	l.faults.DeleteLabelValues(tenant)
}
