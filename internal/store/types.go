package store

import (
	"math"
	"time"

	"github.com/repool/repool/internal/limits"
)

// Status is a tenant's lifecycle state: active ⇄ suspended → deleted.
type Status string

// Tenant statuses.
const (
	// StatusActive tenants are served.
	StatusActive Status = "active"
	// StatusSuspended tenants keep their data but are not served.
	StatusSuspended Status = "suspended"
	// StatusDeleted marks a tombstone: the tenant's data is gone and its id
	// can never be reused.
	StatusDeleted Status = "deleted"
)

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusActive, StatusSuspended, StatusDeleted:
		return true
	}
	return false
}

// Tenant is one customer of the service, with its own pool, keys and limits.
type Tenant struct {
	// ID matches ValidateTenantID; it is the pool id of the tenant's rows.
	ID string
	// Name is free text for humans, at most MaxNameLen bytes.
	Name string
	// Status is set by the store (StatusActive on creation).
	Status Status
	// CreatedAt is set by the store's clock.
	CreatedAt time.Time
	// DeletedAt is set when the tenant becomes a tombstone; zero otherwise.
	DeletedAt time.Time
	// Group is the group of servers the tenant is placed on (tenant-sharded
	// groups): only that group's active server serves and writes the
	// tenant's pool. Empty on CreateTenant: the least-loaded group.
	Group string
}

// TenantFilter selects the tenants ListTenants returns. The zero value lists
// every tenant that is not deleted.
type TenantFilter struct {
	// IncludeDeleted also lists tombstones.
	IncludeDeleted bool
	// Group, when set, lists only the tenants placed on that group.
	Group string
}

// Limits are a tenant's stored limits (the limits.Limit table) and its
// policy. The zero Limits uses the server defaults for everything.
type Limits struct {
	// Values are the operator's values, by limits.Limit: the tenant's
	// ceilings and reservations. Nil means "use the server default"; a
	// non-nil zero is an explicit zero (for example max_streams 0 forbids
	// event streams). In the limits in force (control.LimitRules.Effective)
	// every one is set.
	Values limits.Values
	// Admin are the tenant-admin's own values, by limits.Limit, each at
	// most the operator's (docs/control-plane.md): the server applies the
	// smaller of each and the operator's value (or the server default when
	// that is nil). Nil means none; a reservation never has one.
	Admin limits.Values
	// Policy is the tenant's quarantine and decay policy: a nil field
	// means the server-wide default (flags --half-life, ...).
	Policy Policy
}

// Policy is a tenant's own quarantine and decay policy, stored beside its
// limits (docs/control-plane.md). A nil field means the server-wide
// default.
type Policy struct {
	// HalfLifeSeconds: an observation's weight halves after this long.
	HalfLifeSeconds *int64
	// QuarantineAfter: consecutive failures in one context that quarantine
	// a resource for it.
	QuarantineAfter *int64
	// QuarantineWholeAfter: consecutive failures over all contexts that
	// quarantine the whole resource.
	QuarantineWholeAfter *int64
	// QuarantineBelow: the success rate under which a resource is
	// quarantined for a context; 0 or below turns the rule off.
	QuarantineBelow *float64
	// QuarantineMinEvidence: the decayed observations QuarantineBelow needs.
	QuarantineMinEvidence *float64
	// CooldownBaseSeconds: the first quarantine's length, doubled at each
	// relapse up to CooldownMaxSeconds.
	CooldownBaseSeconds *int64
	CooldownMaxSeconds  *int64
	// Objective: what the tenant's pool's Acquire maximises, "success" or
	// "success_per_time" (pool.Objective).
	Objective *string
	// MaxUses retires a resource after this many leases, MaxAgeSeconds
	// this long after its registration (0: no limit; a resource's own
	// limits take precedence).
	MaxUses       *int64
	MaxAgeSeconds *int64
	// MaxQuarantinedShare caps the share of the pool in quarantine, in
	// (0, 1]; 1 is no cap.
	MaxQuarantinedShare *float64
}

// DigestLen is the length of an API key digest (SHA-256).
const DigestLen = 32

