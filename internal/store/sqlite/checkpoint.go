package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/internal/labels"
	"github.com/repool/repool/internal/store/sqlstore"
)

// insertBatch is the number of rows per multi-row INSERT: fewer statement
// executions make bulk checkpoints several times faster. 100 cells use 900
// of SQLite's 32766 parameters.
const insertBatch = 100

const (
	resourceInsert = `INSERT INTO resources (pool_id, id, capacity, labels, alpha, beta, updated_at,
    consecutive_failures, blocked_until, cooldown_level, registered_at, uses, max_uses, max_age, retired, imposed, recent) VALUES `
	resourceValues = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	resourceUpsert = ` ON CONFLICT (pool_id, id) DO UPDATE SET capacity = excluded.capacity,
    labels = excluded.labels, alpha = excluded.alpha, beta = excluded.beta, updated_at = excluded.updated_at,
    consecutive_failures = excluded.consecutive_failures, blocked_until = excluded.blocked_until,
    cooldown_level = excluded.cooldown_level, registered_at = excluded.registered_at, uses = excluded.uses,
    max_uses = excluded.max_uses, max_age = excluded.max_age, retired = excluded.retired, imposed = excluded.imposed,
    recent = excluded.recent`
	cellInsert = `INSERT INTO cells (pool_id, resource_id, context, alpha, beta, updated_at,
    consecutive_failures, blocked_until, cooldown_level, recent) VALUES `
	cellValues = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	cellUpsert = ` ON CONFLICT (pool_id, resource_id, context) DO UPDATE SET alpha = excluded.alpha,
    beta = excluded.beta, updated_at = excluded.updated_at, consecutive_failures = excluded.consecutive_failures,
    blocked_until = excluded.blocked_until, cooldown_level = excluded.cooldown_level, recent = excluded.recent`
)

// SaveCheckpoint implements store.Store.
func (s *Store) SaveCheckpoint(ctx context.Context, tenantID string, cp store.Checkpoint) error {
	return s.CheckpointTx(ctx, tenantID, cp, func(c sqlstore.Conn, now time.Time) error {
		tx := txOf(c)
		if _, err := tx.ExecContext(ctx, `
INSERT INTO checkpoint_meta (pool_id, fencing_hwm, saved_at) VALUES (?, ?, ?)
ON CONFLICT (pool_id) DO UPDATE SET fencing_hwm = max(fencing_hwm, excluded.fencing_hwm), saved_at = excluded.saved_at`,
			tenantID, int64(cp.FencingHWM), micros(now)); err != nil {
			return classify(err)
		}
		if cp.Full {
			for _, q := range []string{`DELETE FROM cells WHERE pool_id = ?`, `DELETE FROM resources WHERE pool_id = ?`} {
				if _, err := tx.ExecContext(ctx, q, tenantID); err != nil {
					return classify(err)
				}
			}
		} else if err := deleteResources(ctx, tx, tenantID, cp.Removed); err != nil {
			return err
		}
		if err := writeResources(ctx, tx, tenantID, cp.Resources, !cp.Full); err != nil {
			return err
		}
		if err := writeCells(ctx, tx, tenantID, cp.Cells, !cp.Full); err != nil {
			return err
		}
		if !cp.Full {
			return checkCellRefs(ctx, tx, tenantID, cp.Cells)
		}
		return nil
	})
}

func deleteResources(ctx context.Context, tx *sql.Tx, tenantID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	delCells, err := tx.PrepareContext(ctx, `DELETE FROM cells WHERE pool_id = ? AND resource_id = ?`)
	if err != nil {
		return classify(err)
	}
	defer delCells.Close()
	delRes, err := tx.PrepareContext(ctx, `DELETE FROM resources WHERE pool_id = ? AND id = ?`)
	if err != nil {
		return classify(err)
	}
	defer delRes.Close()
	for _, id := range ids {
		if _, err := delCells.ExecContext(ctx, tenantID, id); err != nil {
			return classify(err)
		}
		if _, err := delRes.ExecContext(ctx, tenantID, id); err != nil {
			return classify(err)
		}
	}
	return nil
}

