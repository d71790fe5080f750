-- Affinity bindings (docs/pool.md "Affinity"): a tenant's bindings of
-- affinity keys to resources, written whole with its checkpoint whenever
-- they changed, as JSON ([{"c": context, "k": key, "r": resource id,
-- "e": expiry in unix ns, "f": last release failed}]); '' holds none.

-- +goose Up
ALTER TABLE checkpoint_meta ADD COLUMN affinity TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE checkpoint_meta DROP COLUMN affinity;
