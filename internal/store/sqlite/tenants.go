package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/repool/repool/internal/store"
)

const tenantColumns = `id, name, status, created_at, deleted_at`

func scanTenant(row interface{ Scan(...any) error }) (store.Tenant, error) {
	var (
		t                  store.Tenant
		created, deletedAt sql.NullInt64
	)
	if err := row.Scan(&t.ID, &t.Name, &t.Status, &created, &deletedAt); err != nil {
		return store.Tenant{}, err
	}
	t.CreatedAt, t.DeletedAt = fromMicros(created), fromMicros(deletedAt)
	return t, nil
}

// liveTenant returns store.ErrNotFound unless tenant id exists and is not
// deleted.
func liveTenant(ctx context.Context, q querier, id string) error {
	var status store.Status
	err := q.QueryRowContext(ctx, `SELECT status FROM tenants WHERE id = ?`, id).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && status == store.StatusDeleted) {
		return fmt.Errorf("tenant %q: %w", id, store.ErrNotFound)
	}
	return classify(err)
}

// CreateTenant implements store.Store.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant) (store.Tenant, error) {
	if err := t.Validate(); err != nil {
		return store.Tenant{}, err
	}
	out := store.Tenant{ID: t.ID, Name: t.Name, Status: store.StatusActive, CreatedAt: s.opts.Now()}
	res, err := s.w.ExecContext(ctx,
		`INSERT INTO tenants (id, name, status, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
		out.ID, out.Name, out.Status, micros(out.CreatedAt))
	if err != nil {
		return store.Tenant{}, fmt.Errorf("create tenant %q: %w", t.ID, classify(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return store.Tenant{}, fmt.Errorf("create tenant %q: %w", t.ID, store.ErrExists)
	}
	return out, nil
}

// GetTenant implements store.Store.
func (s *Store) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	if err := store.ValidateTenantID(id); err != nil {
		return store.Tenant{}, err
	}
	t, err := scanTenant(s.r.QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Tenant{}, fmt.Errorf("tenant %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Tenant{}, fmt.Errorf("get tenant %q: %w", id, classify(err))
	}
	return t, nil
}

// ListTenants implements store.Store.
func (s *Store) ListTenants(ctx context.Context, f store.TenantFilter) ([]store.Tenant, error) {
	q := `SELECT ` + tenantColumns + ` FROM tenants WHERE status <> 'deleted' ORDER BY id`
	if f.IncludeDeleted {
		q = `SELECT ` + tenantColumns + ` FROM tenants ORDER BY id`
	}
	rows, err := s.r.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", classify(err))
	}
	defer rows.Close()
	out := []store.Tenant{}
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, fmt.Errorf("list tenants: %w", classify(err))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tenants: %w", classify(err))
	}
	return out, nil
}

// SetTenantStatus implements store.Store.
func (s *Store) SetTenantStatus(ctx context.Context, id string, from, to store.Status) (store.Tenant, error) {
	if err := store.ValidateTenantID(id); err != nil {
		return store.Tenant{}, err
	}
	if err := store.ValidateTransition(from, to); err != nil {
		return store.Tenant{}, err
	}
	var out store.Tenant
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t, err := scanTenant(tx.QueryRowContext(ctx,
			`UPDATE tenants SET status = ? WHERE id = ? AND status = ? RETURNING `+tenantColumns, to, id, from))
		if err == nil {
			out = t
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return classify(err)
		}
		var cur store.Status
		err = tx.QueryRowContext(ctx, `SELECT status FROM tenants WHERE id = ?`, id).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && cur == store.StatusDeleted) {
			return fmt.Errorf("tenant %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return classify(err)
		}
		return fmt.Errorf("tenant %q is %s, not %s: %w", id, cur, from, store.ErrConflict)
	})
	if err != nil {
		return store.Tenant{}, fmt.Errorf("set tenant status: %w", err)
	}
	return out, nil
}

// DeleteTenant implements store.Store.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	if err := store.ValidateTenantID(id); err != nil {
		return err
	}
	now := s.opts.Now()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := liveTenant(ctx, tx, id); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM cells WHERE pool_id = ?`,
			`DELETE FROM resources WHERE pool_id = ?`,
			`DELETE FROM checkpoint_meta WHERE pool_id = ?`,
			`DELETE FROM lease_journal WHERE pool_id = ?`,
			`DELETE FROM api_keys WHERE tenant_id = ?`,
			`DELETE FROM audit_log WHERE tenant_id = ?`,
			`DELETE FROM tenant_limits WHERE tenant_id = ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return classify(err)
			}
		}
		_, err := tx.ExecContext(ctx, `UPDATE tenants SET status = 'deleted', deleted_at = ? WHERE id = ?`, micros(now), id)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("delete tenant %q: %w", id, err)
	}
	if l := s.log.Load(); l != nil {
		l.forget(id)
	}
	return nil
}

// PutLimits implements store.Store.
func (s *Store) PutLimits(ctx context.Context, tenantID string, l store.Limits) error {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := liveTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
INSERT INTO tenant_limits (tenant_id, rate_per_second, burst, reserved_resources, max_resources,
                           reserved_cells, max_cells, max_streams, max_leases,
                           admin_rate_per_second, admin_burst, admin_max_resources, admin_max_cells,
                           admin_max_streams, admin_max_leases,
                           policy_half_life_seconds, policy_quarantine_after, policy_quarantine_whole_after,
                           policy_quarantine_below, policy_quarantine_min_evidence,
                           policy_cooldown_base_seconds, policy_cooldown_max_seconds)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant_id) DO UPDATE SET
    rate_per_second = excluded.rate_per_second, burst = excluded.burst,
    reserved_resources = excluded.reserved_resources, max_resources = excluded.max_resources,
    reserved_cells = excluded.reserved_cells, max_cells = excluded.max_cells,
    max_streams = excluded.max_streams, max_leases = excluded.max_leases,
    admin_rate_per_second = excluded.admin_rate_per_second, admin_burst = excluded.admin_burst,
    admin_max_resources = excluded.admin_max_resources, admin_max_cells = excluded.admin_max_cells,
    admin_max_streams = excluded.admin_max_streams, admin_max_leases = excluded.admin_max_leases,
    policy_half_life_seconds = excluded.policy_half_life_seconds,
    policy_quarantine_after = excluded.policy_quarantine_after,
    policy_quarantine_whole_after = excluded.policy_quarantine_whole_after,
    policy_quarantine_below = excluded.policy_quarantine_below,
    policy_quarantine_min_evidence = excluded.policy_quarantine_min_evidence,
    policy_cooldown_base_seconds = excluded.policy_cooldown_base_seconds,
    policy_cooldown_max_seconds = excluded.policy_cooldown_max_seconds`,
			tenantID, l.RatePerSecond, l.Burst, l.ReservedResources, l.MaxResources,
			l.ReservedCells, l.MaxCells, l.MaxStreams, l.MaxLeases,
			l.Admin.RatePerSecond, l.Admin.Burst, l.Admin.MaxResources, l.Admin.MaxCells,
			l.Admin.MaxStreams, l.Admin.MaxLeases,
			l.Policy.HalfLifeSeconds, l.Policy.QuarantineAfter, l.Policy.QuarantineWholeAfter,
			l.Policy.QuarantineBelow, l.Policy.QuarantineMinEvidence,
			l.Policy.CooldownBaseSeconds, l.Policy.CooldownMaxSeconds)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("put limits of tenant %q: %w", tenantID, err)
	}
	return nil
}

