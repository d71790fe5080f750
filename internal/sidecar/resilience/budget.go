package resilience

import (
	"fmt"
	"sync"
	"time"

	"github.com/repool/repool/internal/clock"
	"github.com/repool/repool/internal/defaults"
)

// budgetBuckets is the number of slices of a retry budget's window; counts
// expire one slice at a time.
const budgetBuckets = 10

// BudgetPolicy bounds a provider's retries so that an outage cannot
// multiply the load on the cluster: over a sliding window, retries may not
// exceed max(Ratio × calls, MinPerSecond × Window). The zero value of every
// field means its default.
type BudgetPolicy struct {
	// Ratio is the share of calls that may be retried. Default 0.5: a
	// brownout that fails 30 % of the attempts needs 0.3 + 0.09 + 0.03 ≈
	// 0.43 retries per call for the retries to land, and 0.5 still bounds
	// the load a sick cluster sees at 1.5× (the breaker stops a dead one
	// within a few calls). Negative means none (only the floor).
	Ratio float64 `yaml:"ratio"`
	// MinPerSecond is the floor: this many retries per second of the window
	// are allowed however few calls there are, so that a quiet sidecar can
	// still ride out a failover. Default 10; negative means no floor.
	MinPerSecond float64 `yaml:"min_per_second"`
	// Window is the sliding window. Default 10s.
	Window time.Duration `yaml:"window"`
}

// WithDefaults returns p with defaults in place of zero values.
func (p BudgetPolicy) WithDefaults() BudgetPolicy { return defaults.Fill(p, budgetDefaults) }

// budgetDefaults are the defaults of BudgetPolicy's fields.
var budgetDefaults = BudgetPolicy{Ratio: 0.5, MinPerSecond: 10, Window: 10 * time.Second}

// Validate names the first bad field (YAML name), after defaults.
func (p BudgetPolicy) Validate() error {
	p = p.WithDefaults()
	switch {
	case p.Ratio > 10:
		return fmt.Errorf("ratio %v: want at most 10 retries per call", p.Ratio)
	case p.Window < budgetBuckets*time.Millisecond:
		return fmt.Errorf("window %v: want at least %v", p.Window, budgetBuckets*time.Millisecond)
	}
	return nil
}

// Budget is a provider's retry budget: a sliding window of calls and
// retries (BudgetPolicy). Safe for concurrent use; it holds no goroutine.
type Budget struct {
	ratio float64 // Ratio, negative mapped to 0
	floor float64 // MinPerSecond × Window in seconds, never negative
	width int64   // nanoseconds per bucket
	clock clock.Clock

	mu      sync.Mutex
	buckets [budgetBuckets]budgetBucket
}

type budgetBucket struct {
	slot           int64 // which width-long slice of time it counts
	calls, retries float64
}

// NewBudget returns an empty budget. p must be valid; a nil clock means the
// wall clock.
func NewBudget(p BudgetPolicy, c clock.Clock) *Budget {
	p = p.WithDefaults()
	if c == nil {
		c = clock.Real{}
	}
	return &Budget{
		ratio: max(p.Ratio, 0),
		floor: max(p.MinPerSecond, 0) * p.Window.Seconds(),
		width: int64(p.Window / budgetBuckets),
		clock: c,
	}
}

// current returns the bucket of now, emptied if it held an older slice.
// The caller holds b.mu.
func (b *Budget) current(slot int64) *budgetBucket {
	bk := &b.buckets[((slot%budgetBuckets)+budgetBuckets)%budgetBuckets]
	if bk.slot != slot {
		*bk = budgetBucket{slot: slot}
	}
	return bk
}

// Call records one logical call: it earns Ratio retries.
func (b *Budget) Call() {
	slot := b.clock.Now().UnixNano() / b.width
	b.mu.Lock()
	b.current(slot).calls++
	b.mu.Unlock()
}

// TryRetry spends one retry and reports true, or reports false when the
// window's retries already reach max(Ratio × calls, floor).
func (b *Budget) TryRetry() bool {
	slot := b.clock.Now().UnixNano() / b.width
	b.mu.Lock()
	defer b.mu.Unlock()
	var calls, retries float64
	for i := range b.buckets {
		if bk := &b.buckets[i]; bk.slot > slot-budgetBuckets && bk.slot <= slot {
			calls += bk.calls
			retries += bk.retries
		}
	}
	if retries+1 > max(b.ratio*calls, b.floor) {
		return false
	}
	b.current(slot).retries++
	return true
}
