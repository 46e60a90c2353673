-- name: migrations_table_exists
SELECT COUNT(*) AS n FROM information_schema.tables
 WHERE table_schema = DATABASE() AND table_name = 'orbit_schema_migrations'

-- name: migrations_table_create
CREATE TABLE IF NOT EXISTS orbit_schema_migrations (
  version INT NOT NULL,
  name VARCHAR(200) NOT NULL,
  checksum CHAR(64) NOT NULL,
  applied_at DATETIME(6) NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin

-- name: migration_lock_acquire
SELECT GET_LOCK(CONCAT('orbit.migrate.', SHA1(DATABASE())), :timeout_s) AS got

-- name: migration_lock_release
SELECT RELEASE_LOCK(CONCAT('orbit.migrate.', SHA1(DATABASE()))) AS released

-- name: schema_tables
SELECT table_name AS name FROM information_schema.tables
 WHERE table_schema = DATABASE() ORDER BY table_name
