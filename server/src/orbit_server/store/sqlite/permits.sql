-- name: key_permits_prune
-- An idle key's permit row is recreated by the next task of the key that needs it.
DELETE FROM key_permits
 WHERE rowid IN (SELECT rowid FROM key_permits WHERE active = 0 AND updated_at < :before
                  LIMIT :limit)

-- name: key_permits_insert_missing
INSERT OR IGNORE INTO key_permits (tenant, environment, queue, concurrency_key, active, updated_at)
VALUES (:tenant, :environment, :queue, :concurrency_key, 0, :now)
