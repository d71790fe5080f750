-- Tenant-sharded groups: the group of servers each tenant is placed on.
-- Every existing tenant stays on the default group.

-- +goose Up
ALTER TABLE tenants ADD COLUMN placement text NOT NULL DEFAULT 'default';

-- +goose Down
ALTER TABLE tenants DROP COLUMN placement;
