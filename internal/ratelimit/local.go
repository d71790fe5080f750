package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Local is the in-process Backend: one golang.org/x/time/rate token bucket
// per tenant, created full at the defaults on the tenant's first request.
// Its Take never fails. Safe for concurrent use; it owns no goroutines and
// needs no cleanup.
//
// Take spends tokens with AllowN, which changes nothing when it refuses,
// and computes the retry-after from the tokens the bucket holds. It does
// not take a reservation (ReserveN) and cancel it on refusal: when two
// refused requests interleave, Reservation.CancelAt restores only the last
// one's tokens, so every such interleaving would leak tokens and refuse the
// tenant for longer than its rate says — precisely under overload, when
// refusals are concurrent.
type Local struct {
	limit rate.Limit
	burst int

	buckets sync.Map   // tenant → *rate.Limiter
	mu      sync.Mutex // serialises Set and Forget; Take never takes it
}

var _ Backend = (*Local)(nil)

// NewLocal returns a Local backend whose buckets fill at rps tokens per
// second (math.Inf(1): unlimited) and hold burst tokens, unless Set says
// otherwise. Zero means DefaultRate or DefaultBurst. It fails with an error
// wrapping ErrInvalidArgument if rps is negative or NaN or burst negative.
func NewLocal(rps float64, burst int) (*Local, error) {
	if err := checkLimit(rps, burst); err != nil {
		return nil, err
	}
	if rps == 0 {
		rps = DefaultRate
	}
	if burst == 0 {
		burst = DefaultBurst
	}
	return &Local{limit: toLimit(rps), burst: burst}, nil
}

// toLimit converts a rate in tokens per second to a rate.Limit; +Inf means
// unlimited, which package rate spells rate.Inf.
func toLimit(rps float64) rate.Limit {
	if math.IsInf(rps, 1) {
		return rate.Inf
	}
	return rate.Limit(rps)
}

func (l *Local) bucket(tenant string) *rate.Limiter {
	if v, ok := l.buckets.Load(tenant); ok {
		return v.(*rate.Limiter)
	}
	v, _ := l.buckets.LoadOrStore(tenant, rate.NewLimiter(l.limit, l.burst))
	return v.(*rate.Limiter)
}

// Take spends cost tokens from tenant's bucket at now, or refuses with the
// time until the bucket holds them (ReasonRateLimited) or because cost
// exceeds the bucket's burst (ReasonCostExceedsBurst). It never returns an
// error and allocates nothing once the tenant's bucket exists.
func (l *Local) Take(_ context.Context, tenant string, cost int, now time.Time) (Decision, error) {
	b := l.bucket(tenant)
	if b.AllowN(now, cost) {
		return Decision{Allowed: true, Reason: ReasonOK}, nil
	}
	if cost > b.Burst() {
		return Decision{Reason: ReasonCostExceedsBurst}, nil
	}
	return Decision{Reason: ReasonRateLimited, RetryAfter: wait(float64(cost)-b.TokensAt(now), b.Limit())}, nil
}

// wait returns how long a bucket filling at limit takes to gain tokens,
// rounded up to the nanosecond so that a client retrying after it finds
// them, and at least a millisecond: a refusal never says "retry now".
func wait(tokens float64, limit rate.Limit) time.Duration {
	if limit <= 0 {
		return time.Duration(math.MaxInt64)
	}
	s := math.Ceil(tokens / float64(limit) * float64(time.Second))
	switch {
	case s >= math.MaxInt64:
		return time.Duration(math.MaxInt64)
	case s < float64(time.Millisecond):
		return time.Millisecond
	}
	return time.Duration(s)
}

// Set changes tenant's rate and burst at now, keeping the tokens its bucket
// holds (capped at the new burst); a tenant without a bucket gets a full one
// at the new settings. Zero means the backend's default. It fails with an
// error wrapping ErrInvalidArgument, and changes nothing, if rps is
// negative or NaN or burst negative.
func (l *Local) Set(tenant string, rps float64, burst int, now time.Time) error {
	if err := checkLimit(rps, burst); err != nil {
		return err
	}
	limit := toLimit(rps)
	if rps == 0 {
		limit = l.limit
	}
	if burst == 0 {
		burst = l.burst
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v, loaded := l.buckets.LoadOrStore(tenant, rate.NewLimiter(limit, burst))
	if loaded {
		b := v.(*rate.Limiter)
		b.SetLimitAt(now, limit)
		b.SetBurstAt(now, burst)
	}
	return nil
}

// Forget drops tenant's bucket and settings.
func (l *Local) Forget(tenant string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.Delete(tenant)
}
