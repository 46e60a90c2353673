-- Queries that read the same on MySQL/MariaDB and SQLite; each dialect's folder holds
-- only those that differ (leases.sql).

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

-- name: tasks_lease_many
UPDATE tasks SET state = :task.leased, lease_epoch = lease_epoch + 1, lease_token = :lease_token,
       lease_expires_at = :expires_at, session_id = :session_id, node = :node,
       worker_id = :worker_id, updated_at = :now
 WHERE id IN (:task_ids) AND state = :task.pending

-- name: tasks_get_many
SELECT * FROM tasks WHERE id IN (:task_ids)

-- name: attempts_ended
-- When the attempts of tasks about to be leased again ended (by primary key).
SELECT task_id, number, ended_at FROM task_attempts WHERE task_id IN (:task_ids)

-- name: attempt_insert
INSERT INTO task_attempts (task_id, number, state, cause, worker_id, session_id, node, leased_at,
                           started_at, ended_at, lease_expires_at, error)
VALUES (:task_id, :number, :attempt.leased, NULL, :worker_id, :session_id, :node, :leased_at, NULL,
        NULL, :lease_expires_at, NULL)

-- name: attempt_update
UPDATE task_attempts SET state = :state, cause = :cause, started_at = COALESCE(:started_at, started_at),
       ended_at = :ended_at, lease_expires_at = :lease_expires_at, error = :error
 WHERE task_id = :task_id AND number = :number

-- name: task_set_running
UPDATE tasks SET state = :task.running, attempts = attempts + 1,
       lease_expires_at = CASE WHEN :deadline_at < :expires_at THEN :deadline_at ELSE :expires_at END,
       deadline_at = :deadline_at, updated_at = :now
 WHERE id = :id AND lease_epoch = :epoch AND lease_token = :token AND state = :task.leased

-- name: task_return_pending
UPDATE tasks SET state = :task.pending, run_at = :run_at, lease_token = NULL, lease_expires_at = NULL,
       deadline_at = NULL,
       session_id = NULL, node = NULL, worker_id = NULL, updated_at = :now
 WHERE id = :id AND lease_epoch = :epoch AND state = :expected_state

-- name: tasks_renew_many
-- Rows locked and fence-checked by the caller.
UPDATE tasks SET lease_expires_at = CASE WHEN deadline_at IS NOT NULL AND deadline_at < :expires_at
                                         THEN deadline_at ELSE :expires_at END,
       updated_at = :now
 WHERE id IN (:task_ids)

-- name: task_finish
UPDATE tasks SET state = :state, result = :result, error = :error, finished_at = :finished_at,
       run_at = :run_at, lease_expires_at = NULL, deadline_at = NULL, updated_at = :now
 WHERE id = :id AND lease_epoch = :epoch AND state = :expected_state

-- name: tasks_set_pending_many
UPDATE tasks SET state = :task.pending, updated_at = :now
 WHERE id IN (:task_ids) AND state = :task.scheduled

-- name: session_leases
-- held_by is the session of a leased or running task and NULL in every other state.
SELECT id, lease_epoch, lease_token, state FROM tasks WHERE held_by = :session_id

-- name: attempt_get
SELECT task_id, number, state, cause, worker_id, session_id, node, leased_at, started_at,
       ended_at, lease_expires_at, error
  FROM task_attempts WHERE task_id = :task_id AND number = :number

-- name: ready_delete_for_gate
DELETE FROM task_ready WHERE gate_id = :gate_id

-- name: ready_insert_for_gate
INSERT INTO task_ready (task_id, tenant, environment, queue, type, priority, run_at, fairness_key,
                        concurrency_key, handler_version, gate_id)
SELECT id, tenant, environment, queue, type, priority, run_at, COALESCE(fairness_key, ''),
       concurrency_key, handler_version, gate_id
  FROM tasks WHERE pending_gate = :gate_id AND state = :task.pending AND concurrency_key IS NULL

-- name: ready_of_keys
SELECT task_id FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)

-- name: ready_insert_tasks
INSERT INTO task_ready (task_id, tenant, environment, queue, type, priority, run_at, fairness_key,
                        concurrency_key, handler_version, gate_id)
SELECT id, tenant, environment, queue, type, priority, run_at, COALESCE(fairness_key, ''),
       concurrency_key, handler_version, gate_id
  FROM tasks WHERE id IN (:task_ids) AND state = :task.pending

-- name: gate_pending_keys
SELECT DISTINCT tenant, environment, queue, concurrency_key FROM tasks
 WHERE pending_gate = :gate_id AND state = :task.pending AND concurrency_key IS NOT NULL

-- name: queue_pending_keys
SELECT DISTINCT pending_key AS concurrency_key FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND pending_key IS NOT NULL AND state = :task.pending
 ORDER BY pending_key

-- name: ready_exists
SELECT task_id FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue LIMIT 1

-- name: tasks_succeed_many
-- Tasks whose workers reported success, in one statement; results are set apart. From
-- 'running', or from 'leased' for eager attempts whose report is their start too (then the
-- attempt is counted here: :counted is 1).
UPDATE tasks SET state = :task.succeeded, attempts = attempts + :counted, result = NULL,
       error = NULL, finished_at = :now, lease_expires_at = NULL, deadline_at = NULL,
       event_seq = event_seq + 1, updated_at = :now
 WHERE id IN (:task_ids) AND state = :from_state

-- name: task_result_set
UPDATE tasks SET result = :result WHERE id = :id

-- name: attempts_end_running_many
UPDATE task_attempts SET state = :state, cause = :cause, ended_at = :now,
       lease_expires_at = NULL, error = NULL
 WHERE task_id IN (:task_ids) AND state = :attempt.running

-- name: attempts_start_and_end_many
-- Eager attempts whose report was their start too: started and ended at once.
UPDATE task_attempts SET state = :state, cause = :cause, started_at = :now, ended_at = :now,
       lease_expires_at = NULL, error = NULL
 WHERE task_id IN (:task_ids) AND state = :attempt.leased

-- name: tasks_start_many
UPDATE tasks SET state = :task.running, attempts = attempts + 1, lease_expires_at = :expires_at,
       deadline_at = :deadline_at, updated_at = :now
 WHERE id IN (:task_ids) AND state = :task.leased

-- name: attempts_start_many
UPDATE task_attempts SET state = :attempt.running, started_at = :now, lease_expires_at = :expires_at
 WHERE task_id IN (:task_ids) AND state = :attempt.leased

-- name: key_permits_existing
SELECT concurrency_key FROM key_permits
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)
