package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/repool/repool/internal/store"
)

const tenantColumns = `id, name, status, created_at, deleted_at, placement`

// tenantDest returns the scan destinations of tenantColumns into t.
func (s *Store) tenantDest(t *store.Tenant) []any {
	return []any{&t.ID, &t.Name, &t.Status, s.c.TimeDest(&t.CreatedAt), s.c.TimeDest(&t.DeletedAt), &t.Group}
}

func (s *Store) scanTenant(row Row) (store.Tenant, error) {
	var t store.Tenant
	if err := row.Scan(s.tenantDest(&t)...); err != nil {
		return store.Tenant{}, err
	}
	return t, nil
}

// LiveTenant returns store.ErrNotFound unless tenant id exists and is not
// deleted. lock is "" or a locking clause (Dialect.ForShare, ForUpdate).
func (s *Store) LiveTenant(ctx context.Context, c Conn, id, lock string) error {
	var status store.Status
	err := c.QueryRow(ctx, `SELECT status FROM tenants WHERE id = $1 `+lock, id).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && status == store.StatusDeleted) {
		return fmt.Errorf("tenant %q: %w", id, store.ErrNotFound)
	}
	return s.classify(err)
}

// CreateTenant implements store.Store.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant) (store.Tenant, error) {
	if err := t.Validate(); err != nil {
		return store.Tenant{}, err
	}
	out := store.Tenant{ID: t.ID, Name: t.Name, Status: store.StatusActive, CreatedAt: s.c.Options.Now(), Group: t.Group}
	// The group is chosen and checked in the transaction that places the
	// tenant, holding its registry row FOR SHARE: a group being retired
	// either waits for this or is seen retired.
	err := s.c.InTx(ctx, false, func(tx Conn) error {
		if out.Group == "" {
			g, err := s.pickGroup(ctx, tx)
			if err != nil {
				return err
			}
			out.Group = g
		}
		if err := s.takes(ctx, tx, out.Group, false); err != nil {
			return err
		}
		n, err := tx.Exec(ctx,
			`INSERT INTO tenants (id, name, status, created_at, placement) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`,
			out.ID, out.Name, string(out.Status), s.c.Time(out.CreatedAt), out.Group)
		if err != nil {
			return s.classify(err)
		}
		if n == 0 {
			return store.ErrExists
		}
		return nil
	})
	if err != nil {
		return store.Tenant{}, fmt.Errorf("create tenant %q: %w", t.ID, err)
	}
	return out, nil
}

// GetTenant implements store.Store.
func (s *Store) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	if err := store.ValidateTenantID(id); err != nil {
		return store.Tenant{}, err
	}
	t, err := s.scanTenant(s.c.Read.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Tenant{}, fmt.Errorf("tenant %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Tenant{}, fmt.Errorf("get tenant %q: %w", id, s.classify(err))
	}
	return t, nil
}

// ListTenants implements store.Store.
func (s *Store) ListTenants(ctx context.Context, f store.TenantFilter) ([]store.Tenant, error) {
	q := `SELECT ` + tenantColumns + ` FROM tenants WHERE (status <> 'deleted' OR $1) AND ($2 = '' OR placement = $2) ORDER BY id`
	out := []store.Tenant{}
	err := s.c.Read.Query(ctx, func(row Row) error {
		t, err := s.scanTenant(row)
		out = append(out, t)
		return err
	}, q, f.IncludeDeleted, f.Group)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", s.classify(err))
	}
	return out, nil
}

// SetTenantStatus implements store.Store.
func (s *Store) SetTenantStatus(ctx context.Context, id string, from, to store.Status) (store.Tenant, error) {
	if err := store.ValidateTenantID(id); err != nil {
		return store.Tenant{}, err
	}
	if err := store.ValidateTransition(from, to); err != nil {
		return store.Tenant{}, err
	}
	var out store.Tenant
	err := s.c.InTx(ctx, false, func(tx Conn) error {
		t, err := s.scanTenant(tx.QueryRow(ctx,
			`UPDATE tenants SET status = $3 WHERE id = $1 AND status = $2 RETURNING `+tenantColumns, id, string(from), string(to)))
		if err == nil {
			out = t
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return s.classify(err)
		}
		var cur store.Status
		err = tx.QueryRow(ctx, `SELECT status FROM tenants WHERE id = $1`, id).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && cur == store.StatusDeleted) {
			return fmt.Errorf("tenant %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return s.classify(err)
		}
		return fmt.Errorf("tenant %q is %s, not %s: %w", id, cur, from, store.ErrConflict)
	})
	if err != nil {
		return store.Tenant{}, fmt.Errorf("set tenant status: %w", err)
	}
	return out, nil
}

