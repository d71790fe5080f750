// Package resilience holds the sidecar's failure-handling policies as data
// and the pieces that enforce them: a per-provider circuit breaker
// (sony/gobreaker's local breaker) with its attempt-level rules, a
// retrier (cenkalti/backoff) for transient failures only, a sliding-window
// retry budget, a bulkhead whose limit follows the provider's latency, and
// the words for a failure's cause (Cause, TransportCause).
//
// The package does not compose them: the one place that does, in the order
// CB(Retry(attempt rules(bulkhead(auth(call))))), is provider.Provider.Do. Keeping the composition
// in one documented function is a project rule (docs/sidecar.md). The
// package's Example composes a guard the same way, runnable with go test.
//
// Errors are classified by their gRPC code alone (see Code): only
// UNAVAILABLE is retried; the breaker ignores UNAUTHENTICATED (credentials
// are not a cluster failure), RESOURCE_EXHAUSTED (a rate limit says the
// cluster is healthy enough to refuse) and CANCELED (the caller went away),
// and counts business codes as successes.
package resilience
