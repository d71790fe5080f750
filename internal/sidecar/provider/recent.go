package provider

import (
	"sync/atomic"
	"time"
)

// recentWindow is how far back Recent counts a provider's calls.
const recentWindow = time.Minute

// recentBuckets counts calls and fast failures per second over the last
// minute, for the status page's fast-fail rate. Each bucket belongs to the
// second it was last written in; a bucket from an older second is reset by
// the first call of its new second. A call racing that reset may be lost:
// the counts are for a person to read, not for metrics (the Prometheus
// counters are exact).
type recentBuckets struct {
	b [60]recentBucket
}

type recentBucket struct {
	sec         atomic.Int64
	calls, fast atomic.Uint64
}

// add counts one call at now, and whether it failed fast.
func (r *recentBuckets) add(now time.Time, fast bool) {
	sec := now.Unix()
	b := &r.b[sec%int64(len(r.b))]
	if old := b.sec.Load(); old != sec && b.sec.CompareAndSwap(old, sec) {
		b.calls.Store(0)
		b.fast.Store(0)
	}
	b.calls.Add(1)
	if fast {
		b.fast.Add(1)
	}
}

// counts returns the calls and fast failures of the minute before now.
func (r *recentBuckets) counts(now time.Time) (calls, fast uint64) {
	sec := now.Unix()
	for i := range r.b {
		b := &r.b[i]
		if s := b.sec.Load(); s > sec-int64(len(r.b)) && s <= sec {
			calls += b.calls.Load()
			fast += b.fast.Load()
		}
	}
	return calls, fast
}

// Recent is a provider's calls over the last minute.
type Recent struct {
	// Window is how far back the counts go.
	Window time.Duration
	// Calls counts the logical calls that ended in the window; FastFails
	// those among them that failed fast (circuit-open, bulkhead-full,
	// timeout, upstream; resilience.FastFail).
	Calls, FastFails uint64
}

// Recent returns the provider's calls and fast failures of the last minute.
func (p *Provider) Recent() Recent {
	calls, fast := p.recent.counts(time.Now())
	return Recent{Window: recentWindow, Calls: calls, FastFails: fast}
}
