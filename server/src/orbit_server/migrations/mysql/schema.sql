-- The whole current schema, equal to applying every numbered migration in order.
-- A test applies both ways and compares; change both together.

CREATE TABLE IF NOT EXISTS tenants (
  name VARCHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS environments (
  tenant VARCHAR(64) NOT NULL,
  name VARCHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tenant, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS api_keys (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  name VARCHAR(200) NULL,
  roles VARCHAR(200) NOT NULL,
  queues TEXT NULL,
  secret_hash CHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  revoked_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  KEY api_keys_scope (tenant, environment, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS audit_log (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  actor VARCHAR(100) NOT NULL,
  action VARCHAR(64) NOT NULL,
  target_kind VARCHAR(32) NOT NULL,
  target_id VARCHAR(200) NOT NULL,
  details TEXT NULL,
  request_id VARCHAR(64) NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  KEY audit_log_scope (tenant, environment, id),
  KEY audit_log_target (tenant, environment, target_kind, target_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
