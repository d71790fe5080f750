// Package store defines repool's persistence contract: the domain types that
// are persisted (tenants, limits, API key digests, audit entries, server
// secrets, the fencing epoch and per-tenant pool checkpoints) and the Store
// interface that the SQLite (internal/store/sqlite) and PostgreSQL
// (internal/store/postgres) implementations satisfy. The SQL they share
// (tenants, keys, limits, audit, signing key, epoch) is written once in
// internal/store/sqlstore; internal/store/open parses the store URL and
// opens the implementation it names.
//
// Every tenant-scoped read, write and delete is filtered by the tenant (pool)
// id in SQL: no method ever touches another tenant's rows. The contract is
// pinned down by the suite in internal/store/storetest, which both
// implementations run against a real database.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/repool/repool/internal/clock"
)

// Sentinel errors. Implementations wrap them with %w; test with errors.Is.
var (
	// ErrNotFound: the tenant, key or other row does not exist. Every
	// method except GetTenant, ListTenants and CreateTenant treats a
	// deleted tenant (tombstone) as not found.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: a row with that id (or key digest) already exists, including
	// the tombstone of a deleted tenant.
	ErrExists = errors.New("store: already exists")
	// ErrConflict: a guarded transition did not apply because the row is not
	// in the expected state (for example suspending a tenant that is not
	// active).
	ErrConflict = errors.New("store: conflict")
	// ErrCorrupt: persisted checkpoint rows failed validation on load (the
	// message names the tenant and the bad row), or a file store's lease
	// log is damaged where no crash leaves it (the message names the file
	// and the offset; see sqlite.CorruptLogError).
	ErrCorrupt = errors.New("store: corrupt")
	// ErrInvalid: an argument failed validation (bad id, bad transition,
	// out-of-range value); nothing was written.
	ErrInvalid = errors.New("store: invalid argument")
	// ErrUnavailable: the database could not be reached or is temporarily
	// unable to serve (connection refused or lost, too many connections,
	// shutdown, lock timeouts, serialization failures). It is never returned
	// for a missing row, so a wrong API key never looks like an outage.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrFenced: a write of a server that is no longer the active one was
	// refused because the epoch moved on (see HA.SetFence). Nothing was
	// written.
	ErrFenced = errors.New("store: fenced: the epoch moved on")
)

