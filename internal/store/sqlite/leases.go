package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/repool/repool/internal/store"
)

// SetFence implements store.Store. The writer claim (LockWriter) already
// keeps a second server off the file; the fence also refuses the writes
// of a server whose claim was broken (its lock file removed by hand) once
// another server has raised the epoch.
func (s *Store) SetFence(epoch uint32) { s.fence.Store(epoch) }

// checkFence fails with store.ErrFenced unless the persisted epoch is the
// fence. It runs inside a write transaction (BEGIN IMMEDIATE holds the
// database's write lock), so no other process can raise the epoch between
// the check and the commit.
func (s *Store) checkFence(ctx context.Context, tx *sql.Tx) error {
	fence := s.fence.Load()
	if fence == 0 {
		return nil
	}
	var cur int64
	err := tx.QueryRowContext(ctx, `SELECT value FROM server_counters WHERE name = 'epoch'`).Scan(&cur)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return classify(err)
	}
	if cur != int64(fence) {
		return fmt.Errorf("%w: this server holds epoch %d, the store is at %d", store.ErrFenced, fence, cur)
	}
	return nil
}

// leaseBatch is the number of leases per multi-row INSERT (6 parameters
// each).
const leaseBatch = 100

// WriteLeases implements store.Store: one fenced transaction.
func (s *Store) WriteLeases(ctx context.Context, tenantID string, put []store.LeaseRow, del []uint64) error {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.checkFence(ctx, tx); err != nil {
			return err
		}
		for len(del) > 0 {
			n := min(len(del), leaseBatch*6)
			args := make([]any, 0, n+1)
			args = append(args, tenantID)
			for _, id := range del[:n] {
				args = append(args, int64(id))
			}
			q := `DELETE FROM lease_journal WHERE pool_id = ? AND lease_id IN (` + placeholders(n) + `)`
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return classify(err)
			}
			del = del[n:]
		}
		for len(put) > 0 {
			n := min(len(put), leaseBatch)
			var b strings.Builder
			b.WriteString(`INSERT INTO lease_journal (pool_id, lease_id, resource_id, context, token, expires_at) VALUES `)
			args := make([]any, 0, 6*n)
			for i, l := range put[:n] {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`(?, ?, ?, ?, ?, ?)`)
				args = append(args, tenantID, int64(l.ID), l.ResourceID, l.Context, int64(l.Token), l.ExpiresAt)
			}
			b.WriteString(` ON CONFLICT (pool_id, lease_id) DO UPDATE SET expires_at = excluded.expires_at, token = excluded.token`)
			if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
				return classify(err)
			}
			put = put[n:]
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("write lease journal of tenant %q: %w", tenantID, err)
	}
	return nil
}

// placeholders returns n comma-separated '?'.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// LoadLeases implements store.Store.
func (s *Store) LoadLeases(ctx context.Context, tenantID string) ([]store.LeaseRow, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `
SELECT lease_id, resource_id, context, token, expires_at FROM lease_journal WHERE pool_id = ? ORDER BY lease_id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("load lease journal of tenant %q: %w", tenantID, classify(err))
	}
	defer rows.Close()
	out := []store.LeaseRow{}
	for rows.Next() {
		var l store.LeaseRow
		var id, tok int64
		if err := rows.Scan(&id, &l.ResourceID, &l.Context, &tok, &l.ExpiresAt); err != nil {
			return nil, fmt.Errorf("load lease journal of tenant %q: %w", tenantID, classify(err))
		}
		l.ID, l.Token = uint64(id), uint64(tok)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load lease journal of tenant %q: %w", tenantID, classify(err))
	}
	return out, nil
}

// PruneLeases implements store.Store.
func (s *Store) PruneLeases(ctx context.Context, before int64) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.checkFence(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM lease_journal WHERE expires_at < ?`, before)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("prune lease journal: %w", err)
	}
	return nil
}
