-- The lease journal: every lease the server grants or renews is written here
-- before the client hears of it, and removed when it ends, so that a server
-- restarted after a crash restores every lease a client may hold.

-- +goose Up
CREATE TABLE lease_journal (
    pool_id     TEXT    NOT NULL,
    lease_id    INTEGER NOT NULL,
    resource_id TEXT    NOT NULL,
    context     TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (pool_id, lease_id)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE lease_journal;
