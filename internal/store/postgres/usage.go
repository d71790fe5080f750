package postgres

import (
	"context"
	"fmt"

	"github.com/repool/repool/internal/store"
)

// Usage implements store.Store: the size of the tables of the store's
// schema (the connection's current schema), with their indexes and TOAST,
// as PostgreSQL counts them on disk (pg_total_relation_size). Space that
// deleted rows held is reused by new rows once autovacuum has passed; the
// tables do not shrink without a VACUUM FULL.
func (s *Store) Usage(ctx context.Context) (store.Usage, error) {
	var u store.Usage
	err := s.pool.QueryRow(ctx, `
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND n.nspname = current_schema()`).Scan(&u.Bytes)
	if err != nil {
		return store.Usage{}, fmt.Errorf("store usage: %w", classify(err))
	}
	if u.AuditRows, err = s.AuditRows(ctx); err != nil {
		return store.Usage{}, fmt.Errorf("store usage: %w", err)
	}
	return u, nil
}
