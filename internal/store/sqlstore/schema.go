package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/repool/repool/internal/store"
)

// Migrate applies the goose migrations in the directory "migrations" of
// fsys to db, with the provider options opts (a session locker). Errors of
// the database are classified.
func (d Dialect) Migrate(ctx context.Context, db *sql.DB, dialect goose.Dialect, fsys fs.FS, opts ...goose.ProviderOption) error {
	dir, err := fs.Sub(fsys, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(dialect, db, dir, append([]goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}, opts...)...)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %w", d.Classify(err))
	}
	return nil
}

// LoadMeta is the start of LoadCheckpoint, in its transaction c: it fails
// with store.ErrNotFound unless the tenant is live, then reads the
// tenant's checkpoint_meta row: the fencing high-water mark into the
// returned state (HasCheckpoint false if there is no row), and the
// dialect's own columns cols (such as ", gen") into dest.
func (s *Store) LoadMeta(ctx context.Context, c Conn, tenantID, cols string, dest ...any) (store.PoolState, error) {
	if err := s.LiveTenant(ctx, c, tenantID, ""); err != nil {
		return store.PoolState{}, err
	}
	var (
		st  store.PoolState
		hwm int64
	)
	err := c.QueryRow(ctx, `SELECT fencing_hwm`+cols+` FROM checkpoint_meta WHERE pool_id = $1`, tenantID).Scan(append([]any{&hwm}, dest...)...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return store.PoolState{}, s.classify(err)
	case hwm < 0:
		return store.PoolState{}, fmt.Errorf("%w: fencing high-water mark %d is negative", store.ErrCorrupt, hwm)
	default:
		st.HasCheckpoint, st.FencingHWM = true, uint64(hwm)
		if st.Bindings, err = s.loadBindings(ctx, c, tenantID); err != nil {
			return store.PoolState{}, err
		}
	}
	return st, nil
}

// CheckpointTx is the frame of SaveCheckpoint that both dialects share:
// it validates tenantID and cp, then, in a fenced transaction, takes the
// tenant row ForShare (DeleteTenant and MoveTenant take it ForUpdate: a
// checkpoint and a delete or move of the same tenant never interleave;
// store.ErrNotFound for a deleted tenant, store.ErrFenced for one placed
// on another group) and calls write with the transaction and the time of
// the save (the store's clock).
func (s *Store) CheckpointTx(ctx context.Context, tenantID string, cp store.Checkpoint, write func(tx Conn, now time.Time) error) error {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return err
	}
	if err := cp.Validate(); err != nil {
		return fmt.Errorf("save checkpoint of tenant %q: %w", tenantID, err)
	}
	now := s.c.Options.Now()
	err := s.c.InTx(ctx, true, func(tx Conn) error {
		if err := s.placedHere(ctx, tx, tenantID, s.c.ForShare); err != nil {
			return err
		}
		if err := write(tx, now); err != nil {
			return err
		}
		return s.saveBindings(ctx, tx, tenantID, cp)
	})
	if err != nil {
		return fmt.Errorf("save checkpoint of tenant %q: %w", tenantID, err)
	}
	return nil
}
