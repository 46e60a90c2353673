-- Attempts, one row per lease of a task; the same on every dialect.

-- name: attempt_list
SELECT task_id, number, state, cause, worker_id, session_id, node, leased_at, started_at,
       ended_at, lease_expires_at, error, progress, progress_at
  FROM task_attempts WHERE task_id = :task_id ORDER BY task_id, number

-- name: attempts_of_tasks
SELECT task_id, number, state, cause, worker_id, session_id, node, leased_at, started_at,
       ended_at, lease_expires_at, error, progress, progress_at
  FROM task_attempts WHERE task_id IN (:task_ids) ORDER BY task_id, number

-- name: attempts_delete_for_tasks
DELETE FROM task_attempts WHERE task_id IN (:task_ids)

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

-- name: attempt_get
SELECT task_id, number, state, cause, worker_id, session_id, node, leased_at, started_at,
       ended_at, lease_expires_at, error, progress, progress_at
  FROM task_attempts WHERE task_id = :task_id AND number = :number

-- name: attempts_end_running_many
UPDATE task_attempts SET state = :state, cause = :cause, ended_at = :now,
       lease_expires_at = NULL, error = NULL
 WHERE task_id IN (:task_ids) AND state = :attempt.running

-- name: attempts_start_and_end_many
-- Eager attempts whose report was their start too: started and ended at once.
UPDATE task_attempts SET state = :state, cause = :cause, started_at = :now, ended_at = :now,
       lease_expires_at = NULL, error = NULL
 WHERE task_id IN (:task_ids) AND state = :attempt.leased

-- name: attempts_start_many
UPDATE task_attempts SET state = :attempt.running, started_at = :now, lease_expires_at = :expires_at
 WHERE task_id IN (:task_ids) AND state = :attempt.leased

-- name: attempt_progress_set
-- What the handler of a held attempt reported with a heartbeat (fenced by the caller).
UPDATE task_attempts SET progress = :progress, progress_at = :now
 WHERE task_id = :task_id AND number = :number