// GetLimits implements store.Store.
func (s *Store) GetLimits(ctx context.Context, tenantID string) (store.Limits, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return store.Limits{}, err
	}
	var (
		l      store.Limits
		status store.Status
	)
	err := s.r.QueryRowContext(ctx, `
SELECT t.status, l.rate_per_second, l.burst, l.reserved_resources, l.max_resources,
       l.reserved_cells, l.max_cells, l.max_streams, l.max_leases,
       l.admin_rate_per_second, l.admin_burst, l.admin_max_resources, l.admin_max_cells,
       l.admin_max_streams, l.admin_max_leases,
       l.policy_half_life_seconds, l.policy_quarantine_after, l.policy_quarantine_whole_after,
       l.policy_quarantine_below, l.policy_quarantine_min_evidence,
       l.policy_cooldown_base_seconds, l.policy_cooldown_max_seconds
FROM tenants t LEFT JOIN tenant_limits l ON l.tenant_id = t.id
WHERE t.id = ?`, tenantID).Scan(&status, &l.RatePerSecond, &l.Burst, &l.ReservedResources, &l.MaxResources,
		&l.ReservedCells, &l.MaxCells, &l.MaxStreams, &l.MaxLeases,
		&l.Admin.RatePerSecond, &l.Admin.Burst, &l.Admin.MaxResources, &l.Admin.MaxCells,
		&l.Admin.MaxStreams, &l.Admin.MaxLeases,
		&l.Policy.HalfLifeSeconds, &l.Policy.QuarantineAfter, &l.Policy.QuarantineWholeAfter,
		&l.Policy.QuarantineBelow, &l.Policy.QuarantineMinEvidence,
		&l.Policy.CooldownBaseSeconds, &l.Policy.CooldownMaxSeconds)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && status == store.StatusDeleted) {
		return store.Limits{}, fmt.Errorf("tenant %q: %w", tenantID, store.ErrNotFound)
	}
	if err != nil {
		return store.Limits{}, fmt.Errorf("get limits of tenant %q: %w", tenantID, classify(err))
	}
	return l, nil
}