// Key is an API key's metadata. The store holds only the SHA-256 digest of
// the plain key; the plain key is shown once by the control plane and never
// reaches the store.
type Key struct {
	// ID matches ValidateKeyID; unique across tenants.
	ID string
	// TenantID is the owning tenant.
	TenantID string
	// Name is free text for humans, at most MaxNameLen bytes.
	Name string
	// Prefix is the non-secret start of the plain key, shown in listings so
	// users can tell keys apart; at most MaxPrefixLen bytes.
	Prefix string
	// Digest is the SHA-256 of the plain key (DigestLen bytes), unique.
	Digest []byte
	// CreatedAt is set from the store's clock when zero.
	CreatedAt time.Time
	// RevokedAt is when the key was revoked; zero while the key is valid.
	RevokedAt time.Time
}

// Revoked reports whether the key has been revoked.
func (k Key) Revoked() bool { return !k.RevokedAt.IsZero() }

// Audit listing bounds.
const (
	// DefaultAuditLimit is used when ListAudit is called with limit <= 0.
	DefaultAuditLimit = 100
	// MaxAuditLimit caps ListAudit's limit.
	MaxAuditLimit = 1000
)

// AuditLimit returns the page size ListAudit uses for limit: the default
// for limit <= 0, at most MaxAuditLimit.
func AuditLimit(limit int) int {
	switch {
	case limit <= 0:
		return DefaultAuditLimit
	case limit > MaxAuditLimit:
		return MaxAuditLimit
	}
	return limit
}

// AuditEntry records one control-plane action on a tenant.
type AuditEntry struct {
	// ID is assigned by the store: increasing, never reused.
	ID int64
	// TenantID scopes the entry; it is required.
	TenantID string
	// At is when the action happened; set from the store's clock when zero.
	At time.Time
	// Actor says who acted (for example "operator" or "key:<id>").
	Actor string
	// Action names what was done (for example "key.revoke"); required.
	Action string
	// Target is what it was done to (for example a key id).
	Target string
	// Detail is free text, at most MaxDetailLen bytes.
	Detail string
}

// MaxPruneBatch is the most rows one retention statement (PruneAudit,
// PruneRevokedKeys) deletes: retention runs beside the server's own
// writes and must not hold the database for long.
const MaxPruneBatch = 10_000

// AuditPrune selects what PruneAudit deletes of one tenant's audit trail.
type AuditPrune struct {
	// Before: entries whose At is before it go. Zero: none by age.
	Before time.Time
	// ThroughID: entries whose ID is at most it go (AuditCut gives it
	// for a bound on the entries kept). 0: none by count.
	ThroughID int64
	// Limit is the most entries the call deletes, 1..MaxPruneBatch.
	Limit int
}

// Usage is how much a store holds.
type Usage struct {
	// Bytes is the store's size: a SQLite store's files on disk (the
	// database, its write-ahead log and the lease log), an in-memory
	// one's pages; a PostgreSQL store's tables with their indexes and
	// TOAST (what repool's schema holds, not the whole database).
	Bytes int64
	// AuditRows is the number of audit entries of every tenant, of every
	// group of servers sharing the store.
	AuditRows int64
}

// MaxFencingHWM is the largest fencing high-water mark a store can hold:
// tokens are stored as signed 64-bit integers. Tokens built as
// epoch<<40|counter stay below it while the epoch is below 2^23.
const MaxFencingHWM = math.MaxInt64

// Checkpoint is one tenant's pool state to persist.
type Checkpoint struct {
	// Full replaces all of the tenant's resources and cells with Resources
	// and Cells (Removed is ignored). Otherwise the checkpoint is
	// incremental: Removed resources and their cells are deleted first, then
	// Resources and Cells are upserted; rows not mentioned stay as they are.
	Full bool
	// FencingHWM is the highest fencing token issued; at most MaxFencingHWM.
	FencingHWM uint64
	// Resources to write. Ids must be unique within the checkpoint.
	// Resources sorted by id and cells sorted by (ResourceID, Context)
	// validate faster (no maps); any order is accepted.
	Resources []ResourceRow
	// Cells to write. (ResourceID, Context) must be unique within the
	// checkpoint, and every cell's resource must exist after the checkpoint
	// is applied.
	Cells []CellRow
	// Removed lists resource ids deleted since the last checkpoint; their
	// cells are deleted too. Unknown ids are ignored.
	Removed []string
	// Bindings are affinity bindings to write: all of them in a Full
	// checkpoint (the saved ones are replaced), those changed in an
	// incremental one (upserted by context and key, after Unbound is
	// deleted). (Context, Key) must be unique within the checkpoint.
	Bindings []BindingRow
	// Unbound lists the bindings dropped since the last checkpoint
	// (incremental only); unknown ones are ignored.
	Unbound []BindingKey
}

