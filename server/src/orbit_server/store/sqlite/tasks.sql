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

-- name: task_results_set
-- Run once per result (SQLite has no JSON_TABLE join to update from).
UPDATE tasks SET result = :result WHERE id = :id

-- name: tasks_finished_per_minute
-- Tasks of a scope that finished since :since, by minute ("YYYY-MM-DD HH:MM"): the console's
-- throughput chart. A range of the finished-time index, one hour at most.
SELECT replace(substr(finished_at, 1, 16), 'T', ' ') AS minute, COUNT(*) AS n
  FROM tasks {{force_index:tasks_finished}}
 WHERE finished_at >= :since AND tenant = :tenant AND environment = :environment
 GROUP BY minute
