// Package ratelimit limits each tenant's request rate with a token bucket.
//
// Every tenant has a bucket (default 10 tokens per second, burst 50) that
// can be changed per tenant, live, with Set. Every RPC costs tokens: a
// method's cost comes from a table keyed by gRPC full method name (methods
// that create state or scan cost more), 1 by default. Allow spends a
// request's cost or refuses it with a retry-after: the time until the
// bucket holds enough tokens again. A request that costs more than the
// bucket's burst can never pass and is refused with a reason that says so.
//
// The buckets live behind the Backend interface. Local keeps them in
// process; a distributed backend can replace it. A backend may fail: the
// Limiter then fails open (the request is allowed), counts the fault in
// repool_ratelimit_errors_total{tenant} and logs it at ERROR, so that a
// limiter outage never becomes a service outage and is still alertable
// apart from genuine refusals, which are counted in
// repool_ratelimit_rejected_total{tenant}.
//
// The rate limiter runs after authentication, so that the tenant is the one
// the credential names; a limiter in front of auth would limit nothing.
//
// # Concurrency
//
// Limiter and Local are safe for concurrent use, own no goroutines and need
// no cleanup. Allow takes no lock of its own: it reads an immutable cost
// table and one bucket, whose own mutex is held for a few arithmetic
// operations; with Local it allocates nothing when it allows a request.
//
// # Errors
//
// Errors wrap ErrInvalidArgument (bad configuration or input; nothing
// changed), ErrLimited (the request was refused; Decision says why and
// when to retry) or ErrBackend (Set could not reach the backend), or are
// the caller's context error.
package ratelimit
