-- A tenant's objective, beside its policy: what its pool's Acquire
-- maximises, 'success' or 'success_per_time'; NULL means the server-wide
-- default (flag --objective).

-- +goose Up
ALTER TABLE tenant_limits ADD COLUMN policy_objective TEXT;

-- +goose Down
ALTER TABLE tenant_limits DROP COLUMN policy_objective;
