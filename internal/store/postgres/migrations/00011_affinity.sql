-- Affinity bindings (docs/pool.md "Affinity"): a tenant's affinity keys,
-- each (context, key) bound to a resource until expires_at (unix ns);
-- failed is 1 when the last release under the key reported a failure.
-- Written with the tenant's checkpoint: a full one replaces them all, an
-- incremental one deletes the keys dropped and upserts those changed.

-- +goose Up
CREATE TABLE affinity_bindings (
    pool_id     text COLLATE "C" NOT NULL,
    context     text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    resource_id text NOT NULL,
    expires_at  bigint NOT NULL,
    failed      smallint NOT NULL,
    PRIMARY KEY (pool_id, context, key)
);

-- +goose Down
DROP TABLE affinity_bindings;
