-- The whole current schema, equal to applying every numbered migration in order.
-- A test applies both ways and compares; change both together.

CREATE TABLE IF NOT EXISTS tenants (
  name TEXT NOT NULL PRIMARY KEY,
  created_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS environments (
  tenant TEXT NOT NULL,
  name TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT NOT NULL PRIMARY KEY,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  name TEXT NULL,
  roles TEXT NOT NULL,
  queues TEXT NULL,
  secret_hash TEXT NOT NULL,
  created_at TEXT NOT NULL,
  revoked_at TEXT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS api_keys_scope ON api_keys (tenant, environment, id);

CREATE TABLE IF NOT EXISTS audit_log (
  id TEXT NOT NULL PRIMARY KEY,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  target_kind TEXT NOT NULL,
  target_id TEXT NOT NULL,
  details TEXT NULL,
  request_id TEXT NULL,
  created_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS audit_log_scope ON audit_log (tenant, environment, id);

CREATE INDEX IF NOT EXISTS audit_log_target ON audit_log (tenant, environment, target_kind, target_id, id);
