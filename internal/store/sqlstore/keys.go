package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/repool/repool/internal/store"
)

const keyColumns = `k.id, k.tenant_id, k.name, k.prefix, k.digest, k.created_at, k.revoked_at`

// scanKey scans keyColumns, then extra.
func (s *Store) scanKey(row Row, extra ...any) (store.Key, error) {
	var k store.Key
	dest := append([]any{&k.ID, &k.TenantID, &k.Name, &k.Prefix, &k.Digest, s.c.TimeDest(&k.CreatedAt), s.c.TimeDest(&k.RevokedAt)}, extra...)
	if err := row.Scan(dest...); err != nil {
		return store.Key{}, err
	}
	return k, nil
}

// CreateKey implements store.Store.
func (s *Store) CreateKey(ctx context.Context, k store.Key) (store.Key, error) {
	if err := k.Validate(); err != nil {
		return store.Key{}, err
	}
	k.CreatedAt = s.c.Options.Stamp(k.CreatedAt)
	k.RevokedAt = time.Time{}
	k.Digest = append([]byte(nil), k.Digest...)
	n, err := s.c.Write.Exec(ctx, `
INSERT INTO api_keys (id, tenant_id, name, prefix, digest, created_at)
SELECT $1, id, $3, $4, $5, $6 FROM tenants WHERE id = $2 AND status <> 'deleted' `+s.c.ForShare,
		k.ID, k.TenantID, k.Name, k.Prefix, k.Digest, s.c.Time(k.CreatedAt))
	if s.c.IsUnique(err) {
		return store.Key{}, fmt.Errorf("create key %q: id or digest: %w", k.ID, store.ErrExists)
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("create key %q: %w", k.ID, s.classify(err))
	}
	if n == 0 {
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
	k, err := s.scanKey(s.c.Read.QueryRow(ctx,
		`SELECT `+keyColumns+` FROM api_keys k WHERE k.tenant_id = $1 AND k.id = $2`, tenantID, keyID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, fmt.Errorf("key %q of tenant %q: %w", keyID, tenantID, store.ErrNotFound)
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("get key %q: %w", keyID, s.classify(err))
	}
	return k, nil
}

// ListKeys implements store.Store.
func (s *Store) ListKeys(ctx context.Context, tenantID string) ([]store.Key, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return nil, err
	}
	if err := s.LiveTenant(ctx, s.c.Read, tenantID, ""); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	out := []store.Key{}
	err := s.c.Read.Query(ctx, func(row Row) error {
		k, err := s.scanKey(row)
		out = append(out, k)
		return err
	}, `SELECT `+keyColumns+` FROM api_keys k WHERE k.tenant_id = $1 ORDER BY k.created_at, k.id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list keys of tenant %q: %w", tenantID, s.classify(err))
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
	n, err := s.c.Write.Exec(ctx,
		`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $3) WHERE tenant_id = $1 AND id = $2`,
		tenantID, keyID, s.c.Time(s.c.Options.Now()))
	if err != nil {
		return fmt.Errorf("revoke key %q: %w", keyID, s.classify(err))
	}
	if n == 0 {
		return fmt.Errorf("revoke key %q of tenant %q: %w", keyID, tenantID, store.ErrNotFound)
	}
	return nil
}

// LookupKey implements store.Store.
func (s *Store) LookupKey(ctx context.Context, digest []byte) (store.Key, store.Tenant, error) {
	if len(digest) != store.DigestLen {
		return store.Key{}, store.Tenant{}, fmt.Errorf("%w: lookup key: digest is %d bytes, want %d", store.ErrInvalid, len(digest), store.DigestLen)
	}
	var t store.Tenant
	k, err := s.scanKey(s.c.Read.QueryRow(ctx, `
SELECT `+keyColumns+`, t.id, t.name, t.status, t.created_at, t.deleted_at, t.placement
FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
WHERE k.digest = $1`, digest), s.tenantDest(&t)...)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Key{}, store.Tenant{}, fmt.Errorf("lookup key: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Key{}, store.Tenant{}, fmt.Errorf("lookup key: %w", s.classify(err))
	}
	return k, t, nil
}
