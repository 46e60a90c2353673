-- SQLite runs every write unit under BEGIN IMMEDIATE: row locks are not needed.

-- name: queue_lock
-- SQLite: BEGIN IMMEDIATE already holds the only write lock.
SELECT tenant, environment, name, paused, concurrency_limit, key_concurrency, max_pending,
       pending, active, created_at, updated_at
  FROM queues WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: task_lock
-- SQLite: BEGIN IMMEDIATE already holds the only write lock.
SELECT * FROM tasks WHERE id = :id AND tenant = :tenant AND environment = :environment

-- name: task_reopen
UPDATE tasks SET state = :task.pending, run_at = :now, max_attempts = MAX(max_attempts, attempts + 1),
       result = NULL, error = NULL, finished_at = NULL, cancel_requested = 0, cancel_reason = NULL,
       lease_expires_at = NULL, updated_at = :now
 WHERE id = :id AND state = :expected_state

-- name: tasks_finished_before
SELECT id FROM tasks t
 WHERE state IN (:task.succeeded, :task.failed, :task.cancelled) AND finished_at < :before
   AND (t.owner_kind IS NULL
        OR NOT EXISTS (SELECT 1 FROM task_events e WHERE e.task_id = t.id AND e.processed = 0))
 LIMIT :limit

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

-- name: task_events_lock_unprocessed
-- Events a consumer is about to handle, held until it commits (the unprocessed of them).
SELECT id FROM task_events WHERE id IN (:ids) AND processed = 0
 ORDER BY id
