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
