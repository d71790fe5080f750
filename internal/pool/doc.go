// Package pool is the tenant-agnostic reputation pool engine: one Pool holds
// one tenant's resources, their per-context success statistics, the leases
// handed out on them and the events that describe what happened.
//
// # Model
//
// A resource (a proxy, an account, a session) has a capacity: the number of
// leases it may carry at once. A cell is a (resource, context) pair; it keeps
// discounted Beta-Bernoulli counts of successes and failures that decay with
// a configurable half-life, applied lazily when the cell is read or written.
// A new cell starts from a prior taken from the resource's aggregate over all
// contexts, so a resource that does well elsewhere is tried first.
//
// Acquire picks a resource by Thompson sampling: it draws a success
// probability from each candidate's posterior and leases the best draw. It
// never scans the pool: candidates are a small per-context leader board of
// the best-scoring resources plus a few resources drawn at random from the
// set of resources with free capacity, so the work per call is bounded
// whatever the pool's size.
//
// A cell that fails too often in a row, or whose posterior mean falls below a
// threshold, is quarantined for that context; a resource that fails across
// contexts is quarantined as a whole. Quarantine lasts a cooldown that grows
// exponentially with each relapse and carries jitter; when it ends, the next
// Acquire for that context hands the resource out as a single probe lease,
// and the probe's outcome decides between recovery and a longer cooldown.
//
// Beside the decayed counts, each resource and cell keeps its latest
// outcomes, up to RecentWindow, as plain counts without prior or decay
// (ContextStats.RecentSuccesses). Config.MaxQuarantinedShare caps the share
// of the pool in quarantine: beyond it the least bad quarantined resource
// is served again (EventCapped). Quarantine and Lift impose and end
// quarantines whatever the statistics, for an operator.
//
// # Retirement
//
// A resource that has been leased MaxUses times, or that was registered
// MaxAge ago (its Spec's limits, else the pool's), is retired: never
// leased again, kept visible with State StateRetired and the reason, and
// announced by an EventRetired (retire.go).
//
// Fencing tokens grow strictly per pool. The upper bits hold an epoch that
// the caller raises on every restart or leader change (SetEpoch), so tokens
// keep growing across Snapshot and Restore and across leaders.
//
// # Budgets
//
// A pool may charge what it holds to an outside budget through its Gate:
// under the pool's lock, before a call creates resources or cells, and
// after one removes them. The budget then counts exactly what the pool
// holds, however calls race: no state exists that it has not charged, and
// none is charged that does not exist. A resource is charged in units of
// its id's and labels' bytes (ResourceUnits), so the budget bounds the
// memory a tenant's resources hold, not only their count. Restore does not
// consult the Gate; its caller accounts what it restored (Charge).
//
// # Concurrency
//
// A Pool is safe for concurrent use. Mutations, Snapshot and TakeChanges
// (which start a new change set) take one mutex's write lock; presence
// checks and other reads share its read lock. Event subscribers never block
// the pool: a subscriber whose buffer is full is disconnected and counted.
//
// # Errors
//
// Every error wraps one of ErrInvalidArgument, ErrNotFound, ErrStaleToken,
// ErrExhausted, ErrOverBudget or ErrPoolClosed, so that callers can map them
// with errors.Is. A call that fails with ErrInvalidArgument, ErrStaleToken,
// ErrOverBudget or ErrPoolClosed changes nothing. One that fails with
// ErrNotFound or ErrExhausted does nothing it was asked to, but
// may first have done housekeeping that was due anyway and that any call
// could have done: expiring leases past their expiry (a Renew, Release or
// Report naming such a lease expires it and reports it not found) and, in
// Acquire, ending cooldowns that are over; those emit their events as
// usual. A failed Acquire is also counted in Counters.Exhausted.
package pool