// Store is repool's persistence. Implementations are safe for concurrent use
// by multiple goroutines. Every method takes a context that bounds the call;
// a cancelled or expired context is returned as context.Canceled or
// context.DeadlineExceeded (wrapped), not as ErrUnavailable.
//
// List methods return an empty, non-nil slice when nothing matches. Unless
// stated otherwise, methods return ErrInvalid for malformed arguments, ErrNotFound for a missing or deleted tenant, and ErrUnavailable
// when the database cannot be reached.
type Store interface {
	// CreateTenant creates an active tenant with t.ID and t.Name; Status,
	// CreatedAt and DeletedAt of t are ignored (CreatedAt comes from the
	// store's clock). It returns the stored tenant, or ErrExists if a tenant
	// or a tombstone with that id exists: ids are never reused. t.Group
	// must be a known group in state active (*GroupUnavailableError
	// otherwise, nothing created); empty places it on the live active group
	// with the fewest tenants (see Groups), or, when no group at all is
	// live (a store no server serves yet), on the default group.
	CreateTenant(ctx context.Context, t Tenant) (Tenant, error)
	// GetTenant returns the tenant with that id, including a tombstone
	// (Status == StatusDeleted): callers must check Status.
	GetTenant(ctx context.Context, id string) (Tenant, error)
	// ListTenants returns tenants ordered by id. Tombstones are left out
	// unless f.IncludeDeleted is set.
	ListTenants(ctx context.Context, f TenantFilter) ([]Tenant, error)
	// SetTenantStatus moves tenant id from status from to status to, guarded
	// in SQL so that concurrent callers cannot both succeed. Only
	// active→suspended and suspended→active are allowed (ErrInvalid
	// otherwise; use DeleteTenant to delete). If the tenant is not in status
	// from it returns ErrConflict; an unknown or deleted tenant returns
	// ErrNotFound. It returns the updated tenant.
	SetTenantStatus(ctx context.Context, id string, from, to Status) (Tenant, error)
	// DeleteTenant deletes, in one transaction, every row of the tenant
	// (checkpointed resources and cells, checkpoint metadata, API keys,
	// audit entries, limits) and turns the tenant row into a tombstone
	// (StatusDeleted, DeletedAt from the store's clock). Allowed from active
	// and suspended; an unknown or already deleted tenant returns
	// ErrNotFound.
	DeleteTenant(ctx context.Context, id string) error

	// PutLimits replaces the tenant's limits with l (nil fields mean "server
	// default").
	PutLimits(ctx context.Context, tenantID string, l Limits) error
	// GetLimits returns the tenant's limits; a tenant that never had limits
	// stored gets the zero Limits (all server defaults).
	GetLimits(ctx context.Context, tenantID string) (Limits, error)

	// CreateKey stores an API key's metadata and SHA-256 digest for
	// k.TenantID (which must not be deleted). A zero k.CreatedAt is set from
	// the store's clock; k.RevokedAt is ignored. The plain key is never
	// passed to the store. ErrExists if the id or the digest is taken.
	CreateKey(ctx context.Context, k Key) (Key, error)
	// GetKey returns the tenant's key keyID; ErrNotFound if the key does not
	// exist or belongs to another tenant.
	GetKey(ctx context.Context, tenantID, keyID string) (Key, error)
	// ListKeys returns the tenant's keys, revoked ones included, oldest
	// first.
	ListKeys(ctx context.Context, tenantID string) ([]Key, error)
	// RevokeKey sets the key's RevokedAt from the store's clock. Revoking a
	// revoked key succeeds and keeps the first RevokedAt. ErrNotFound if the
	// key does not exist or is not the tenant's.
	RevokeKey(ctx context.Context, tenantID, keyID string) error
	// LookupKey returns the key whose digest is digest and its tenant, in
	// one query. It returns revoked keys and suspended tenants as they are:
	// the caller decides. ErrNotFound if no key has that digest (keys of
	// deleted tenants are gone).
	LookupKey(ctx context.Context, digest []byte) (Key, Tenant, error)

	// AppendAudit appends an entry to e.TenantID's audit log and returns it
	// with its ID (increasing, never reused) and At (from the store's clock
	// when zero).
	AppendAudit(ctx context.Context, e AuditEntry) (AuditEntry, error)
	// ListAudit returns up to limit of the tenant's entries with ID <
	// beforeID (beforeID <= 0: from the newest), newest first. limit <= 0
	// means DefaultAuditLimit; larger than MaxAuditLimit is clamped.
	ListAudit(ctx context.Context, tenantID string, limit int, beforeID int64) ([]AuditEntry, error)

	// SigningKey returns the server's 32-byte token signing key, generating
	// and storing it on the first call. Concurrent first callers, in this
	// process or others sharing the database, all get the same key.
	SigningKey(ctx context.Context) ([]byte, error)
	// BumpEpoch atomically raises the epoch of this handle's group
	// (Options.Group) and returns it (1 on first use). Values strictly
	// increase across callers, processes, restarts and groups: every group
	// draws its epochs from one sequence.
	BumpEpoch(ctx context.Context) (uint32, error)

	// SaveCheckpoint writes one tenant's pool state in one transaction that
	// touches only that tenant's rows; see Checkpoint for Full versus
	// incremental. Rows are validated first (ErrInvalid, nothing written).
	// The stored fencing high-water mark becomes max(stored, cp.FencingHWM).
	// Checkpoints of the same tenant are serialized; a checkpoint racing
	// DeleteTenant either commits before the delete (and is deleted with
	// the tenant) or returns ErrNotFound.
	SaveCheckpoint(ctx context.Context, tenantID string, cp Checkpoint) error
	// LoadCheckpoint reads the tenant's pool state from one consistent
	// snapshot, resources ordered by id and cells by (resource, context).
	// Rows that fail validation return an error wrapping ErrCorrupt that
	// names the bad row. A tenant without a checkpoint gets a PoolState with
	// HasCheckpoint false.
	LoadCheckpoint(ctx context.Context, tenantID string) (PoolState, error)

	// SetFence makes every later write of the serving server's state
	// (checkpoints, the lease journal, the audit trail) check, in the
	// writing transaction, that the persisted epoch is still epoch; if a
	// successor has raised it the write fails with ErrFenced and changes
	// nothing. Zero turns fencing off.
	SetFence(epoch uint32)
	// WriteLeases records leases granted or renewed (put) and ended (del)
	// for a tenant, in one fenced transaction: the lease journal, written
	// before a lease is acknowledged so that a restarted server or a
	// standby taking over restores every lease a client may hold.
	WriteLeases(ctx context.Context, tenantID string, put []LeaseRow, del []uint64) error
	// LoadLeases returns the tenant's journaled leases, ordered by id.
	LoadLeases(ctx context.Context, tenantID string) ([]LeaseRow, error)
	// PruneLeases removes journaled leases of every tenant that expired
	// before the given unix-nanosecond time (fenced).
	PruneLeases(ctx context.Context, before int64) error

	// PruneAudit deletes, in one fenced transaction, up to p.Limit of the
	// tenant's audit entries that retention gives up: those whose At is
	// before p.Before (zero: none by age) and those whose ID is at most
	// p.ThroughID (0: none by count; see AuditCut). It returns how many it
	// deleted: fewer than p.Limit means none of them is left. ErrInvalid
	// for a Limit outside 1..MaxPruneBatch. A tenant without such entries
	// (or unknown, or deleted) deletes nothing.
	PruneAudit(ctx context.Context, tenantID string, p AuditPrune) (int64, error)
	// AuditCut returns the ID of the tenant's newest audit entry that is
	// not among its keep newest ones, so that the entries with IDs up to
	// it are those beyond keep; 0 when the tenant has at most keep. It
	// reads and changes nothing.
	AuditCut(ctx context.Context, tenantID string, keep int64) (int64, error)
	// PruneRevokedKeys deletes, in one fenced transaction, up to limit of
	// the tenant's keys revoked before before, and returns how many it
	// deleted. ErrInvalid for a limit outside 1..MaxPruneBatch.
	PruneRevokedKeys(ctx context.Context, tenantID string, before time.Time, limit int) (int64, error)
	// Usage returns how much the store holds: its size and its audit
	// entries (see Usage). It changes nothing.
	Usage(ctx context.Context) (Usage, error)

	// Close releases the database handles. Calls after Close fail.
	Close() error
}