// BindingKey names an affinity binding.
type BindingKey struct{ Context, Key string }

// BindingRow is a persisted affinity binding: the key of Context is bound
// to ResourceID until ExpiresAt (unix nanoseconds); Failed says the last
// release under the key reported a failure.
type BindingRow struct {
	Context, Key, ResourceID string
	ExpiresAt                int64
	Failed                   bool
}

// ResourceRow is a persisted resource. Times are unix nanoseconds.
type ResourceRow struct {
	// ID is 1..MaxRowIDLen bytes of UTF-8 without NUL.
	ID string
	// Capacity is the number of concurrent leases, at least 1.
	Capacity int32
	// Labels are free key/value pairs; an empty map loads as nil.
	Labels map[string]string
	// Alpha and Beta are the aggregate success and failure counts, finite
	// and not negative.
	Alpha, Beta float64
	// UpdatedAt is when the counts were last decayed or updated.
	UpdatedAt int64
	// ConsecutiveFailures since the last success.
	ConsecutiveFailures int32
	// BlockedUntil is the end of the quarantine; 0 when not blocked.
	BlockedUntil int64
	// CooldownLevel grows the next quarantine exponentially.
	CooldownLevel int32
	// RegisteredAt is when the resource was registered; 0 when unknown
	// (a row written before it was kept: restored as registered then).
	RegisteredAt int64
	// Uses counts the leases granted on the resource; MaxUses and MaxAge
	// (nanoseconds) are its own retirement limits, 0 for the tenant's.
	// All three are at least 0.
	Uses, MaxUses, MaxAge int64
	// Retired says why the resource was retired; "" while it is not. At
	// most MaxRowIDLen bytes of UTF-8 without NUL.
	Retired string
	// Imposed: its quarantine was imposed from the control plane.
	Imposed bool
	// Recent holds the bits of its latest outcomes (pool.Stats.Recent).
	Recent int64
}

// CellRow is a persisted (resource, context) cell. Times are unix
// nanoseconds.
type CellRow struct {
	// ResourceID names an existing resource of the same tenant.
	ResourceID string
	// Context is 1..MaxRowIDLen bytes of UTF-8 without NUL.
	Context string
	// Alpha and Beta are the discounted success and failure counts, finite
	// and not negative.
	Alpha, Beta float64
	// UpdatedAt is when the counts were last decayed or updated.
	UpdatedAt int64
	// ConsecutiveFailures since the last success.
	ConsecutiveFailures int32
	// BlockedUntil is the end of the quarantine; 0 when not blocked.
	BlockedUntil int64
	// CooldownLevel grows the next quarantine exponentially.
	CooldownLevel int32
	// Recent holds the bits of its latest outcomes (pool.Stats.Recent).
	Recent int64
}

// PoolState is one tenant's persisted pool state as loaded.
type PoolState struct {
	// FencingHWM is the highest fencing token ever checkpointed.
	FencingHWM uint64
	// HasCheckpoint is false if the tenant was never checkpointed.
	HasCheckpoint bool
	// Resources ordered by id.
	Resources []ResourceRow
	// Cells ordered by (ResourceID, Context).
	Cells []CellRow
	// Bindings are the affinity bindings last saved.
	Bindings []BindingRow
}

// LeaseRow is a journaled lease. Times are unix nanoseconds.
type LeaseRow struct {
	ID         uint64
	ResourceID string
	Context    string
	Token      uint64
	ExpiresAt  int64
}
