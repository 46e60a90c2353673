-- name: task_reopen
UPDATE tasks SET state = :task.pending, run_at = :now, max_attempts = MAX(max_attempts, attempts + 1),
       result = NULL, error = NULL, finished_at = NULL, cancel_requested = 0, cancel_reason = NULL,
       lease_expires_at = NULL, updated_at = :now
 WHERE id = :id AND state = :expected_state

-- name: idempotency_keys_expire
-- SQLite has no UPDATE ... LIMIT (MySQL has no LIMIT inside IN (subquery)).
UPDATE tasks SET idempotency_key = NULL, request_hash = NULL
 WHERE id IN (SELECT id FROM tasks
               WHERE state IN (:task.succeeded, :task.failed, :task.cancelled)
                 AND finished_at < :before AND idempotency_key IS NOT NULL
               LIMIT :limit)

-- name: key_permits_prune
-- An idle key's permit row is recreated by the next task of the key that needs it.
DELETE FROM key_permits
 WHERE rowid IN (SELECT rowid FROM key_permits WHERE active = 0 AND updated_at < :before
                  LIMIT :limit)

-- name: key_permits_insert_missing
INSERT OR IGNORE INTO key_permits (tenant, environment, queue, concurrency_key, active, updated_at)
VALUES (:tenant, :environment, :queue, :concurrency_key, 0, :now)
