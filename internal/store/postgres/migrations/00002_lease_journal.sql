-- The lease journal: every lease the active server grants or renews is
-- written here before the client hears of it, and removed when it ends, so
-- that a standby taking over restores every lease a client may hold.

-- +goose Up
CREATE TABLE lease_journal (
    pool_id     text   NOT NULL,
    lease_id    bigint NOT NULL,
    resource_id text   NOT NULL,
    context     text   NOT NULL,
    token       bigint NOT NULL,
    expires_at  bigint NOT NULL,
    PRIMARY KEY (pool_id, lease_id)
);

-- +goose Down
DROP TABLE lease_journal;