// Groups is what tenant-sharded groups need beyond Store: where tenants
// are placed, the registry of the groups that exist and may take tenants,
// the fenced handover of a tenant from one group to another, and the
// recovery of a tenant whose group has no active server.
//
// A group is known once it is registered: the default group always is,
// and BumpEpoch registers the handle's group (a server registers its group
// as it becomes active). A group takes tenants (CreateTenant, MoveTenant,
// RecoverTenant) only while it is known and GroupActive; it is live while
// a server holds its leader lock (PostgreSQL: the group's session advisory
// lock; a store of one server: the default group, always).
type Groups interface {
	// Placements returns the group of every tenant that is not deleted.
	Placements(ctx context.Context) (map[string]string, error)
	// GroupList returns every known group, and every group a tenant is
	// placed on, ordered by name, with its state, whether it is live, its
	// epoch and the number of tenants placed on it.
	GroupList(ctx context.Context) ([]GroupInfo, error)
	// MoveTenant places tenant on group to, in one fenced transaction: it
	// fails with ErrFenced, and changes nothing, unless this store's group
	// (Options.Group) still holds its epoch and the tenant is still placed
	// on it. ErrNotFound for an unknown or deleted tenant, ErrInvalid for
	// a bad group or a move to the group it is on, a *GroupUnavailableError
	// unless to is known, active and live. After it commits, this group's
	// writes of the tenant's pool fail with ErrFenced.
	MoveTenant(ctx context.Context, tenant, to string) error
	// SetGroupState sets a known group's state and returns it. A
	// *GroupUnavailableError (Reason GroupUnknown) for a group that is not
	// known; ErrConflict to retire a group that still has tenants placed
	// on it; ErrInvalid for a bad state or to retire the default group.
	SetGroupState(ctx context.Context, group string, state GroupState) (GroupInfo, error)
	// RecoverTenant re-places tenant, stranded on a group that has no
	// active server, on group to, in one transaction fenced by this
	// store's own epoch: it raises the stranded group's epoch (a server of
	// it still running on its old epoch can write nothing more) and checks,
	// holding that epoch's row, that no server holds the stranded group's
	// leader lock; then it places the tenant on to, whose active server
	// restores it from the store (checkpoint and lease journal) as after a
	// move. ErrConflict if the tenant's group is live (move it instead),
	// ErrNotFound, ErrInvalid (already on to), *GroupUnavailableError for
	// to, ErrFenced if this store's group was deposed.
	RecoverTenant(ctx context.Context, tenant, to string) (Recovered, error)
}

