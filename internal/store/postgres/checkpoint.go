package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repool/repool/internal/store"
	"github.com/repool/repool/internal/store/internal/labels"
	"github.com/repool/repool/internal/store/sqlstore"
)

// SaveCheckpoint implements store.Store.
//
// The transaction (sqlstore.CheckpointTx) first takes FOR SHARE on the
// tenant row and then upserts the tenant's checkpoint_meta row, whose row
// lock serializes checkpoints of the same tenant. A Full checkpoint moves
// the tenant to a new generation: it deletes the old generation's rows and
// COPYs the new ones (binary format, see copyReader). An incremental one works on the current generation:
// it deletes Removed, upserts with unnest arrays, then checks that every
// written cell's resource exists.
func (s *Store) SaveCheckpoint(ctx context.Context, tenantID string, cp store.Checkpoint) error {
	return s.CheckpointTx(ctx, tenantID, cp, func(c sqlstore.Conn, now time.Time) error {
		tx := txOf(c)
		var gen int64
		if err := tx.QueryRow(ctx, `
INSERT INTO checkpoint_meta AS m (pool_id, fencing_hwm, gen, saved_at) VALUES ($1, $2, 1, $3)
ON CONFLICT (pool_id) DO UPDATE SET fencing_hwm = GREATEST(m.fencing_hwm, excluded.fencing_hwm),
    gen = m.gen + CASE WHEN $4 THEN 1 ELSE 0 END, saved_at = excluded.saved_at
RETURNING gen`, tenantID, int64(cp.FencingHWM), now, cp.Full).Scan(&gen); err != nil {
			return classify(err)
		}
		if cp.Full {
			return saveFull(ctx, tx, tenantID, gen, cp)
		}
		return saveIncremental(ctx, tx, tenantID, gen, cp)
	})
}

func saveFull(ctx context.Context, tx pgx.Tx, tenantID string, gen int64, cp store.Checkpoint) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM cells WHERE pool_id = $1 AND gen <> $2`, tenantID, gen)
	b.Queue(`DELETE FROM resources WHERE pool_id = $1 AND gen <> $2`, tenantID, gen)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return classify(err)
	}
	pg := tx.Conn().PgConn()
	_, err := pg.CopyFrom(ctx, newCopyReader(len(cp.Resources), func(b []byte, i int) []byte {
		r := &cp.Resources[i]
		b = appendFields(b, 18)
		b = appendText(b, tenantID)
		b = appendInt8(b, gen)
		b = appendText(b, r.ID)
		b = appendInt4(b, r.Capacity)
		b = appendText(b, labels.Encode(r.Labels))
		b = appendFloat8(b, r.Alpha)
		b = appendFloat8(b, r.Beta)
		b = appendInt8(b, r.UpdatedAt)
		b = appendInt4(b, r.ConsecutiveFailures)
		b = appendInt8(b, r.BlockedUntil)
		b = appendInt4(b, r.CooldownLevel)
		b = appendInt8(b, r.RegisteredAt)
		b = appendInt8(b, r.Uses)
		b = appendInt8(b, r.MaxUses)
		b = appendInt8(b, r.MaxAge)
		b = appendText(b, r.Retired)
		b = appendBool(b, r.Imposed)
		return appendInt8(b, r.Recent)
	}), `COPY resources (pool_id, gen, id, capacity, labels, alpha, beta, updated_at,
    consecutive_failures, blocked_until, cooldown_level, registered_at, uses, max_uses, max_age, retired, imposed, recent)
    FROM STDIN WITH (FORMAT binary)`)
	if err != nil {
		return classify(err)
	}
	_, err = pg.CopyFrom(ctx, newCopyReader(len(cp.Cells), func(b []byte, i int) []byte {
		c := &cp.Cells[i]
		b = appendFields(b, 11)
		b = appendText(b, tenantID)
		b = appendInt8(b, gen)
		b = appendText(b, c.ResourceID)
		b = appendText(b, c.Context)
		b = appendFloat8(b, c.Alpha)
		b = appendFloat8(b, c.Beta)
		b = appendInt8(b, c.UpdatedAt)
		b = appendInt4(b, c.ConsecutiveFailures)
		b = appendInt8(b, c.BlockedUntil)
		b = appendInt4(b, c.CooldownLevel)
		return appendInt8(b, c.Recent)
	}), `COPY cells (pool_id, gen, resource_id, context, alpha, beta, updated_at,
    consecutive_failures, blocked_until, cooldown_level, recent) FROM STDIN WITH (FORMAT binary)`)
	return classify(err)
}

func saveIncremental(ctx context.Context, tx pgx.Tx, tenantID string, gen int64, cp store.Checkpoint) error {
	b := &pgx.Batch{}
	if len(cp.Removed) > 0 {
		b.Queue(`DELETE FROM cells WHERE pool_id = $1 AND gen = $2 AND resource_id = ANY($3)`, tenantID, gen, cp.Removed)
		b.Queue(`DELETE FROM resources WHERE pool_id = $1 AND gen = $2 AND id = ANY($3)`, tenantID, gen, cp.Removed)
	}
	if n := len(cp.Resources); n > 0 {
		var (
			ids, labs             = make([]string, n), make([]string, n)
			caps, fails, cooldown = make([]int32, n), make([]int32, n), make([]int32, n)
			alphas, betas         = make([]float64, n), make([]float64, n)
			updated, blocked      = make([]int64, n), make([]int64, n)
			born, uses, maxUses   = make([]int64, n), make([]int64, n), make([]int64, n)
			maxAge, recent        = make([]int64, n), make([]int64, n)
			retired               = make([]string, n)
			imposed               = make([]bool, n)
		)
		for i, r := range cp.Resources {
			ids[i], caps[i], labs[i], alphas[i], betas[i] = r.ID, r.Capacity, labels.Encode(r.Labels), r.Alpha, r.Beta
			updated[i], fails[i], blocked[i], cooldown[i] = r.UpdatedAt, r.ConsecutiveFailures, r.BlockedUntil, r.CooldownLevel
			born[i], uses[i], maxUses[i], maxAge[i] = r.RegisteredAt, r.Uses, r.MaxUses, r.MaxAge
			retired[i], imposed[i], recent[i] = r.Retired, r.Imposed, r.Recent
		}
		b.Queue(`
