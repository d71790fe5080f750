package server

import (
	"context"
	"fmt"

	"github.com/repool/repool/internal/pool"
	"github.com/repool/repool/internal/tenants"
)

// durability is the data plane's Journal, the same on every store and in
// every mode: leases go through the group-committed lease journal, and
// registrations and removals are written to the tenant's checkpoint rows,
// before the call is answered. Reports reach the store within ReportFlush,
// or, with DurableReports, before the call is answered.
type durability struct{ s *Server }

func (d durability) Leased(ctx context.Context, tenant string, l pool.Lease) error {
	return d.moved(tenant, d.s.journal.Leased(ctx, tenant, l))
}

func (d durability) Ended(ctx context.Context, tenant string, id uint64) error {
	return d.moved(tenant, d.s.journal.Ended(ctx, tenant, id))
}

func (d durability) Swapped(ctx context.Context, tenant string, ended uint64, next pool.Lease) error {
	return d.moved(tenant, d.s.journal.Swapped(ctx, tenant, ended, next))
}

func (d durability) Registered(ctx context.Context, tenant string, ids []string) error {
	p, ok := d.s.pools.Lookup(tenant)
	if !ok {
		return d.moved(tenant, fmt.Errorf("tenant %s has no pool", tenant))
	}
	return d.moved(tenant, d.s.cp.Persist(ctx, tenant, p.States(ids), nil))
}

func (d durability) Deregistered(ctx context.Context, tenant string, ids []string) error {
	return d.moved(tenant, d.s.cp.Persist(ctx, tenant, nil, ids))
}

func (d durability) Reported(ctx context.Context, tenant string) error {
	if !d.s.cfg.DurableReports {
		return nil
	}
	return d.moved(tenant, d.s.cp.Sync(ctx, tenant))
}

// moved turns the failure of a write of a tenant that is moving to another
// group (or has moved: the store fenced the write) into the refusal that
// sends its client there, a retryable UNAVAILABLE: the call was not
// acknowledged, and the other group serves its retry. A write the store
// could not take (writeFault) is answered "store not writable: REASON";
// the store wrapper has told the write health already.
func (d durability) moved(tenant string, err error) error {
	if err == nil {
		return nil
	}
	if g, ok := d.s.pools.Elsewhere(tenant); ok {
		return &tenants.ElsewhereError{Tenant: tenant, Group: g}
	}
	if reason, ok := writeFault(err); ok {
		return notWritable(reason) // its cause may carry the store's text; the write health logs it
	}
	return err
}
