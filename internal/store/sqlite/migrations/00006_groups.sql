-- The registry of groups of servers (see the PostgreSQL migration): a
-- SQLite store has one server, of the default group.

-- +goose Up
CREATE TABLE server_groups (
    name       TEXT PRIMARY KEY,
    state      TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'draining', 'retired')),
    changed_at INTEGER
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