INSERT INTO resources (pool_id, gen, id, capacity, labels, alpha, beta, updated_at, consecutive_failures, blocked_until, cooldown_level,
    registered_at, uses, max_uses, max_age, retired, imposed, recent)
SELECT $1, $11, * FROM unnest($2::text[], $3::int4[], $4::text[], $5::float8[], $6::float8[], $7::int8[], $8::int4[], $9::int8[], $10::int4[],
    $12::int8[], $13::int8[], $14::int8[], $15::int8[], $16::text[], $17::bool[], $18::int8[])
ON CONFLICT (pool_id, gen, id) DO UPDATE SET capacity = excluded.capacity, labels = excluded.labels,
    alpha = excluded.alpha, beta = excluded.beta, updated_at = excluded.updated_at,
    consecutive_failures = excluded.consecutive_failures, blocked_until = excluded.blocked_until,
    cooldown_level = excluded.cooldown_level, registered_at = excluded.registered_at, uses = excluded.uses,
    max_uses = excluded.max_uses, max_age = excluded.max_age, retired = excluded.retired, imposed = excluded.imposed,
    recent = excluded.recent`,
			tenantID, ids, caps, labs, alphas, betas, updated, fails, blocked, cooldown, gen,
			born, uses, maxUses, maxAge, retired, imposed, recent)
	}
	var refs []string
	if n := len(cp.Cells); n > 0 {
		var (
			res, ctxs        = make([]string, n), make([]string, n)
			alphas, betas    = make([]float64, n), make([]float64, n)
			updated, blocked = make([]int64, n), make([]int64, n)
			fails, cooldown  = make([]int32, n), make([]int32, n)
			recent           = make([]int64, n)
			seen             = make(map[string]struct{})
		)
		for i, c := range cp.Cells {
			res[i], ctxs[i], alphas[i], betas[i] = c.ResourceID, c.Context, c.Alpha, c.Beta
			updated[i], fails[i], blocked[i], cooldown[i], recent[i] = c.UpdatedAt, c.ConsecutiveFailures, c.BlockedUntil, c.CooldownLevel, c.Recent
			if _, ok := seen[c.ResourceID]; !ok {
				seen[c.ResourceID] = struct{}{}
				refs = append(refs, c.ResourceID)
			}
		}
		b.Queue(`
