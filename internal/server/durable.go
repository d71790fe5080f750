package server

import (
	"context"
	"fmt"

	"github.com/repool/repool/internal/pool"
)

// durability is the data plane's Journal, the same on every store and in
// every mode: leases go through the group-committed lease journal, and
// registrations and removals are written to the tenant's checkpoint rows,
// before the call is answered. Reports reach the store within ReportFlush,
// or, with DurableReports, before the call is answered.
type durability struct{ s *Server }

func (d durability) Leased(ctx context.Context, tenant string, l pool.Lease) error {
	return d.s.journal.Leased(ctx, tenant, l)
}

func (d durability) Ended(ctx context.Context, tenant string, id uint64) error {
	return d.s.journal.Ended(ctx, tenant, id)
}

func (d durability) Swapped(ctx context.Context, tenant string, ended uint64, next pool.Lease) error {
	return d.s.journal.Swapped(ctx, tenant, ended, next)
}

func (d durability) Registered(ctx context.Context, tenant string, ids []string) error {
	p, ok := d.s.pools.Lookup(tenant)
	if !ok {
		return fmt.Errorf("tenant %s has no pool", tenant)
	}
	return d.s.cp.Persist(ctx, tenant, p.States(ids), nil)
}

func (d durability) Deregistered(ctx context.Context, tenant string, ids []string) error {
	return d.s.cp.Persist(ctx, tenant, nil, ids)
}

func (d durability) Reported(ctx context.Context, tenant string) error {
	if !d.s.cfg.DurableReports {
		return nil
	}
	return d.s.cp.Sync(ctx, tenant)
}
