-- A tenant's limits have two layers: the operator's (the existing columns:
-- reservations, and ceilings that a tenant-admin cannot raise) and the
-- tenant-admin's own lower values (these columns, NULL when not set). The
-- server applies the smaller of the two (docs/control-plane.md).

-- +goose Up
ALTER TABLE tenant_limits ADD COLUMN admin_rate_per_second double precision;
ALTER TABLE tenant_limits ADD COLUMN admin_burst bigint;
ALTER TABLE tenant_limits ADD COLUMN admin_max_resources bigint;
ALTER TABLE tenant_limits ADD COLUMN admin_max_cells bigint;
ALTER TABLE tenant_limits ADD COLUMN admin_max_streams bigint;
ALTER TABLE tenant_limits ADD COLUMN admin_max_leases bigint;

-- +goose Down
ALTER TABLE tenant_limits DROP COLUMN admin_max_leases;
ALTER TABLE tenant_limits DROP COLUMN admin_max_streams;
ALTER TABLE tenant_limits DROP COLUMN admin_max_cells;
ALTER TABLE tenant_limits DROP COLUMN admin_max_resources;
ALTER TABLE tenant_limits DROP COLUMN admin_burst;
ALTER TABLE tenant_limits DROP COLUMN admin_rate_per_second;