INSERT INTO cells (pool_id, gen, resource_id, context, alpha, beta, updated_at, consecutive_failures, blocked_until, cooldown_level, recent)
SELECT $1, $10, * FROM unnest($2::text[], $3::text[], $4::float8[], $5::float8[], $6::int8[], $7::int4[], $8::int8[], $9::int4[], $11::int8[])
ON CONFLICT (pool_id, gen, resource_id, context) DO UPDATE SET alpha = excluded.alpha, beta = excluded.beta,
    updated_at = excluded.updated_at, consecutive_failures = excluded.consecutive_failures,
    blocked_until = excluded.blocked_until, cooldown_level = excluded.cooldown_level, recent = excluded.recent`,
			tenantID, res, ctxs, alphas, betas, updated, fails, blocked, cooldown, gen, recent)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return classify(err)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	var missing string
	err := tx.QueryRow(ctx, `
SELECT r FROM unnest($3::text[]) AS r
WHERE NOT EXISTS (SELECT 1 FROM resources WHERE pool_id = $1 AND gen = $2 AND id = r) LIMIT 1`, tenantID, gen, refs).Scan(&missing)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return classify(err)
	}
	return fmt.Errorf("%w: cell of resource %q: resource does not exist", store.ErrInvalid, missing)
}

// LoadCheckpoint implements store.Store. It reads from one REPEATABLE READ
// snapshot.
func (s *Store) LoadCheckpoint(ctx context.Context, tenantID string) (store.PoolState, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return store.PoolState{}, err
	}
	var st store.PoolState
	err := s.inTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		st, err = s.loadState(ctx, tx, tenantID)
		return err
	})
	if err != nil {
		return store.PoolState{}, fmt.Errorf("load checkpoint of tenant %q: %w", tenantID, err)
	}
	return st, nil
}

func (s *Store) loadState(ctx context.Context, tx pgx.Tx, tenantID string) (store.PoolState, error) {
	var gen int64
	st, err := s.LoadMeta(ctx, conn{tx}, tenantID, ", gen", &gen)
	if err != nil || !st.HasCheckpoint {
		return st, err
	}

	rows, err := tx.Query(ctx, `
SELECT id, capacity, labels, alpha, beta, updated_at, consecutive_failures, blocked_until, cooldown_level,
    registered_at, uses, max_uses, max_age, retired, imposed, recent
FROM resources WHERE pool_id = $1 AND gen = $2 ORDER BY id`, tenantID, gen)
	if err != nil {
		return store.PoolState{}, classify(err)
	}
	var (
		r   store.ResourceRow
		lab string
	)
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Capacity, &lab, &r.Alpha, &r.Beta, &r.UpdatedAt, &r.ConsecutiveFailures, &r.BlockedUntil, &r.CooldownLevel,
		&r.RegisteredAt, &r.Uses, &r.MaxUses, &r.MaxAge, &r.Retired, &r.Imposed, &r.Recent},
		func() error {
			var err error
			if r.Labels, err = labels.Decode(lab); err != nil {
				return fmt.Errorf("%w: resource %q: %v", store.ErrCorrupt, r.ID, err)
			}
			st.Resources = append(st.Resources, r)
			return nil
		})
	if err != nil {
		return store.PoolState{}, classify(err)
	}

	rows, err = tx.Query(ctx, `
SELECT resource_id, context, alpha, beta, updated_at, consecutive_failures, blocked_until, cooldown_level, recent
FROM cells WHERE pool_id = $1 AND gen = $2 ORDER BY resource_id, context`, tenantID, gen)
	if err != nil {
		return store.PoolState{}, classify(err)
	}
	var c store.CellRow
	_, err = pgx.ForEachRow(rows, []any{&c.ResourceID, &c.Context, &c.Alpha, &c.Beta, &c.UpdatedAt, &c.ConsecutiveFailures, &c.BlockedUntil, &c.CooldownLevel, &c.Recent},
		func() error {
			st.Cells = append(st.Cells, c)
			return nil
		})
	if err != nil {
		return store.PoolState{}, classify(err)
	}
	if err := st.Validate(); err != nil {
		return store.PoolState{}, err
	}
	return st, nil
}