const keyColumns = `k.id, k.tenant_id, k.name, k.prefix, k.digest, k.created_at, k.revoked_at`

func scanKey(row interface{ Scan(...any) error }, extra ...any) (store.Key, error) {
	var (
		k                store.Key
		created, revoked sql.NullInt64
	)
	dest := append([]any{&k.ID, &k.TenantID, &k.Name, &k.Prefix, &k.Digest, &created, &revoked}, extra...)
	if err := row.Scan(dest...); err != nil {
		return store.Key{}, err
	}
	k.CreatedAt, k.RevokedAt = fromMicros(created), fromMicros(revoked)
	return k, nil
}

// CreateKey implements store.Store.
func (s *Store) CreateKey(ctx context.Context, k store.Key) (store.Key, error) {
	if err := k.Validate(); err != nil {
		return store.Key{}, err
	}
	k.CreatedAt = s.opts.Stamp(k.CreatedAt)
	k.RevokedAt = time.Time{}
	k.Digest = append([]byte(nil), k.Digest...)
	res, err := s.w.ExecContext(ctx, `
INSERT INTO api_keys (id, tenant_id, name, prefix, digest, created_at)
SELECT ?, id, ?, ?, ?, ? FROM tenants WHERE id = ? AND status <> 'deleted'`,
		k.ID, k.Name, k.Prefix, k.Digest, micros(k.CreatedAt), k.TenantID)
	if isUnique(err) {
		return store.Key{}, fmt.Errorf("create key %q: id or digest: %w", k.ID, store.ErrExists)
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("create key %q: %w", k.ID, classify(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return store.Key{}, fmt.Errorf("create key %q: tenant %q: %w", k.ID, k.TenantID, store.ErrNotFound)
	}
	return k, nil
}

// GetKey implements store.Store.
func (s *Store) GetKey(ctx context.Context, tenantID, keyID string) (store.Key, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return store.Key{}, err
	}
	if err := store.ValidateKeyID(keyID); err != nil {
		return store.Key{}, err
	}
	k, err := scanKey(s.r.QueryRowContext(ctx,
		`SELECT `+keyColumns+` FROM api_keys k WHERE k.tenant_id = ? AND k.id = ?`, tenantID, keyID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, fmt.Errorf("key %q of tenant %q: %w", keyID, tenantID, store.ErrNotFound)
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("get key %q: %w", keyID, classify(err))
	}
	return k, nil
}

// ListKeys implements store.Store.
func (s *Store) ListKeys(ctx context.Context, tenantID string) ([]store.Key, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return nil, err
	}
	if err := liveTenant(ctx, s.r, tenantID); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	rows, err := s.r.QueryContext(ctx,
		`SELECT `+keyColumns+` FROM api_keys k WHERE k.tenant_id = ? ORDER BY k.created_at, k.id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list keys of tenant %q: %w", tenantID, classify(err))
	}
	defer rows.Close()
	out := []store.Key{}
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys of tenant %q: %w", tenantID, classify(err))
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys of tenant %q: %w", tenantID, classify(err))
	}
	return out, nil
}

// RevokeKey implements store.Store.
func (s *Store) RevokeKey(ctx context.Context, tenantID, keyID string) error {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return err
	}
	if err := store.ValidateKeyID(keyID); err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx,
		`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE tenant_id = ? AND id = ?`,
		micros(s.opts.Now()), tenantID, keyID)
	if err != nil {
		return fmt.Errorf("revoke key %q: %w", keyID, classify(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("revoke key %q of tenant %q: %w", keyID, tenantID, store.ErrNotFound)
	}
	return nil
}

// LookupKey implements store.Store.
func (s *Store) LookupKey(ctx context.Context, digest []byte) (store.Key, store.Tenant, error) {
	if len(digest) != store.DigestLen {
		return store.Key{}, store.Tenant{}, fmt.Errorf("%w: lookup key: digest is %d bytes, want %d", store.ErrInvalid, len(digest), store.DigestLen)
	}
	var (
		t                  store.Tenant
		created, deletedAt sql.NullInt64
	)
	k, err := scanKey(s.r.QueryRowContext(ctx, `
SELECT `+keyColumns+`, t.id, t.name, t.status, t.created_at, t.deleted_at
FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
WHERE k.digest = ?`, digest), &t.ID, &t.Name, &t.Status, &created, &deletedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, store.Tenant{}, fmt.Errorf("lookup key: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Key{}, store.Tenant{}, fmt.Errorf("lookup key: %w", classify(err))
	}
	t.CreatedAt, t.DeletedAt = fromMicros(created), fromMicros(deletedAt)
	return k, t, nil
}

// AppendAudit implements store.Store.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	if err := e.Validate(); err != nil {
		return store.AuditEntry{}, err
	}
	e.At = s.opts.Stamp(e.At)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.checkFence(ctx, tx); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, `
INSERT INTO audit_log (tenant_id, at, actor, action, target, detail)
SELECT id, ?, ?, ?, ?, ? FROM tenants WHERE id = ? AND status <> 'deleted'
RETURNING id`, micros(e.At), e.Actor, e.Action, e.Target, e.Detail, e.TenantID).Scan(&e.ID)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.AuditEntry{}, fmt.Errorf("append audit: tenant %q: %w", e.TenantID, store.ErrNotFound)
	}
	if err != nil {
		return store.AuditEntry{}, fmt.Errorf("append audit: %w", classify(err))
	}
	return e, nil
}

// ListAudit implements store.Store.
func (s *Store) ListAudit(ctx context.Context, tenantID string, limit int, beforeID int64) ([]store.AuditEntry, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return nil, err
	}
	limit = store.AuditLimit(limit)
	if beforeID <= 0 {
		beforeID = math.MaxInt64
	}
	if err := liveTenant(ctx, s.r, tenantID); err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	rows, err := s.r.QueryContext(ctx, `
SELECT id, tenant_id, at, actor, action, target, detail FROM audit_log
WHERE tenant_id = ? AND id < ? ORDER BY id DESC LIMIT ?`, tenantID, beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit of tenant %q: %w", tenantID, classify(err))
	}
	defer rows.Close()
	out := []store.AuditEntry{}
	for rows.Next() {
		var (
			e  store.AuditEntry
			at sql.NullInt64
		)
		if err := rows.Scan(&e.ID, &e.TenantID, &at, &e.Actor, &e.Action, &e.Target, &e.Detail); err != nil {
			return nil, fmt.Errorf("list audit of tenant %q: %w", tenantID, classify(err))
		}
		e.At = fromMicros(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit of tenant %q: %w", tenantID, classify(err))
	}
	return out, nil
}

const signingKeyName = "signing_key"

// SigningKey implements store.Store.
func (s *Store) SigningKey(ctx context.Context) ([]byte, error) {
	var key []byte
	err := s.r.QueryRowContext(ctx, `SELECT value FROM server_secrets WHERE name = ?`, signingKeyName).Scan(&key)
	if err == nil {
		return key, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("signing key: %w", classify(err))
	}
	if s.opts.ReadOnly {
		return nil, fmt.Errorf("signing key: %w: the store has none yet, and a read-only store creates none", store.ErrNotFound)
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	// Whoever inserts first wins; everybody reads the winner back.
	if _, err := s.w.ExecContext(ctx,
		`INSERT INTO server_secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, signingKeyName, fresh); err != nil {
		return nil, fmt.Errorf("signing key: %w", classify(err))
	}
	if err := s.w.QueryRowContext(ctx, `SELECT value FROM server_secrets WHERE name = ?`, signingKeyName).Scan(&key); err != nil {
		return nil, fmt.Errorf("signing key: %w", classify(err))
	}
	return key, nil
}

// BumpEpoch implements store.Store.
func (s *Store) BumpEpoch(ctx context.Context) (uint32, error) {
	var v int64
	err := s.w.QueryRowContext(ctx, `
INSERT INTO server_counters (name, value) VALUES ('epoch', 1)
ON CONFLICT (name) DO UPDATE SET value = value + 1 WHERE value < ?
RETURNING value`, int64(math.MaxUint32)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("bump epoch: %w: epoch counter exhausted", store.ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("bump epoch: %w", classify(err))
	}
	return uint32(v), nil
}
