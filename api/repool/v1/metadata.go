package repoolv1

// RetryAfterKey is the trailing metadata key of a RESOURCE_EXHAUSTED
// answer to a rate-limited call: how long to wait, in whole milliseconds
// (at least 1). Part of the contract, next to the generated code.
const RetryAfterKey = "retry-after-ms"

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that a
// RESOURCE_EXHAUSTED status carries.
const ErrorDomain = "repool"

// Reasons of the ErrorInfo detail of a RESOURCE_EXHAUSTED status (and of
// the UNAVAILABLE ones named below).
const (
	// ReasonNoResourceAvailable: no resource could be leased. Metadata
	// "why" says why; "frees_at" (RFC 3339, when known) is the earliest
	// moment one frees up by itself.
	ReasonNoResourceAvailable = "NO_RESOURCE_AVAILABLE"
	// ReasonRateLimited: the tenant's request rate limit refused the call;
	// metadata "retry_after_ms" says when to come back.
	ReasonRateLimited = "RATE_LIMITED"
	// ReasonOverBudget: the call would create state (resources, cells)
	// beyond the tenant's ceiling or the server's budget.
	ReasonOverBudget = "OVER_BUDGET"
	// ReasonTenantElsewhere (on an UNAVAILABLE status): the tenant is
	// served by another group of servers, or is being moved to one; retry
	// through the front end, which routes by TenantRouteKey. Metadata
	// "group" names the group the tenant is placed on, when known, and
	// "tenant" the caller's own tenant (the one its credential names), so
	// that a client that did not know it — an IssueToken sent without
	// TenantRouteKey — can send the call again with the entry.
	ReasonTenantElsewhere = "TENANT_ELSEWHERE"
	// ReasonStoreNotWritable (on an UNAVAILABLE status): the server could
	// not write the call's change to its store (a disk full or read-only,
	// a database that refuses writes), so the call was not acknowledged;
	// the message says why ("store not writable: REASON"). The server is
	// not ready until a write succeeds again: retry, through the front
	// end.
	ReasonStoreNotWritable = "STORE_NOT_WRITABLE"
)

// Metadata keys of the ErrorInfo detail.
const (
	ErrorInfoWhy          = "why"
	ErrorInfoFreesAt      = "frees_at"
	ErrorInfoRetryAfterMS = "retry_after_ms"
	ErrorInfoGroup        = "group"
	ErrorInfoTenant       = "tenant"
)

// ClusterDownText is the body of the front end's answer to a call of a
// group none of whose servers is alive — none active, none standing by —
// so that no handover is under way and a retry would meet the same
// answer: HAProxy (as `server haproxy render` writes it) answers HTTP 503
// with this text, which gRPC clients see as UNAVAILABLE with the text in
// the message. HAProxy's answer while a standby is taking over is its own
// 503 without it. The sidecar fails such a call at once and counts it
// against the cluster.
const ClusterDownText = "repool front end: no server of this group is alive (none active, none standing by)"

// TenantRouteKey is the metadata entry a client behind a tenant-routing
// front end sends on every call, IssueToken included once it knows its
// tenant: the tenant of its token (IssueTokenResponse.tenant), or the
// tenant a TENANT_ELSEWHERE refusal named (ErrorInfoTenant). HAProxy maps
// it to the backend of the group that serves the tenant. It is a routing hint only: the server serves a
// call for the tenant its credential names, whatever this entry says, and
// refuses as UNAVAILABLE (reason TENANT_ELSEWHERE) a tenant it does not
// serve.
const TenantRouteKey = "x-repool-tenant"
