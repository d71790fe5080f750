package repoolv1

// RetryAfterKey is the trailing metadata key of a RESOURCE_EXHAUSTED
// answer to a rate-limited call: how long to wait, in whole milliseconds
// (at least 1). Part of the contract, next to the generated code.
const RetryAfterKey = "retry-after-ms"
