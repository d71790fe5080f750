-- A tenant's cap on open Leases streams, beside its cap on event streams:
-- the operator's value and the tenant-admin's own lower one (NULL: the
-- server default, --max-lease-streams, and none).

-- +goose Up
ALTER TABLE tenant_limits ADD COLUMN max_lease_streams INTEGER;
ALTER TABLE tenant_limits ADD COLUMN admin_max_lease_streams INTEGER;

-- +goose Down
ALTER TABLE tenant_limits DROP COLUMN admin_max_lease_streams;
ALTER TABLE tenant_limits DROP COLUMN max_lease_streams;