// batcher executes multi-row INSERTs of up to insertBatch rows with one
// prepared statement for full batches.
type batcher struct {
	tx     *sql.Tx
	head   string    // INSERT ... VALUES
	values string    // one row's placeholders
	tail   string    // ON CONFLICT ..., or ""
	full   *sql.Stmt // prepared on the first full batch
	args   []any
	nrows  int
}

func newBatcher(tx *sql.Tx, head, values, tail string, perRow int) *batcher {
	return &batcher{tx: tx, head: head, values: values, tail: tail, args: make([]any, 0, perRow*insertBatch)}
}

func (b *batcher) sql(rows int) string {
	q := make([]byte, 0, len(b.head)+rows*(len(b.values)+1)+len(b.tail))
	q = append(q, b.head...)
	for i := range rows {
		if i > 0 {
			q = append(q, ',')
		}
		q = append(q, b.values...)
	}
	return string(append(q, b.tail...))
}

func (b *batcher) add(ctx context.Context, row ...any) error {
	b.args = append(b.args, row...)
	b.nrows++
	if b.nrows < insertBatch {
		return nil
	}
	if b.full == nil {
		st, err := b.tx.PrepareContext(ctx, b.sql(insertBatch))
		if err != nil {
			return classify(err)
		}
		b.full = st
	}
	_, err := b.full.ExecContext(ctx, b.args...)
	b.args, b.nrows = b.args[:0], 0
	return classify(err)
}

// flush writes the remaining rows and releases the statement.
func (b *batcher) flush(ctx context.Context) error {
	defer func() {
		if b.full != nil {
			b.full.Close()
		}
	}()
	if b.nrows == 0 {
		return nil
	}
	_, err := b.tx.ExecContext(ctx, b.sql(b.nrows), b.args...)
	return classify(err)
}

func writeResources(ctx context.Context, tx *sql.Tx, tenantID string, rows []store.ResourceRow, upsert bool) error {
	tail := ""
	if upsert {
		tail = resourceUpsert
	}
	b := newBatcher(tx, resourceInsert, resourceValues, tail, 17)
	for _, r := range rows {
		if err := b.add(ctx, tenantID, r.ID, r.Capacity, labels.Encode(r.Labels), r.Alpha, r.Beta, r.UpdatedAt,
			r.ConsecutiveFailures, r.BlockedUntil, r.CooldownLevel,
			r.RegisteredAt, r.Uses, r.MaxUses, r.MaxAge, r.Retired, r.Imposed, r.Recent); err != nil {
			b.flush(ctx)
			return err
		}
	}
	return b.flush(ctx)
}

func writeCells(ctx context.Context, tx *sql.Tx, tenantID string, rows []store.CellRow, upsert bool) error {
	tail := ""
	if upsert {
		tail = cellUpsert
	}
	b := newBatcher(tx, cellInsert, cellValues, tail, 10)
	for _, c := range rows {
		if err := b.add(ctx, tenantID, c.ResourceID, c.Context, c.Alpha, c.Beta, c.UpdatedAt,
			c.ConsecutiveFailures, c.BlockedUntil, c.CooldownLevel, c.Recent); err != nil {
			b.flush(ctx)
			return err
		}
	}
	return b.flush(ctx)
}

// checkCellRefs fails with store.ErrInvalid if an incremental checkpoint
// wrote a cell whose resource does not exist after it was applied.
func checkCellRefs(ctx context.Context, tx *sql.Tx, tenantID string, cells []store.CellRow) error {
	if len(cells) == 0 {
		return nil
	}
	st, err := tx.PrepareContext(ctx, `SELECT EXISTS (SELECT 1 FROM resources WHERE pool_id = ? AND id = ?)`)
	if err != nil {
		return classify(err)
	}
	defer st.Close()
	checked := make(map[string]struct{})
	for _, c := range cells {
		if _, ok := checked[c.ResourceID]; ok {
			continue
		}
		checked[c.ResourceID] = struct{}{}
		var exists bool
		if err := st.QueryRowContext(ctx, tenantID, c.ResourceID).Scan(&exists); err != nil {
			return classify(err)
		}
		if !exists {
			return fmt.Errorf("%w: cell %q/%q: resource does not exist", store.ErrInvalid, c.ResourceID, c.Context)
		}
	}
	return nil
}