// GroupState is what an operator allows a known group: to take new
// tenants (active), to keep those it has and take no more (draining), or
// nothing (retired: no tenants, and a server of it that starts gets none).
type GroupState string

const (
	GroupActive   GroupState = "active"
	GroupDraining GroupState = "draining"
	GroupRetired  GroupState = "retired"
)

// ValidGroupState reports whether s is one of the group states.
func ValidGroupState(s GroupState) bool {
	return s == GroupActive || s == GroupDraining || s == GroupRetired
}

// GroupInfo is one group as the store knows it.
type GroupInfo struct {
	Name string
	// State is the group's state; empty for a group some tenant is placed
	// on that is not in the registry (a store changed by hand).
	State GroupState
	// Live: a server of the group holds its leader lock now.
	Live    bool
	Epoch   uint32
	Tenants int
	// ChangedAt is when an operator last set State (zero if never).
	ChangedAt time.Time
}

// CanTake reports whether the group may take a tenant now.
func (g GroupInfo) CanTake() bool { return g.State == GroupActive && g.Live }

// Recovered is what RecoverTenant did.
type Recovered struct {
	// From is the group the tenant was stranded on.
	From string
	// FencedEpoch is that group's epoch as RecoverTenant raised it.
	FencedEpoch uint32
}

// Why a group cannot take a tenant.
const (
	GroupUnknown  = "unknown"
	GroupNoServer = "no active server"
)

// GroupUnavailableError: the group named cannot take a tenant, and nothing
// was changed. Reason is GroupUnknown, GroupNoServer, or the group's
// state (draining, retired). It wraps ErrGroupUnavailable.
type GroupUnavailableError struct {
	Group  string
	Reason string
}

func (e *GroupUnavailableError) Error() string {
	return fmt.Sprintf("store: group %q cannot take tenants: %s", e.Group, e.Reason)
}

func (e *GroupUnavailableError) Unwrap() error { return ErrGroupUnavailable }

// ErrGroupUnavailable is what every *GroupUnavailableError wraps.
var ErrGroupUnavailable = errors.New("store: group cannot take tenants")

// HA is what the active/standby servers need beyond Store. Only the
// PostgreSQL store implements it: high availability needs a shared
// database.
type HA interface {
	Store
	// DSN is the connection string, for the leader election's own session.
	DSN() string
}

// WriterLock is implemented by stores that can tell whether another server
// writes to the same database. A server that is not in an active/standby
// group claims the store with LockWriter before it writes anything, and
// stops serving when Lost reports an error.
type WriterLock interface {
	// LockWriter claims the store for this process. It fails with an error
	// wrapping ErrLocked, naming the store and, where it can, the other
	// process, if another process holds the claim.
	LockWriter(ctx context.Context) (Claim, error)
}

