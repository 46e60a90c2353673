-- Gates; the same on every dialect but for their {{hints}} (sql.py).

-- name: gate_insert
INSERT INTO gates (id, tenant, environment, open, version, created_at, updated_at)
VALUES (:id, :tenant, :environment, 1, 0, :now, :now)

-- name: gate_delete
DELETE FROM gates WHERE id = :id

-- name: gate_set
UPDATE gates SET open = :open, version = version + 1, updated_at = :now
 WHERE id = :id AND tenant = :tenant AND environment = :environment

-- name: gate_get
SELECT id, tenant, environment, open, version, created_at, updated_at FROM gates
 WHERE id = :id AND tenant = :tenant AND environment = :environment

-- name: gates_read_shared
SELECT id, open, version FROM gates WHERE id IN (:gate_ids) {{lock_in_share_mode}}

-- name: gate_lock
SELECT id, tenant, environment, open, version, created_at, updated_at FROM gates
 WHERE id = :id AND tenant = :tenant AND environment = :environment {{for_update}}
