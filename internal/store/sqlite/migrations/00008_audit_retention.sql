-- Audit retention (store.Store PruneAudit) deletes a tenant's entries older
-- than the retention age: this index finds them without reading the
-- tenant's newer entries.

-- +goose Up
CREATE INDEX audit_log_tenant_at ON audit_log (tenant_id, at);

-- +goose Down
DROP INDEX audit_log_tenant_at;
