-- A tenant's own quarantine and decay policy, beside its limits: NULL
-- means the server-wide default (flags --half-life, ...). The ranges are
-- the control plane's (docs/control-plane.md).

-- +goose Up
ALTER TABLE tenant_limits ADD COLUMN policy_half_life_seconds bigint;
ALTER TABLE tenant_limits ADD COLUMN policy_quarantine_after bigint;
ALTER TABLE tenant_limits ADD COLUMN policy_quarantine_whole_after bigint;
ALTER TABLE tenant_limits ADD COLUMN policy_quarantine_below double precision;
ALTER TABLE tenant_limits ADD COLUMN policy_quarantine_min_evidence double precision;
ALTER TABLE tenant_limits ADD COLUMN policy_cooldown_base_seconds bigint;
ALTER TABLE tenant_limits ADD COLUMN policy_cooldown_max_seconds bigint;

-- +goose Down
ALTER TABLE tenant_limits DROP COLUMN policy_cooldown_max_seconds;
ALTER TABLE tenant_limits DROP COLUMN policy_cooldown_base_seconds;
ALTER TABLE tenant_limits DROP COLUMN policy_quarantine_min_evidence;
ALTER TABLE tenant_limits DROP COLUMN policy_quarantine_below;
ALTER TABLE tenant_limits DROP COLUMN policy_quarantine_whole_after;
ALTER TABLE tenant_limits DROP COLUMN policy_quarantine_after;
ALTER TABLE tenant_limits DROP COLUMN policy_half_life_seconds;