// Claim is a store held by one writer.
type Claim interface {
	// Check returns nil while the claim still holds, and an error saying
	// why once it does not (the database file replaced or removed, the
	// database session that held the lock gone).
	Check(ctx context.Context) error
	// Release gives the claim up.
	Release()
}

// ErrLocked: another process holds the store's writer claim.
var ErrLocked = errors.New("store: in use by another server")

// WriteProber is implemented by stores that can tell, with a small write
// of their own, whether they take writes now: the active server probes
// with it so that a store that stopped taking writes (a disk full or
// read-only, a database that refuses writes) makes it not ready, and one
// that takes them again makes it ready, with or without traffic.
type WriteProber interface {
	// ProbeWrite writes a little that no reader depends on (a counter
	// row of this handle's group; a file store also writes and removes a
	// scratch file beside the database) through the store's own write
	// paths, unfenced, and returns the error a write of the store's
	// state would meet now, classified as the store's other errors are.
	ProbeWrite(ctx context.Context) error
}

// Options configure an implementation. The zero value is ready to use.
type Options struct {
	// Clock stamps CreatedAt, DeletedAt, RevokedAt, audit At (when zero) and
	// checkpoint save times. Nil means clock.Real{}.
	Clock clock.Clock
	// SharedFiles lets a file store (SQLite) open a database whose file
	// other local users may read or write. By default such a file is
	// refused: it holds the signing key and every tenant's key digests.
	SharedFiles bool
	// Fsync makes a file store (SQLite) sync its log to disk at every
	// commit, so that an acknowledged write survives a power loss or an
	// operating-system crash too. By default a commit survives a crash of
	// the process (the operating system holds the write) and the log is
	// synced at its checkpoints only. PostgreSQL syncs as the database is
	// configured to.
	Fsync bool
	// ReadOnly opens an existing store to read it and change nothing, for
	// tools beside a running server (`server admin-token`): no database
	// file or schema is created and no migration is applied (a database
	// without repool's tables is ErrNotFound), SigningKey returns
	// ErrNotFound instead of creating a missing key, and every write fails
	// (SQLite opens the file read-only, PostgreSQL runs read-only
	// transactions).
	ReadOnly bool
	// Group is the group of servers this store handle writes for
	// (tenant-sharded groups; empty means DefaultGroup). BumpEpoch raises
	// the group's own epoch, the fence checks it, and a fenced write of a
	// tenant's pool (checkpoint, lease journal) also checks that the
	// tenant is still placed on the group: after a move, the source cannot
	// write the tenant's state.
	Group string
	// Log receives what a store repairs on its own and must not do
	// quietly (a SQLite lease log's torn tail cut at open). Nil means
	// slog.Default().
	Log *slog.Logger
}

// Logger returns o.Log, or slog.Default() when it is nil.
func (o Options) Logger() *slog.Logger {
	if o.Log == nil {
		return slog.Default()
	}
	return o.Log
}

// GroupName returns o.Group, or DefaultGroup when it is empty.
func (o Options) GroupName() string {
	if o.Group == "" {
		return DefaultGroup
	}
	return o.Group
}

// Now returns the current time from o.Clock (the wall clock if nil), in UTC
// and truncated to the microsecond precision every implementation stores.
func (o Options) Now() time.Time {
	c := o.Clock
	if c == nil {
		c = clock.Real{}
	}
	return Timestamp(c.Now())
}

// Stamp returns a caller-supplied time as the store persists it:
// Timestamp(t), or o.Now() when that is zero. It is how CreateKey sets
// CreatedAt and AppendAudit sets At.
func (o Options) Stamp(t time.Time) time.Time {
	if ts := Timestamp(t); !ts.IsZero() {
		return ts
	}
	return o.Now()
}

// Timestamp normalizes t to what the store persists and returns: UTC,
// truncated to microseconds. The zero time stays zero.
func Timestamp(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}
