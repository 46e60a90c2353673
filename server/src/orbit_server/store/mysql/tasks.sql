-- name: task_reopen
UPDATE tasks SET state = :task.pending, run_at = :now, max_attempts = GREATEST(max_attempts, attempts + 1),
       result = NULL, error = NULL, finished_at = NULL, cancel_requested = 0, cancel_reason = NULL,
       lease_expires_at = NULL, updated_at = :now
 WHERE id = :id AND state = :expected_state

-- name: idempotency_keys_expire
UPDATE tasks SET idempotency_key = NULL, request_hash = NULL
 WHERE state IN (:task.succeeded, :task.failed, :task.cancelled) AND finished_at < :before
   AND idempotency_key IS NOT NULL
 LIMIT :limit

-- name: task_results_set
-- The results of a batch of tasks, one statement: ids and results (as JSON text) as a JSON
-- table joined by id.
UPDATE JSON_TABLE(:rows_json, '$[*]' COLUMNS (
         id VARCHAR(40) PATH '$.id',
         result LONGTEXT PATH '$.result')) p
  STRAIGHT_JOIN tasks t ON t.id = p.id
   SET t.result = p.result

-- name: tasks_finished_per_minute
-- Tasks of a scope that finished since :since, by minute ("YYYY-MM-DD HH:MM"): the console's
-- throughput chart. A range of the finished-time index, one hour at most.
SELECT LEFT(CAST(finished_at AS CHAR), 16) AS minute, COUNT(*) AS n
  FROM tasks {{force_index:tasks_finished}}
 WHERE finished_at >= :since AND tenant = :tenant AND environment = :environment
 GROUP BY minute
