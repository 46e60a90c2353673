-- Queries that read the same on MySQL/MariaDB and SQLite but for their {{hints}} (sql.py);
-- each dialect's folder holds only those that differ (pulse.sql).

-- name: queue_insert
INSERT INTO queues (tenant, environment, name, paused, concurrency_limit, key_concurrency,
                    max_pending, pending, active, created_at, updated_at)
VALUES (:tenant, :environment, :name, 0, NULL, 1, NULL, 0, 0, :now, :now)

-- name: queue_get
SELECT tenant, environment, name, paused, concurrency_limit, key_concurrency, max_pending,
       pending, active, created_at, updated_at
  FROM queues WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: queue_list
SELECT tenant, environment, name, paused, concurrency_limit, key_concurrency, max_pending,
       pending, active, created_at, updated_at
  FROM queues WHERE tenant = :tenant AND environment = :environment AND name > :after
 ORDER BY name LIMIT :limit

-- name: queue_update_settings
UPDATE queues SET paused = :paused, concurrency_limit = :concurrency_limit,
       key_concurrency = :key_concurrency, max_pending = :max_pending, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: queue_add_counts
UPDATE queues SET pending = pending + :pending, active = active + :active, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: queue_add_pending_within
-- A submit's count, only if the queue exists and stays within its waiting-tasks quota: one
-- statement in the common case; 0 rows changed sends the caller to the locking path.
UPDATE queues SET pending = pending + :pending, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name
   AND (max_pending IS NULL OR pending + :pending <= max_pending)

-- name: queue_take_active_within
-- A claim's count under the queue's concurrency limit, only if the limit still has room and
-- the queue is not paused: 0 rows changed means a claim that committed meanwhile took it.
UPDATE queues SET pending = pending - :n, active = active + :n, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name AND paused = 0
   AND (concurrency_limit IS NULL OR active + :n <= concurrency_limit)

-- name: queue_take_direct
-- A task leased as it is submitted counts as active — only if the queue is open, has no
-- concurrency limit and nothing of the task's type waits in its claim range (it overtakes
-- nobody); 0 rows changed sends the submit down the ordinary path.
UPDATE queues SET active = active + 1, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name AND paused = 0
   AND concurrency_limit IS NULL
   AND NOT EXISTS (SELECT 1 FROM task_ready r
                    WHERE r.tenant = :tenant AND r.environment = :environment
                      AND r.queue = :name AND r.type = :type)

-- name: queue_state_counts
SELECT state, COUNT(*) AS n FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
 GROUP BY state

-- name: queue_oldest_pending
SELECT MIN(run_at) AS oldest_at FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue

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
SELECT * FROM tasks
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

-- name: task_ready_insert
INSERT INTO task_ready (task_id, tenant, environment, queue, type, priority, run_at, fairness_key,
                        concurrency_key, handler_version, gate_id)
VALUES (:task_id, :tenant, :environment, :queue, :type, :priority, :run_at, :fairness_key,
        :concurrency_key, :handler_version, :gate_id)

-- name: task_ready_delete
DELETE FROM task_ready WHERE task_id = :task_id

-- name: task_finish_unstarted
UPDATE tasks SET state = :state, cancel_reason = :reason, finished_at = :now, updated_at = :now,
       lease_token = NULL, lease_expires_at = NULL
 WHERE id = :id AND state = :expected_state AND lease_epoch = :lease_epoch

-- name: task_request_cancel
UPDATE tasks SET cancel_requested = 1, cancel_reason = :reason, updated_at = :now
 WHERE id = :id AND state = :task.running AND cancel_requested = 0

-- name: tasks_in_states
SELECT id FROM tasks WHERE id IN (:task_ids) AND state IN (:states)

-- name: task_event_insert
INSERT INTO task_events (id, tenant, environment, task_id, attempt, seq, state, owner_kind,
                         owner_id, processed, created_at, processed_at)
VALUES (:id, :tenant, :environment, :task_id, :attempt, :seq, :state, :owner_kind, :owner_id, 0,
        :created_at, NULL)

-- name: task_event_list_pending
SELECT id, tenant, environment, task_id, attempt, seq, state, owner_kind, owner_id, created_at
  FROM task_events WHERE processed = 0 AND id > :after ORDER BY processed, id LIMIT :limit

-- name: task_event_list_pending_owned
-- A consumer's events (Weave's: owner_kind 'workflow'), oldest first.
SELECT id, tenant, environment, task_id, attempt, seq, state, owner_kind, owner_id, created_at
  FROM task_events WHERE owner_kind = :owner_kind AND processed = 0 AND id > :after
 ORDER BY id LIMIT :limit

-- name: task_events_mark_processed_many
UPDATE task_events SET processed = 1, processed_at = :now WHERE id IN (:ids) AND processed = 0

-- name: attempt_list
SELECT task_id, number, state, cause, worker_id, session_id, node, leased_at, started_at,
       ended_at, lease_expires_at, error
  FROM task_attempts WHERE task_id = :task_id ORDER BY task_id, number

-- name: key_permits_add_many
UPDATE key_permits SET active = active + :delta, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)

-- name: key_permit_get
SELECT active FROM key_permits
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key = :concurrency_key

-- name: task_resolve
UPDATE tasks SET state = :state, result = :result, error = :error, finished_at = :now,
       updated_at = :now
 WHERE id = :id AND state = :task.needs_review

-- name: task_event_mark_processed
UPDATE task_events SET processed = 1, processed_at = :now WHERE id = :id AND processed = 0

-- name: attempts_delete_for_tasks
DELETE FROM task_attempts WHERE task_id IN (:task_ids)

-- name: events_delete_for_tasks
DELETE FROM task_events WHERE task_id IN (:task_ids)

-- name: tasks_delete
DELETE FROM tasks WHERE id IN (:task_ids)

-- name: task_event_seq_set
UPDATE tasks SET event_seq = :seq WHERE id = :task_id AND event_seq = :seq - 1

-- name: queue_lock
SELECT tenant, environment, name, paused, concurrency_limit, key_concurrency, max_pending,
       pending, active, created_at, updated_at
  FROM queues WHERE tenant = :tenant AND environment = :environment AND name = :name {{for_update}}

-- name: task_lock
SELECT * FROM tasks WHERE id = :id AND tenant = :tenant AND environment = :environment
   {{for_update}}

-- name: tasks_finished_before
SELECT id FROM tasks t
 WHERE state IN (:task.succeeded, :task.failed, :task.cancelled) AND finished_at < :before
   AND (t.owner_kind IS NULL
        OR NOT EXISTS (SELECT 1 FROM task_events e WHERE e.task_id = t.id AND e.processed = 0))
 LIMIT :limit {{for_update_skip_locked}}

-- name: task_events_lock_unprocessed
-- Events a consumer is about to handle, held until it commits (the unprocessed of them).
SELECT id FROM task_events WHERE id IN (:ids) AND processed = 0
 ORDER BY id {{for_update}}
