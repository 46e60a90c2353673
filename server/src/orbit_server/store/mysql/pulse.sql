-- name: queue_lock
SELECT tenant, environment, name, paused, concurrency_limit, key_concurrency, max_pending,
       pending, active, created_at, updated_at
  FROM queues WHERE tenant = :tenant AND environment = :environment AND name = :name
   FOR UPDATE

-- name: task_lock
SELECT * FROM tasks WHERE id = :id AND tenant = :tenant AND environment = :environment
   FOR UPDATE

-- name: task_reopen
UPDATE tasks SET state = :task.pending, run_at = :now, max_attempts = GREATEST(max_attempts, attempts + 1),
       result = NULL, error = NULL, finished_at = NULL, cancel_requested = 0, cancel_reason = NULL,
       lease_expires_at = NULL, updated_at = :now
 WHERE id = :id AND state = :expected_state

-- name: tasks_finished_before
SELECT id FROM tasks t
 WHERE state IN (:task.succeeded, :task.failed, :task.cancelled) AND finished_at < :before
   AND (t.owner_kind IS NULL
        OR NOT EXISTS (SELECT 1 FROM task_events e WHERE e.task_id = t.id AND e.processed = 0))
 LIMIT :limit FOR UPDATE SKIP LOCKED

-- name: idempotency_keys_expire
UPDATE tasks SET idempotency_key = NULL, request_hash = NULL
 WHERE state IN (:task.succeeded, :task.failed, :task.cancelled) AND finished_at < :before
   AND idempotency_key IS NOT NULL
 LIMIT :limit

-- name: key_permits_prune
-- An idle key's permit row is recreated by the next task of the key that needs it.
DELETE FROM key_permits WHERE active = 0 AND updated_at < :before LIMIT :limit

-- name: key_permits_insert_missing
INSERT IGNORE INTO key_permits (tenant, environment, queue, concurrency_key, active, updated_at)
VALUES (:tenant, :environment, :queue, :concurrency_key, 0, :now)

-- name: task_events_lock_unprocessed
-- Events a consumer is about to handle, held until it commits (the unprocessed of them).
SELECT id FROM task_events WHERE id IN (:ids) AND processed = 0
 ORDER BY id
   FOR UPDATE
