-- The registry of groups of servers: a group is known once one of its
-- servers has become active (BumpEpoch registers it) and only a known
-- group takes tenants. An operator drains (no new tenants) and retires
-- (no tenants, never again until reopened) a group by its state. The
-- default group is always known; every group that already ran (an epoch
-- counter) or holds tenants is registered as it is.

-- +goose Up
CREATE TABLE server_groups (
    name       text PRIMARY KEY,
    state      text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'draining', 'retired')),
    changed_at timestamptz
);
INSERT INTO server_groups (name) VALUES ('default');
INSERT INTO server_groups (name)
SELECT substr(name, 7) FROM server_counters WHERE name LIKE 'epoch:%'
ON CONFLICT (name) DO NOTHING;
INSERT INTO server_groups (name)
SELECT DISTINCT placement FROM tenants WHERE status <> 'deleted'
ON CONFLICT (name) DO NOTHING;

-- +goose Down
DROP TABLE server_groups;
