-- The migration ledger; the same on every dialect unless a dialect's file has its own text.

-- name: migrations_applied
SELECT version, name, checksum, applied_at FROM orbit_schema_migrations ORDER BY version

-- name: migration_record
INSERT INTO orbit_schema_migrations (version, name, checksum, applied_at)
VALUES (:version, :name, :checksum, :applied_at)