// DeleteTenant implements store.Store.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	if err := store.ValidateTenantID(id); err != nil {
		return err
	}
	now := s.c.Options.Now()
	err := s.c.InTx(ctx, false, func(tx Conn) error {
		// ForUpdate waits for checkpoints and key, limit and audit
		// writers of this tenant (they hold ForShare) and stops new ones.
		if err := s.LiveTenant(ctx, tx, id, s.c.ForUpdate); err != nil {
			return err
		}
		var stmts []Stmt
		for _, q := range []string{
			`DELETE FROM cells WHERE pool_id = $1`,
			`DELETE FROM affinity_bindings WHERE pool_id = $1`,
			`DELETE FROM resources WHERE pool_id = $1`,
			`DELETE FROM checkpoint_meta WHERE pool_id = $1`,
			`DELETE FROM lease_journal WHERE pool_id = $1`,
			`DELETE FROM api_keys WHERE tenant_id = $1`,
			`DELETE FROM audit_log WHERE tenant_id = $1`,
			`DELETE FROM tenant_limits WHERE tenant_id = $1`,
		} {
			stmts = append(stmts, Stmt{q, []any{id}})
		}
		stmts = append(stmts, Stmt{`UPDATE tenants SET status = 'deleted', deleted_at = $2 WHERE id = $1`, []any{id, s.c.Time(now)}})
		return s.classify(tx.ExecAll(ctx, stmts))
	})
	if err != nil {
		return fmt.Errorf("delete tenant %q: %w", id, err)
	}
	return nil
}

// PutLimits implements store.Store.
func (s *Store) PutLimits(ctx context.Context, tenantID string, l store.Limits) error {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	cols := limitsColumns(&l)
	args := []any{tenantID}
	var params, set []string
	for _, c := range cols {
		args = append(args, c.arg)
		params = append(params, "$"+strconv.Itoa(len(args)))
		set = append(set, c.name+" = excluded."+c.name)
	}
	// The SELECT's WHERE also keeps SQLite from reading ON CONFLICT as a
	// join constraint.
	n, err := s.c.Write.Exec(ctx, `
INSERT INTO tenant_limits (tenant_id, `+columnNames(cols, "")+`)
SELECT id, `+strings.Join(params, ", ")+`
FROM tenants WHERE id = $1 AND status <> 'deleted' `+s.c.ForShare+`
ON CONFLICT (tenant_id) DO UPDATE SET `+strings.Join(set, ", "), args...)
	if err != nil {
		return fmt.Errorf("put limits of tenant %q: %w", tenantID, s.classify(err))
	}
	if n == 0 {
		return fmt.Errorf("put limits: tenant %q: %w", tenantID, store.ErrNotFound)
	}
	return nil
}

// GetLimits implements store.Store.
func (s *Store) GetLimits(ctx context.Context, tenantID string) (store.Limits, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return store.Limits{}, err
	}
	var (
		l      store.Limits
		status store.Status
	)
	cols := limitsColumns(&l)
	dests := []any{&status}
	for _, c := range cols {
		dests = append(dests, c.dest)
	}
	err := s.c.Read.QueryRow(ctx, `
SELECT t.status, `+columnNames(cols, "l.")+`
FROM tenants t LEFT JOIN tenant_limits l ON l.tenant_id = t.id
WHERE t.id = $1`, tenantID).Scan(dests...)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && status == store.StatusDeleted) {
		return store.Limits{}, fmt.Errorf("tenant %q: %w", tenantID, store.ErrNotFound)
	}
	if err != nil {
		return store.Limits{}, fmt.Errorf("get limits of tenant %q: %w", tenantID, s.classify(err))
	}
	return l, nil
}

