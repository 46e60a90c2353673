-- Notes of the keys a submit admits after its commit (decision 0012); the same on every dialect.

-- name: admission_note_insert
INSERT INTO key_admissions (id, tenant, environment, queue, concurrency_keys, created_at)
VALUES (:id, :tenant, :environment, :queue, :concurrency_keys, :now)

-- name: admission_note_delete
DELETE FROM key_admissions WHERE id = :id

-- name: admission_notes_older
SELECT id, tenant, environment, queue, concurrency_keys, created_at
  FROM key_admissions WHERE created_at <= :before
 ORDER BY created_at, id
 LIMIT :limit
