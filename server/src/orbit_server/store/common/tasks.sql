-- Tasks: their reads and locks, and every statement that writes task rows; the same on every
-- dialect but for their {{hints}} (sql.py), unless a dialect's tasks.sql has its own text.

-- name: queue_state_counts
SELECT state, COUNT(*) AS n FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
 GROUP BY state

-- name: queue_state_count_upto
-- How many tasks of a queue are in one state, counting no further than :most + 1: a bounded
-- range of the queue-and-state index however many finished tasks the queue keeps.
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM tasks {{force_index:tasks_queue_state}}
   WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND state = :state
   LIMIT :upto
) AS counted

-- name: task_insert
INSERT INTO tasks (id, tenant, environment, queue, type, state, params, priority, run_at,
                   attempts, max_attempts, initial_backoff_ms, backoff_multiplier, max_backoff_ms,
                   timeout_ms, idempotency_key, request_hash, concurrency_key, fairness_key,
                   side_effect, handler_version, labels, owner_kind, owner_id, owner_step,
                   gate_id, traceparent, result, error, cancel_requested, cancel_reason,
                   lease_epoch, created_at, updated_at, finished_at)
VALUES (:id, :tenant, :environment, :queue, :type, :state, :params, :priority, :run_at,
        0, :max_attempts, :initial_backoff_ms, :backoff_multiplier, :max_backoff_ms,
        :timeout_ms, :idempotency_key, :request_hash, :concurrency_key, :fairness_key,
        :side_effect, :handler_version, :labels, :owner_kind, :owner_id, :owner_step,
        :gate_id, :traceparent, NULL, NULL, 0, NULL, 0, :created_at, :created_at, NULL)

-- name: task_insert_leased
-- A task leased as it is submitted (direct dispatch, decision 0010): attempt 1 of a session.
INSERT INTO tasks (id, tenant, environment, queue, type, state, params, priority, run_at,
                   attempts, max_attempts, initial_backoff_ms, backoff_multiplier, max_backoff_ms,
                   timeout_ms, idempotency_key, request_hash, concurrency_key, fairness_key,
                   side_effect, handler_version, labels, owner_kind, owner_id, owner_step,
                   gate_id, traceparent, result, error, cancel_requested, cancel_reason,
                   lease_epoch, lease_token, lease_expires_at, session_id, node, worker_id,
                   created_at, updated_at, finished_at)
VALUES (:id, :tenant, :environment, :queue, :type, :task.leased, :params, :priority, :run_at,
        0, :max_attempts, :initial_backoff_ms, :backoff_multiplier, :max_backoff_ms,
        :timeout_ms, :idempotency_key, :request_hash, :concurrency_key, :fairness_key,
        :side_effect, :handler_version, :labels, :owner_kind, :owner_id, :owner_step,
        :gate_id, :traceparent, NULL, NULL, 0, NULL, 1, :lease_token, :lease_expires_at,
        :session_id, :node, :worker_id, :created_at, :created_at, NULL)

-- name: task_get
SELECT * FROM tasks WHERE id = :id AND tenant = :tenant AND environment = :environment

-- name: task_get_by_idempotency_key
SELECT * FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND idempotency_key = :idempotency_key

-- name: task_list
SELECT * FROM tasks WHERE tenant = :tenant AND environment = :environment AND id < :before
 ORDER BY id DESC LIMIT :limit

-- name: task_list_by_state
-- The state index, named: MariaDB otherwise walks the primary key back from :before and reads
-- row after row of other states (the needs_review inbox of a million tasks: 0.25 s against 11 ms).
SELECT * FROM tasks {{force_index:tasks_state}}
 WHERE tenant = :tenant AND environment = :environment AND state = :state AND id < :before
 ORDER BY id DESC LIMIT :limit

-- name: task_list_by_queue
SELECT * FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND id < :before
 ORDER BY id DESC LIMIT :limit

-- name: task_list_by_queue_state
SELECT * FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND state = :state
   AND id < :before
 ORDER BY id DESC LIMIT :limit

-- name: task_finish_unstarted
UPDATE tasks SET state = :state, cancel_reason = :reason, finished_at = :now, updated_at = :now,
       lease_token = NULL, lease_expires_at = NULL
 WHERE id = :id AND state = :expected_state AND lease_epoch = :lease_epoch

-- name: task_request_cancel
UPDATE tasks SET cancel_requested = 1, cancel_reason = :reason, updated_at = :now
 WHERE id = :id AND state = :task.running AND cancel_requested = 0

-- name: tasks_in_states
SELECT id FROM tasks WHERE id IN (:task_ids) AND state IN (:states)

-- name: task_resolve
UPDATE tasks SET state = :state, result = :result, error = :error, finished_at = :now,
       updated_at = :now
 WHERE id = :id AND state = :task.needs_review

-- name: tasks_delete
DELETE FROM tasks WHERE id IN (:task_ids)