// AppendAudit implements store.Store.
func (s *Store) AppendAudit(ctx context.Context, e store.AuditEntry) (store.AuditEntry, error) {
	if err := e.Validate(); err != nil {
		return store.AuditEntry{}, err
	}
	e.At = s.c.Options.Stamp(e.At)
	err := s.c.InTx(ctx, true, func(tx Conn) error {
		return tx.QueryRow(ctx, `
INSERT INTO audit_log (tenant_id, at, actor, action, target, detail)
SELECT id, $2, $3, $4, $5, $6 FROM tenants WHERE id = $1 AND status <> 'deleted' `+s.c.ForShare+`
RETURNING id`, e.TenantID, s.c.Time(e.At), e.Actor, e.Action, e.Target, e.Detail).Scan(&e.ID)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.AuditEntry{}, fmt.Errorf("append audit: tenant %q: %w", e.TenantID, store.ErrNotFound)
	}
	if err != nil {
		return store.AuditEntry{}, fmt.Errorf("append audit: %w", s.classify(err))
	}
	return e, nil
}

// ListAudit implements store.Store.
func (s *Store) ListAudit(ctx context.Context, tenantID string, limit int, beforeID int64) ([]store.AuditEntry, error) {
	if err := store.ValidateTenantID(tenantID); err != nil {
		return nil, err
	}
	limit = store.AuditLimit(limit)
	if beforeID <= 0 {
		beforeID = math.MaxInt64
	}
	if err := s.LiveTenant(ctx, s.c.Read, tenantID, ""); err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out := []store.AuditEntry{}
	err := s.c.Read.Query(ctx, func(row Row) error {
		var e store.AuditEntry
		err := row.Scan(&e.ID, &e.TenantID, s.c.TimeDest(&e.At), &e.Actor, &e.Action, &e.Target, &e.Detail)
		out = append(out, e)
		return err
	}, `
SELECT id, tenant_id, at, actor, action, target, detail FROM audit_log
WHERE tenant_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, tenantID, beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit of tenant %q: %w", tenantID, s.classify(err))
	}
	return out, nil
}

const signingKeyName = "signing_key"

// SigningKey implements store.Store.
func (s *Store) SigningKey(ctx context.Context) ([]byte, error) {
	var key []byte
	err := s.c.Read.QueryRow(ctx, `SELECT value FROM server_secrets WHERE name = $1`, signingKeyName).Scan(&key)
	if err == nil {
		return key, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("signing key: %w", s.classify(err))
	}
	if s.c.Options.ReadOnly {
		return nil, fmt.Errorf("signing key: %w: the store has none yet, and a read-only store creates none", store.ErrNotFound)
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	// Whoever inserts first wins; a concurrent inserter waits for the
	// winner's commit, inserts nothing, and reads the winner back.
	if _, err := s.c.Write.Exec(ctx,
		`INSERT INTO server_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, signingKeyName, fresh); err != nil {
		return nil, fmt.Errorf("signing key: %w", s.classify(err))
	}
	if err := s.c.Write.QueryRow(ctx, `SELECT value FROM server_secrets WHERE name = $1`, signingKeyName).Scan(&key); err != nil {
		return nil, fmt.Errorf("signing key: %w", s.classify(err))
	}
	return key, nil
}

// BumpEpoch implements store.Store. Epochs come from one sequence shared by
// every group ("epoch_seq", started above every group's epoch so that a
// store from before groups goes on from its epoch), and the group's own
// counter (store.EpochCounter), the one its fence checks, takes the new
// value: a takeover in any group gets an epoch above every epoch any
// group has used, so fencing tokens, which carry the epoch, keep
// increasing for a tenant that moves between groups and then fails over.
// In the same transaction it registers the handle's group (store.Groups):
// a group is known once one of its servers has become active.
func (s *Store) BumpEpoch(ctx context.Context) (uint32, error) {
	var v uint32
	err := s.c.InTx(ctx, false, func(tx Conn) error {
		var err error
		if v, err = s.bumpEpoch(ctx, tx, s.c.Options.GroupName()); err != nil {
			return err
		}
		return s.registerGroup(ctx, tx, s.c.Options.GroupName())
	})
	if errors.Is(err, store.ErrConflict) {
		return 0, fmt.Errorf("bump epoch: %w", err)
	}
	if err != nil {
		return 0, fmt.Errorf("bump epoch: %w", s.classify(err))
	}
	return v, nil
}
