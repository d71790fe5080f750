package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/repool/repool/internal/store"
)

// bindingBatch is the number of bindings per multi-row statement: 100
// upserts use 501 parameters, well under SQLite's 32766 and PostgreSQL's
// 65535.
const bindingBatch = 100

// saveBindings writes a checkpoint's affinity bindings in its transaction:
// a Full checkpoint replaces them all; an incremental one deletes the
// keys unbound and then upserts the bindings it carries.
func (s *Store) saveBindings(ctx context.Context, tx Conn, tenantID string, cp store.Checkpoint) error {
	var stmts []Stmt
	if cp.Full {
		stmts = append(stmts, Stmt{`DELETE FROM affinity_bindings WHERE pool_id = $1`, []any{tenantID}})
	} else {
		for i := 0; i < len(cp.Unbound); i += bindingBatch {
			var sb strings.Builder
			args := []any{tenantID}
			sb.WriteString(`DELETE FROM affinity_bindings WHERE pool_id = $1 AND (context, key) IN (VALUES `)
			for j, k := range cp.Unbound[i:min(i+bindingBatch, len(cp.Unbound))] {
				if j > 0 {
					sb.WriteString(", ")
				}
				fmt.Fprintf(&sb, "($%d, $%d)", len(args)+1, len(args)+2)
				args = append(args, k.Context, k.Key)
			}
			sb.WriteString(")")
			stmts = append(stmts, Stmt{sb.String(), args})
		}
	}
	for i := 0; i < len(cp.Bindings); i += bindingBatch {
		var sb strings.Builder
		args := []any{tenantID}
		sb.WriteString(`INSERT INTO affinity_bindings (pool_id, context, key, resource_id, expires_at, failed) VALUES `)
		for j, b := range cp.Bindings[i:min(i+bindingBatch, len(cp.Bindings))] {
			if j > 0 {
				sb.WriteString(", ")
			}
			n := len(args)
			fmt.Fprintf(&sb, "($1, $%d, $%d, $%d, $%d, $%d)", n+1, n+2, n+3, n+4, n+5)
			failed := 0
			if b.Failed {
				failed = 1
			}
			args = append(args, b.Context, b.Key, b.ResourceID, b.ExpiresAt, failed)
		}
		sb.WriteString(` ON CONFLICT (pool_id, context, key) DO UPDATE SET resource_id = excluded.resource_id,
    expires_at = excluded.expires_at, failed = excluded.failed`)
		stmts = append(stmts, Stmt{sb.String(), args})
	}
	if len(stmts) == 0 {
		return nil
	}
	return s.classify(tx.ExecAll(ctx, stmts))
}

// loadBindings reads the tenant's affinity bindings, ordered by context
// and key.
func (s *Store) loadBindings(ctx context.Context, c Conn, tenantID string) ([]store.BindingRow, error) {
	var rows []store.BindingRow
	err := c.Query(ctx, func(r Row) error {
		var (
			b      store.BindingRow
			failed int64
		)
		if err := r.Scan(&b.Context, &b.Key, &b.ResourceID, &b.ExpiresAt, &failed); err != nil {
			return err
		}
		b.Failed = failed != 0
		rows = append(rows, b)
		return nil
	}, `SELECT context, key, resource_id, expires_at, failed FROM affinity_bindings WHERE pool_id = $1 ORDER BY context, key`, tenantID)
	if err != nil {
		return nil, s.classify(err)
	}
	return rows, nil
}
