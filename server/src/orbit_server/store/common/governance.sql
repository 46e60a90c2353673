-- Queries that read the same on MySQL/MariaDB and SQLite; each dialect's folder holds
-- only those that differ (governance.sql).

-- name: tenant_insert
INSERT INTO tenants (name, created_at) VALUES (:name, :created_at)

-- name: environment_insert
INSERT INTO environments (tenant, name, created_at) VALUES (:tenant, :name, :created_at)

-- name: environment_list
SELECT tenant, name, created_at FROM environments ORDER BY tenant, name

-- name: key_insert
INSERT INTO api_keys (id, tenant, environment, name, roles, queues, secret_hash, created_at, revoked_at)
VALUES (:id, :tenant, :environment, :name, :roles, :queues, :secret_hash, :created_at, NULL)

-- name: key_get
SELECT id, tenant, environment, name, roles, queues, secret_hash, created_at, revoked_at
  FROM api_keys WHERE id = :id

-- name: key_list_scoped
SELECT id, tenant, environment, name, roles, queues, secret_hash, created_at, revoked_at
  FROM api_keys WHERE tenant = :tenant AND environment = :environment AND id > :after
 ORDER BY id LIMIT :limit

-- name: key_list_all
SELECT id, tenant, environment, name, roles, queues, secret_hash, created_at, revoked_at
  FROM api_keys WHERE id > :after ORDER BY id LIMIT :limit

-- name: key_revoke
UPDATE api_keys SET revoked_at = :revoked_at WHERE id = :id AND revoked_at IS NULL

-- name: keys_unusable
-- Of the given keys, those revoked or gone (by primary key).
SELECT id FROM api_keys WHERE id IN (:ids) AND revoked_at IS NULL

-- name: audit_insert
INSERT INTO audit_log (id, tenant, environment, actor, action, target_kind, target_id, details, request_id, created_at)
VALUES (:id, :tenant, :environment, :actor, :action, :target_kind, :target_id, :details, :request_id, :created_at)

-- name: audit_list
SELECT id, tenant, environment, actor, action, target_kind, target_id, details, request_id, created_at
  FROM audit_log WHERE tenant = :tenant AND environment = :environment AND id < :before
 ORDER BY id DESC LIMIT :limit

-- name: audit_list_target
SELECT id, tenant, environment, actor, action, target_kind, target_id, details, request_id, created_at
  FROM audit_log
 WHERE tenant = :tenant AND environment = :environment AND target_kind = :target_kind
   AND target_id = :target_id AND id < :before
 ORDER BY id DESC LIMIT :limit
