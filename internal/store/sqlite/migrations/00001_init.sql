-- Initial schema. Times of tenants, keys, audit and checkpoints are unix
-- microseconds (UTC); pool row times are unix nanoseconds as the pool keeps
-- them. Pool rows carry pool_id (= tenant id) and have no foreign key to
-- tenants so that bulk checkpoints stay cheap; LoadCheckpoint validates them.

-- +goose Up
CREATE TABLE tenants (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('active', 'suspended', 'deleted')),
    created_at INTEGER NOT NULL,
    deleted_at INTEGER
);

CREATE TABLE tenant_limits (
    tenant_id          TEXT PRIMARY KEY REFERENCES tenants (id),
    rate_per_second    REAL,
    burst              INTEGER,
    reserved_resources INTEGER,
    max_resources      INTEGER,
    reserved_cells     INTEGER,
    max_cells          INTEGER,
    max_streams        INTEGER,
    max_leases         INTEGER
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    name       TEXT NOT NULL,
    prefix     TEXT NOT NULL,
    digest     BLOB NOT NULL UNIQUE CHECK (length(digest) = 32),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at, id);

CREATE TABLE audit_log (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id TEXT NOT NULL REFERENCES tenants (id),
    at        INTEGER NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    target    TEXT NOT NULL,
    detail    TEXT NOT NULL
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);

CREATE TABLE checkpoint_meta (
    pool_id     TEXT PRIMARY KEY REFERENCES tenants (id),
    fencing_hwm INTEGER NOT NULL CHECK (fencing_hwm >= 0),
    saved_at    INTEGER NOT NULL
);

CREATE TABLE resources (
    pool_id              TEXT NOT NULL,
    id                   TEXT NOT NULL,
    capacity             INTEGER NOT NULL,
    labels               TEXT NOT NULL,
    alpha                REAL NOT NULL,
    beta                 REAL NOT NULL,
    updated_at           INTEGER NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    blocked_until        INTEGER NOT NULL,
    cooldown_level       INTEGER NOT NULL,
    PRIMARY KEY (pool_id, id)
) WITHOUT ROWID;

CREATE TABLE cells (
    pool_id              TEXT NOT NULL,
    resource_id          TEXT NOT NULL,
    context              TEXT NOT NULL,
    alpha                REAL NOT NULL,
    beta                 REAL NOT NULL,
    updated_at           INTEGER NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    blocked_until        INTEGER NOT NULL,
    cooldown_level       INTEGER NOT NULL,
    PRIMARY KEY (pool_id, resource_id, context)
) WITHOUT ROWID;

CREATE TABLE server_secrets (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
);

CREATE TABLE server_counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
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
