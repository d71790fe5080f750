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
	err := tx.StmtContext(ctx, s.epochQuery).QueryRowContext(ctx).Scan(&cur)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return classify(err)
	}
	if cur != int64(fence) {
		return fmt.Errorf("%w: this server holds epoch %d, the store is at %d", store.ErrFenced, fence, cur)
	}
	return nil
}

// Lease journal statements, prepared once on the writer connection for
// one row and for leaseChunk rows: a commit executes a few prepared
// statements instead of parsing a multi-row statement of its own length
// or executing one statement per row.
const leaseChunk = 16

func leaseDeleteSQL(n int) string {
	return `DELETE FROM lease_journal WHERE pool_id = ? AND lease_id IN (` + strings.TrimSuffix(strings.Repeat("?,", n), ",") + `)`
}

func leaseUpsertSQL(n int) string {
	return `INSERT INTO lease_journal (pool_id, lease_id, resource_id, context, token, expires_at) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?),", n), ",") +
		` ON CONFLICT (pool_id, lease_id) DO UPDATE SET expires_at = excluded.expires_at, token = excluded.token`
}

// WriteLeases implements store.Store. A store whose writer claim is held
// appends the changes to its lease log (leaseLog); any other writes them in
// one fenced transaction.
func (s *Store) WriteLeases(ctx context.Context, tenantID string, put []store.LeaseRow, del []uint64) error {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return err
	}
	var err error
	if l := s.log.Load(); l != nil {
		err = l.append(tenantID, put, del)
	} else {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			// The transaction watches ctx; its statements need not each
			// start a goroutine to watch it too (the driver does for a
			// cancellable context), and a local write does not hang:
			// busy_timeout bounds its lock waits.
			sctx := context.WithoutCancel(ctx)
			if err := s.checkFence(sctx, tx); err != nil {
				return err
			}
			return s.writeRows(sctx, tx, tenantID, put, del)
		})
	}
	if err != nil {
		return fmt.Errorf("write lease journal of tenant %q: %w", tenantID, err)
	}
	return nil
}

// writeRows deletes del and upserts put in the lease_journal table, in tx,
// with the statements prepared for one row and for leaseChunk rows.
func (s *Store) writeRows(ctx context.Context, tx *sql.Tx, tenantID string, put []store.LeaseRow, del []uint64) error {
	args := make([]any, 0, 1+6*leaseChunk)
	for len(del) > 0 {
		n, st := 1, s.leaseDel1
		if len(del) >= leaseChunk {
			n, st = leaseChunk, s.leaseDelN
		}
		args = append(args[:0], tenantID)
		for _, id := range del[:n] {
			args = append(args, int64(id))
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			return classify(err)
		}
		del = del[n:]
	}
	for len(put) > 0 {
		n, st := 1, s.leaseUpsert1
		if len(put) >= leaseChunk {
			n, st = leaseChunk, s.leaseUpsertN
		}
		args = args[:0]
		for _, l := range put[:n] {
			args = append(args, tenantID, int64(l.ID), l.ResourceID, l.Context, int64(l.Token), l.ExpiresAt)
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			return classify(err)
		}
		put = put[n:]
	}
	return nil
}

// epochQuery reads the persisted epoch, for the fence.
const epochQuery = `SELECT value FROM server_counters WHERE name = 'epoch'`

// prepareLeases prepares the fence query and the lease journal's statements on the writer
// connection, once: inside a transaction the connection is taken, and a
// statement prepared on it then is dropped at its end.
func (s *Store) prepareLeases(ctx context.Context) error {
	for _, p := range []struct {
		st    **sql.Stmt
		query string
	}{
		{&s.epochQuery, epochQuery},
		{&s.leaseDel1, leaseDeleteSQL(1)}, {&s.leaseDelN, leaseDeleteSQL(leaseChunk)},
		{&s.leaseUpsert1, leaseUpsertSQL(1)}, {&s.leaseUpsertN, leaseUpsertSQL(leaseChunk)},
	} {
		var err error
		if *p.st, err = s.w.PrepareContext(ctx, p.query); err != nil {
			return classify(err)
		}
	}
	return nil
}

// LoadLeases implements store.Store: the table's rows with the lease
// log's changes on top. A read-only store reads the log from its file;
// what it returns is consistent while no server writes the store.
func (s *Store) LoadLeases(ctx context.Context, tenantID string) ([]store.LeaseRow, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return nil, err
	}
	l := s.log.Load()
	if l != nil {
		// Under the log's lock no fold moves rows between the two.
		l.mu.Lock()
		defer l.mu.Unlock()
	}
	rows, err := s.tableLeases(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("load lease journal of tenant %q: %w", tenantID, err)
	}
	switch {
	case l != nil:
		return overlay(tenantID, rows, func(apply func(leaseRecord)) {
			for k, row := range l.pending {
				if k.tenant != tenantID {
					continue
				}
				if row == nil {
					apply(leaseRecord{tenant: k.tenant, del: []uint64{k.id}})
				} else {
					apply(leaseRecord{tenant: k.tenant, put: []store.LeaseRow{*row}})
				}
			}
		}), nil
	case s.logPath != "":
		recs, err := readLeaseLog(s.logPath)
		if err != nil {
			return nil, fmt.Errorf("load lease journal of tenant %q: %w", tenantID, err)
		}
		return overlay(tenantID, rows, func(apply func(leaseRecord)) {
			for _, r := range recs {
				apply(r)
			}
		}), nil
	}
	return rows, nil
}

// tableLeases reads tenant's rows of the lease_journal table.
func (s *Store) tableLeases(ctx context.Context, tenantID string) ([]store.LeaseRow, error) {
	rows, err := s.r.QueryContext(ctx, `
SELECT lease_id, resource_id, context, token, expires_at FROM lease_journal WHERE pool_id = ? ORDER BY lease_id`, tenantID)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	out := []store.LeaseRow{}
	for rows.Next() {
		var l store.LeaseRow
		var id, tok int64
		if err := rows.Scan(&id, &l.ResourceID, &l.Context, &tok, &l.ExpiresAt); err != nil {
			return nil, classify(err)
		}
		l.ID, l.Token = uint64(id), uint64(tok)
		out = append(out, l)
	}
	return out, classify(rows.Err())
}

// PruneLeases implements store.Store. A store whose writer claim is held
// folds its lease log into the table in the same transaction.
func (s *Store) PruneLeases(ctx context.Context, before int64) error {
	prune := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM lease_journal WHERE expires_at < ?`, before)
		return classify(err)
	}
	var err error
	if l := s.log.Load(); l != nil {
		if err = l.fold(ctx, s, prune); err == nil {
			l.pruned(before)
		}
	} else {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			if err := s.checkFence(ctx, tx); err != nil {
				return err
			}
			return prune(tx)
		})
	}
	if err != nil {
		return fmt.Errorf("prune lease journal: %w", err)
	}
	return nil
}

// openLog opens the lease log of the file store, replays it into the table
// and empties it (a fold), so the writer starts with every journaled lease
// in lease_journal, and makes it the store's. The writer claim calls it.
func (s *Store) openLog(ctx context.Context) (*leaseLog, error) {
	l, recs, err := openLeaseLog(s.path+leaseLogSuffix, s.opts.Fsync, s.opts.Logger())
	if err != nil {
		return nil, err
	}
	if err := s.loadFolded(ctx, l); err != nil {
		l.close()
		return nil, err
	}
	for _, r := range recs {
		l.note(r)
	}
	if err := l.fold(ctx, s, nil); err != nil {
		l.close()
		return nil, err
	}
	s.log.Store(l)
	return l, nil
}

// loadFolded reads which leases the table holds into l.
func (s *Store) loadFolded(ctx context.Context, l *leaseLog) error {
	rows, err := s.w.QueryContext(ctx, `SELECT pool_id, lease_id, expires_at FROM lease_journal`)
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k leaseKey
		var id, exp int64
		if err := rows.Scan(&k.tenant, &id, &exp); err != nil {
			return classify(err)
		}
		k.id = uint64(id)
		l.folded[k] = exp
	}
	return classify(rows.Err())
}