-- name: task_event_seq_set
UPDATE tasks SET event_seq = :seq WHERE id = :task_id AND event_seq = :seq - 1

-- name: task_lock
SELECT * FROM tasks WHERE id = :id AND tenant = :tenant AND environment = :environment
   {{for_update}}

-- name: tasks_finished_before
SELECT id FROM tasks t
 WHERE state IN (:task.succeeded, :task.failed, :task.cancelled) AND finished_at < :before
   AND (t.owner_kind IS NULL
        OR NOT EXISTS (SELECT 1 FROM task_events e WHERE e.task_id = t.id AND e.processed = 0))
 LIMIT :limit {{for_update_skip_locked}}

-- name: tasks_lease_many
UPDATE tasks SET state = :task.leased, lease_epoch = lease_epoch + 1, lease_token = :lease_token,
       lease_expires_at = :expires_at, session_id = :session_id, node = :node,
       worker_id = :worker_id, updated_at = :now
 WHERE id IN (:task_ids) AND state = :task.pending

-- name: tasks_get_leased
-- What a claim leased, read back: a workflow step's task with its workflow's definition and
-- version, for the delivery (a primary-key look-up per step task, in the same statement).
SELECT t.*, w.definition AS owner_name, w.version AS owner_version
  FROM tasks t LEFT JOIN workflows w ON t.owner_kind = :workflow_kind AND w.id = t.owner_id
 WHERE t.id IN (:task_ids)

-- name: tasks_get_many
SELECT * FROM tasks WHERE id IN (:task_ids)

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

-- name: gate_pending_keys
SELECT DISTINCT tenant, environment, queue, concurrency_key FROM tasks
 WHERE pending_gate = :gate_id AND state = :task.pending AND concurrency_key IS NOT NULL

-- name: gate_pending_queues
SELECT DISTINCT tenant, environment, queue FROM tasks
 WHERE pending_gate = :gate_id AND state = :task.pending AND concurrency_key IS NULL

-- name: queue_pending_keys
SELECT DISTINCT pending_key AS concurrency_key FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND pending_key IS NOT NULL AND state = :task.pending
 ORDER BY pending_key

-- name: tasks_succeed_many
-- Tasks whose workers reported success, in one statement; results are set apart
-- (task_results_set). From
-- 'running', or from 'leased' for eager attempts whose report is their start too (then the
-- attempt is counted here: :counted is 1).
UPDATE tasks SET state = :task.succeeded, attempts = attempts + :counted, result = NULL,
       error = NULL, finished_at = :now, lease_expires_at = NULL, deadline_at = NULL,
       event_seq = event_seq + 1, updated_at = :now
 WHERE id IN (:task_ids) AND state = :from_state

-- name: tasks_start_many
UPDATE tasks SET state = :task.running, attempts = attempts + 1, lease_expires_at = :expires_at,
       deadline_at = :deadline_at, updated_at = :now
 WHERE id IN (:task_ids) AND state = :task.leased

-- name: task_lock_fenced
SELECT * FROM tasks
 WHERE id = :id AND lease_epoch = :epoch AND lease_token = :token AND session_id = :session_id
   {{for_update}}

-- name: leases_expired
SELECT id, tenant, environment, queue FROM tasks {{force_index:tasks_lease}}
 WHERE state IN (:task.leased, :task.running) AND lease_expires_at <= :now
 LIMIT :limit {{for_update_skip_locked}}

-- name: scheduled_due
SELECT * FROM tasks {{force_index:tasks_due}} WHERE due_at <= :now AND state = :task.scheduled
 ORDER BY due_at LIMIT :limit {{for_update_skip_locked}}

-- name: tasks_lock_many
SELECT id, tenant, environment, queue, state, lease_epoch, lease_token, session_id,
       lease_expires_at, deadline_at, cancel_requested, gate_id, timeout_ms, concurrency_key, owner_kind, owner_id,
       event_seq, side_effect
  FROM tasks {{force_index:PRIMARY}} WHERE id IN (:task_ids) ORDER BY id {{for_update}}

-- name: tasks_lock_many_in
-- Only the rows of one tenant and environment (others are not kept locked).
SELECT id, tenant, environment, queue, state, lease_epoch, lease_token, session_id,
       lease_expires_at, deadline_at, cancel_requested, gate_id, timeout_ms, concurrency_key, owner_kind, owner_id,
       event_seq, side_effect
  FROM tasks {{force_index:PRIMARY}} WHERE id IN (:task_ids)
   AND tenant = :tenant AND environment = :environment ORDER BY id {{for_update}}

-- name: task_adopt
UPDATE tasks SET session_id = :session_id, node = :node, worker_id = :worker_id, updated_at = :now
 WHERE id = :id AND lease_epoch = :epoch AND lease_token = :token
   AND state IN (:task.leased, :task.running) AND lease_expires_at > :now
