package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/repool/repool/internal/store"
)

// Retention: each statement deletes at most a batch of one tenant's rows,
// found through an index (audit_log_tenant_at for age, audit_log_tenant
// for IDs, api_keys_tenant for keys), so that it holds the database for
// about the time of its own rows. AuditCut, the one read that walks a
// tenant's entries, runs on the read connections.

// PruneAudit implements store.Store.
func (s *Store) PruneAudit(ctx context.Context, tenantID string, p store.AuditPrune) (int64, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return 0, err
	}
	if err := p.Validate(); err != nil {
		return 0, err
	}
	var deleted int64
	err := s.c.InTx(ctx, true, func(tx Conn) error {
		if !p.Before.IsZero() {
			n, err := tx.Exec(ctx, `
DELETE FROM audit_log WHERE id IN (
    SELECT id FROM audit_log WHERE tenant_id = $1 AND at < $2 ORDER BY at LIMIT $3)`,
				tenantID, s.c.Time(store.Timestamp(p.Before)), p.Limit)
			if err != nil {
				return s.classify(err)
			}
			deleted += n
		}
		if p.ThroughID > 0 && deleted < int64(p.Limit) {
			n, err := tx.Exec(ctx, `
DELETE FROM audit_log WHERE id IN (
    SELECT id FROM audit_log WHERE tenant_id = $1 AND id <= $2 ORDER BY id LIMIT $3)`,
				tenantID, p.ThroughID, int64(p.Limit)-deleted)
			if err != nil {
				return s.classify(err)
			}
			deleted += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("prune audit of tenant %q: %w", tenantID, err)
	}
	return deleted, nil
}

// AuditCut implements store.Store.
func (s *Store) AuditCut(ctx context.Context, tenantID string, keep int64) (int64, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return 0, err
	}
	if keep < 0 {
		return 0, fmt.Errorf("%w: audit cut: keep %d is negative", store.ErrInvalid, keep)
	}
	var id int64
	err := s.c.Read.QueryRow(ctx,
		`SELECT id FROM audit_log WHERE tenant_id = $1 ORDER BY id DESC LIMIT 1 OFFSET $2`, tenantID, keep).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("audit cut of tenant %q: %w", tenantID, s.classify(err))
	}
	return id, nil
}

// PruneRevokedKeys implements store.Store.
func (s *Store) PruneRevokedKeys(ctx context.Context, tenantID string, before time.Time, limit int) (int64, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return 0, err
	}
	if err := store.ValidatePruneLimit(limit); err != nil {
		return 0, err
	}
	var deleted int64
	err := s.c.InTx(ctx, true, func(tx Conn) error {
		var err error
		deleted, err = tx.Exec(ctx, `
DELETE FROM api_keys WHERE id IN (
    SELECT id FROM api_keys WHERE tenant_id = $1 AND revoked_at IS NOT NULL AND revoked_at < $2 ORDER BY revoked_at LIMIT $3)`,
			tenantID, s.c.Time(store.Timestamp(before)), limit)
		return s.classify(err)
	})
	if err != nil {
		return 0, fmt.Errorf("prune revoked keys of tenant %q: %w", tenantID, err)
	}
	return deleted, nil
}

// AuditRows returns the number of audit entries of every tenant: the
// Usage field both dialects share.
func (s *Store) AuditRows(ctx context.Context) (int64, error) {
	var n int64
	if err := s.c.Read.QueryRow(ctx, `SELECT count(*) FROM audit_log`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count audit rows: %w", s.classify(err))
	}
	return n, nil
}
