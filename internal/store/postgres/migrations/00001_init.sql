-- Initial schema. Ids use the "C" collation: byte order, like Go's string
-- comparison and SQLite, and cheaper to index. Pool rows carry pool_id
-- (= tenant id) and have no foreign keys, so that bulk checkpoints (COPY)
-- stay fast; LoadCheckpoint validates them. Fencing tokens and counters are
-- bigint: tokens are at most 2^63-1 (epoch < 2^23 with a 40-bit counter).
--
-- Pool rows also carry gen, the checkpoint generation of their tenant
-- (checkpoint_meta.gen): a Full checkpoint COPYs its rows under gen + 1 and
-- deletes the older generation in the same transaction. New keys then never
-- land next to the just-deleted copies of themselves in the primary key,
-- which would cost a heap visit per row in the unique check. Only rows of
-- the current generation are live.

-- +goose Up
CREATE TABLE tenants (
    id         text COLLATE "C" PRIMARY KEY,
    name       text NOT NULL,
    status     text NOT NULL CHECK (status IN ('active', 'suspended', 'deleted')),
    created_at timestamptz NOT NULL,
    deleted_at timestamptz
);

CREATE TABLE tenant_limits (
    tenant_id          text COLLATE "C" PRIMARY KEY REFERENCES tenants (id),
    rate_per_second    double precision,
    burst              bigint,
    reserved_resources bigint,
    max_resources      bigint,
    reserved_cells     bigint,
    max_cells          bigint,
    max_streams        bigint,
    max_leases         bigint
);

CREATE TABLE api_keys (
    id         text COLLATE "C" PRIMARY KEY,
    tenant_id  text COLLATE "C" NOT NULL REFERENCES tenants (id),
    name       text NOT NULL,
    prefix     text NOT NULL,
    digest     bytea NOT NULL UNIQUE CHECK (octet_length(digest) = 32),
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at, id);

CREATE TABLE audit_log (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id text COLLATE "C" NOT NULL REFERENCES tenants (id),
    at        timestamptz NOT NULL,
    actor     text NOT NULL,
    action    text NOT NULL,
    target    text NOT NULL,
    detail    text NOT NULL
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);

CREATE TABLE checkpoint_meta (
    pool_id     text COLLATE "C" PRIMARY KEY REFERENCES tenants (id),
    fencing_hwm bigint NOT NULL CHECK (fencing_hwm >= 0),
    gen         bigint NOT NULL,
    saved_at    timestamptz NOT NULL
);

CREATE TABLE resources (
    pool_id              text COLLATE "C" NOT NULL,
    gen                  bigint NOT NULL,
    id                   text COLLATE "C" NOT NULL,
    capacity             integer NOT NULL,
    labels               text NOT NULL,
    alpha                double precision NOT NULL,
    beta                 double precision NOT NULL,
    updated_at           bigint NOT NULL,
    consecutive_failures integer NOT NULL,
    blocked_until        bigint NOT NULL,
    cooldown_level       integer NOT NULL,
    PRIMARY KEY (pool_id, gen, id)
);

CREATE TABLE cells (
    pool_id              text COLLATE "C" NOT NULL,
    gen                  bigint NOT NULL,
    resource_id          text COLLATE "C" NOT NULL,
    context              text COLLATE "C" NOT NULL,
    alpha                double precision NOT NULL,
    beta                 double precision NOT NULL,
    updated_at           bigint NOT NULL,
    consecutive_failures integer NOT NULL,
    blocked_until        bigint NOT NULL,
    cooldown_level       integer NOT NULL,
    PRIMARY KEY (pool_id, gen, resource_id, context)
);

CREATE TABLE server_secrets (
    name  text PRIMARY KEY,
    value bytea NOT NULL
);

CREATE TABLE server_counters (
    name  text PRIMARY KEY,
    value bigint NOT NULL
);

-- +goose Down
DROP TABLE server_counters;
DROP TABLE server_secrets;
DROP TABLE cells;
DROP TABLE resources;
DROP TABLE checkpoint_meta;
DROP TABLE audit_log;
DROP TABLE api_keys;
DROP TABLE tenant_limits;
DROP TABLE tenants;
