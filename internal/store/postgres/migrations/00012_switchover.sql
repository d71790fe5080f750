-- Directed switchovers (server switchover; docs/ha.md): a request that
-- the active server of the group electing on leader lock lock_id hand
-- leadership to the server named candidate (its --ha-name). The active
-- server hands over when it sees the request; the other standbys leave
-- the lock to the candidate while the request lasts (until expires_at)
-- and its session is there; the candidate deletes the row when it takes
-- the lock. PostgreSQL only: an active/standby group needs PostgreSQL.

-- +goose Up
CREATE TABLE ha_switchover (
    lock_id      bigint PRIMARY KEY,
    candidate    text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- +goose Down
DROP TABLE ha_switchover;
