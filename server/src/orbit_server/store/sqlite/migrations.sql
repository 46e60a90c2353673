-- name: migrations_table_exists
SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'orbit_schema_migrations'

-- name: migrations_table_create
CREATE TABLE IF NOT EXISTS orbit_schema_migrations (
  version INTEGER NOT NULL PRIMARY KEY,
  name TEXT NOT NULL,
  checksum TEXT NOT NULL,
  applied_at TEXT NOT NULL
)

-- name: schema_tables
SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name