// LoadCheckpoint implements store.Store.
func (s *Store) LoadCheckpoint(ctx context.Context, tenantID string) (store.PoolState, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return store.PoolState{}, err
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return store.PoolState{}, fmt.Errorf("load checkpoint of tenant %q: %w", tenantID, classify(err))
	}
	defer tx.Rollback()
	st, err := s.loadState(ctx, tx, tenantID)
	if err != nil {
		return store.PoolState{}, fmt.Errorf("load checkpoint of tenant %q: %w", tenantID, err)
	}
	return st, nil
}

func (s *Store) loadState(ctx context.Context, tx *sql.Tx, tenantID string) (store.PoolState, error) {
	st, err := s.LoadMeta(ctx, conn{tx}, tenantID, "")
	if err != nil {
		return store.PoolState{}, err
	}

	rows, err := tx.QueryContext(ctx, `
SELECT id, capacity, labels, alpha, beta, updated_at, consecutive_failures, blocked_until, cooldown_level,
    registered_at, uses, max_uses, max_age, retired, imposed, recent
FROM resources WHERE pool_id = ? ORDER BY id`, tenantID)
	if err != nil {
		return store.PoolState{}, classify(err)
	}
	for rows.Next() {
		var (
			r                 store.ResourceRow
			capacity, cf, cl  int64
			lab               string
			alpha, beta       sql.NullFloat64
			updated, blockedU int64
		)
		if err := rows.Scan(&r.ID, &capacity, &lab, &alpha, &beta, &updated, &cf, &blockedU, &cl,
			&r.RegisteredAt, &r.Uses, &r.MaxUses, &r.MaxAge, &r.Retired, &r.Imposed, &r.Recent); err != nil {
			rows.Close()
			return store.PoolState{}, fmt.Errorf("%w: resource %q: %v", store.ErrCorrupt, r.ID, err)
		}
		if r.Labels, err = labels.Decode(lab); err != nil {
			rows.Close()
			return store.PoolState{}, fmt.Errorf("%w: resource %q: %v", store.ErrCorrupt, r.ID, err)
		}
		if !fitsInt32(capacity, cf, cl) || !alpha.Valid || !beta.Valid {
			rows.Close()
			return store.PoolState{}, fmt.Errorf("%w: resource %q: out-of-range or NULL column", store.ErrCorrupt, r.ID)
		}
		r.Capacity, r.ConsecutiveFailures, r.CooldownLevel = int32(capacity), int32(cf), int32(cl)
		r.Alpha, r.Beta, r.UpdatedAt, r.BlockedUntil = alpha.Float64, beta.Float64, updated, blockedU
		st.Resources = append(st.Resources, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return store.PoolState{}, classify(err)
	}

	rows, err = tx.QueryContext(ctx, `
SELECT resource_id, context, alpha, beta, updated_at, consecutive_failures, blocked_until, cooldown_level, recent
FROM cells WHERE pool_id = ? ORDER BY resource_id, context`, tenantID)
	if err != nil {
		return store.PoolState{}, classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			c                 store.CellRow
			cf, cl            int64
			alpha, beta       sql.NullFloat64
			updated, blockedU int64
		)
		if err := rows.Scan(&c.ResourceID, &c.Context, &alpha, &beta, &updated, &cf, &blockedU, &cl, &c.Recent); err != nil {
			return store.PoolState{}, fmt.Errorf("%w: cell %q/%q: %v", store.ErrCorrupt, c.ResourceID, c.Context, err)
		}
		if !fitsInt32(cf, cl) || !alpha.Valid || !beta.Valid {
			return store.PoolState{}, fmt.Errorf("%w: cell %q/%q: out-of-range or NULL column", store.ErrCorrupt, c.ResourceID, c.Context)
		}
		c.ConsecutiveFailures, c.CooldownLevel = int32(cf), int32(cl)
		c.Alpha, c.Beta, c.UpdatedAt, c.BlockedUntil = alpha.Float64, beta.Float64, updated, blockedU
		st.Cells = append(st.Cells, c)
	}
	if err := rows.Err(); err != nil {
		return store.PoolState{}, classify(err)
	}
	if err := st.Validate(); err != nil {
		return store.PoolState{}, err
	}
	return st, nil
}

func fitsInt32(vs ...int64) bool {
	for _, v := range vs {
		if v < math.MinInt32 || v > math.MaxInt32 {
			return false
		}
	}
	return true
}
