package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/store"
)

// SetFence implements store.HA.
func (s *Store) SetFence(epoch uint32) { s.fence.Store(epoch) }

// DSN implements store.HA.
func (s *Store) DSN() string { return s.dsn }

// fenceSQL reads the persisted epoch of the group named by $1 (its counter,
// store.EpochCounter) and takes its row FOR SHARE.
const fenceSQL = `SELECT value FROM server_counters WHERE name = $1 FOR SHARE`

// placementSQL reads the group tenant $1 is placed on, taking its row FOR
// SHARE: MoveTenant's update of the row waits for a fenced write of the
// tenant's pool, and a write after the move sees the new group.
const placementSQL = `SELECT placement FROM tenants WHERE id = $1 AND status <> 'deleted' FOR SHARE`

// placementErr judges the result of placementSQL: store.ErrFenced unless
// the tenant is placed on this store's group, store.ErrNotFound if it is
// gone.
func (s *Store) placementErr(tenant, cur string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("tenant %q: %w", tenant, store.ErrNotFound)
	}
	if err != nil {
		return classify(err)
	}
	if g := s.opts.GroupName(); cur != g {
		return fmt.Errorf("%w: tenant %q is placed on group %q, not on %q", store.ErrFenced, tenant, cur, g)
	}
	return nil
}

// checkFence fails with store.ErrFenced unless the persisted epoch is the
// fence. It takes the epoch row FOR SHARE, so a successor's BumpEpoch waits
// for this transaction, and this transaction, if it starts after the bump,
// sees the new epoch: a deposed leader can never write after its successor
// has taken over.
func (s *Store) checkFence(ctx context.Context, tx pgx.Tx) error {
	fence := s.fence.Load()
	if fence == 0 {
		return nil
	}
	var cur int64
	err := tx.QueryRow(ctx, fenceSQL, store.EpochCounter(s.opts.Group)).Scan(&cur)
	return fenceErr(fence, cur, err)
}

// fenceErr judges the result of fenceSQL: the query's error (classified), or
// store.ErrFenced unless the persisted epoch cur is the fence. A missing
// epoch row reads as epoch 0.
func fenceErr(fence uint32, cur int64, err error) error {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return classify(err)
	}
	if cur != int64(fence) {
		return fmt.Errorf("%w: this server holds epoch %d, the store is at %d", store.ErrFenced, fence, cur)
	}
	return nil
}

// WriteLeases implements store.HA. It costs two round trips: BEGIN, the
// fence check and the writes go in one pipelined batch, then COMMIT (or
// ROLLBACK if the fence check failed). The writes run before the fence's
// answer is read, but inside the transaction after the check, so a fenced
// write is rolled back and changes nothing.
func (s *Store) WriteLeases(ctx context.Context, tenantID string, put []store.LeaseRow, del []uint64) error {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return err
	}
	ids := make([]int64, len(put))
	res := make([]string, len(put))
	ctxs := make([]string, len(put))
	toks := make([]int64, len(put))
	exps := make([]int64, len(put))
	for i, l := range put {
		ids[i], res[i], ctxs[i], toks[i], exps[i] = int64(l.ID), l.ResourceID, l.Context, int64(l.Token), l.ExpiresAt
	}
	dels := make([]int64, len(del))
	for i, d := range del {
		dels[i] = int64(d)
	}
	fence := s.fence.Load()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	if fence != 0 {
		b.Queue(fenceSQL, store.EpochCounter(s.opts.Group))
		b.Queue(placementSQL, tenantID)
	}
	if len(dels) > 0 {
		b.Queue(`DELETE FROM lease_journal WHERE pool_id = $1 AND lease_id = ANY($2)`, tenantID, dels)
	}
	if len(put) > 0 {
		b.Queue(`
INSERT INTO lease_journal (pool_id, lease_id, resource_id, context, token, expires_at)
SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
ON CONFLICT (pool_id, lease_id) DO UPDATE SET expires_at = excluded.expires_at, token = excluded.token`,
			tenantID, ids, res, ctxs, toks, exps)
	}
	br := s.pool.SendBatch(ctx, b)
	tx := br.Tx()
	err := func() error {
		if _, err := br.Exec(); err != nil { // BEGIN
			return classify(err)
		}
		if fence != 0 {
			var cur int64
			scanErr := br.QueryRow().Scan(&cur)
			if err := fenceErr(fence, cur, scanErr); err != nil {
				return err
			}
			var placed string
			scanErr = br.QueryRow().Scan(&placed)
			if err := s.placementErr(tenantID, placed, scanErr); err != nil {
				return err
			}
		}
		return classify(br.Close())
	}()
	if err == nil {
		err = classify(tx.Commit(ctx))
	} else {
		br.Close()
		// Roll back even if ctx is done, so the connection stays usable,
		// but never wait long for a server that has gone away.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		tx.Rollback(rctx)
		cancel()
	}
	if err != nil {
		return fmt.Errorf("write lease journal of tenant %q: %w", tenantID, err)
	}
	return nil
}

// LoadLeases implements store.HA.
func (s *Store) LoadLeases(ctx context.Context, tenantID string) ([]store.LeaseRow, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
SELECT lease_id, resource_id, context, token, expires_at FROM lease_journal WHERE pool_id = $1 ORDER BY lease_id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("load lease journal of tenant %q: %w", tenantID, classify(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.LeaseRow, error) {
		var l store.LeaseRow
		var id, tok int64
		err := r.Scan(&id, &l.ResourceID, &l.Context, &tok, &l.ExpiresAt)
		l.ID, l.Token = uint64(id), uint64(tok)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("load lease journal of tenant %q: %w", tenantID, classify(err))
	}
	return out, nil
}

// PruneLeases implements store.HA.
func (s *Store) PruneLeases(ctx context.Context, before int64) error {
	err := s.inTx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := s.checkFence(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
DELETE FROM lease_journal WHERE expires_at < $1
AND pool_id IN (SELECT id FROM tenants WHERE placement = $2)`, before, s.opts.GroupName())
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("prune lease journal: %w", err)
	}
	return nil
}

// PlacementsFingerprint is a value that changes whenever a tenant is
// created, deleted or moved: the count of live tenants and the sum of a
// 64-bit hash of each one's id and group, computed in the database, so
// that a front end polling the placements (lb's sync-placements) lists
// them only when they changed.
func (s *Store) PlacementsFingerprint(ctx context.Context) (string, error) {
	var n int64
	var sum string
	err := s.pool.QueryRow(ctx, `
SELECT count(*), coalesce(sum(hashtextextended(id || '/' || placement, 0)), 0)::text
FROM tenants WHERE status <> 'deleted'`).Scan(&n, &sum)
	if err != nil {
		return "", fmt.Errorf("placements fingerprint: %w", classify(err))
	}
	return fmt.Sprintf("%d:%s", n, sum), nil
}
