-- Retirement, recent outcomes and imposed quarantines (docs/pool.md): a
-- resource's registration time (unix ns), leases granted, own max_uses and
-- max_age (ns; 0: the tenant's), why it was retired ('' while it is not),
-- whether its quarantine was imposed by an operator, and the bits of its
-- latest outcomes (its cells' too). The tenant policy's retirement limits
-- and quarantine share cap sit beside its other policy columns: NULL means
-- the server-wide default.

-- +goose Up
ALTER TABLE resources ADD COLUMN registered_at bigint NOT NULL DEFAULT 0;
ALTER TABLE resources ADD COLUMN uses bigint NOT NULL DEFAULT 0;
ALTER TABLE resources ADD COLUMN max_uses bigint NOT NULL DEFAULT 0;
ALTER TABLE resources ADD COLUMN max_age bigint NOT NULL DEFAULT 0;
ALTER TABLE resources ADD COLUMN retired text NOT NULL DEFAULT '';
ALTER TABLE resources ADD COLUMN imposed boolean NOT NULL DEFAULT false;
ALTER TABLE resources ADD COLUMN recent bigint NOT NULL DEFAULT 0;
ALTER TABLE cells ADD COLUMN recent bigint NOT NULL DEFAULT 0;
ALTER TABLE tenant_limits ADD COLUMN policy_max_uses bigint;
ALTER TABLE tenant_limits ADD COLUMN policy_max_age_seconds bigint;
ALTER TABLE tenant_limits ADD COLUMN policy_max_quarantined_share double precision;

-- +goose Down
ALTER TABLE tenant_limits DROP COLUMN policy_max_quarantined_share;
ALTER TABLE tenant_limits DROP COLUMN policy_max_age_seconds;
ALTER TABLE tenant_limits DROP COLUMN policy_max_uses;
ALTER TABLE cells DROP COLUMN recent;
ALTER TABLE resources DROP COLUMN recent;
ALTER TABLE resources DROP COLUMN imposed;
ALTER TABLE resources DROP COLUMN retired;
ALTER TABLE resources DROP COLUMN max_age;
ALTER TABLE resources DROP COLUMN max_uses;
ALTER TABLE resources DROP COLUMN uses;
ALTER TABLE resources DROP COLUMN registered_at;
