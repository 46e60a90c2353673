-- Queries that read the same on MySQL/MariaDB and SQLite but for their {{hints}} (sql.py);
-- each dialect's folder holds only those that differ (leases.sql).

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

-- name: gate_pending_queues
SELECT DISTINCT tenant, environment, queue FROM tasks
 WHERE pending_gate = :gate_id AND state = :task.pending AND concurrency_key IS NULL

-- name: queue_pending_keys
SELECT DISTINCT pending_key AS concurrency_key FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND pending_key IS NOT NULL AND state = :task.pending
 ORDER BY pending_key

-- name: ready_exists
SELECT task_id FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue LIMIT 1

-- name: tasks_succeed_many
-- Tasks whose workers reported success, in one statement; results are set apart
-- (task_results_set). From
-- 'running', or from 'leased' for eager attempts whose report is their start too (then the
-- attempt is counted here: :counted is 1).
UPDATE tasks SET state = :task.succeeded, attempts = attempts + :counted, result = NULL,
       error = NULL, finished_at = :now, lease_expires_at = NULL, deadline_at = NULL,
       event_seq = event_seq + 1, updated_at = :now
 WHERE id IN (:task_ids) AND state = :from_state

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

-- name: claim_outlook
-- The queue, and whether a type has claimable work and over how many fairness keys (first =
-- last: one), and where its fairness rotation stands: three index seeks a type, every type of
-- a claim in one statement (a union).
SELECT q.tenant, q.environment, q.name, q.paused, q.concurrency_limit, q.key_concurrency,
       q.max_pending, q.pending, q.active, q.created_at, q.updated_at, :type AS type,
       (SELECT fairness_key FROM task_ready {{force_index:task_ready_fair}}
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
         ORDER BY fairness_key LIMIT 1) AS first_key,
       (SELECT fairness_key FROM task_ready {{force_index:task_ready_fair}}
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
         ORDER BY fairness_key DESC LIMIT 1) AS last_key,
       (SELECT after_key FROM fairness_cursors
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue
           AND type = :type) AS fair_after
  FROM queues q WHERE q.tenant = :tenant AND q.environment = :environment AND q.name = :queue

-- name: ready_first_fairness_key
SELECT fairness_key FROM task_ready {{force_index:task_ready_fair}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
 ORDER BY fairness_key LIMIT 1

-- name: ready_next_fairness_key
-- One index seek per key: DISTINCT would read every ready row of the queue.
SELECT fairness_key FROM task_ready {{force_index:task_ready_fair}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND fairness_key > :after
 ORDER BY fairness_key LIMIT 1

-- name: ready_candidates
-- FORCE INDEX: the claim order must come from the index whatever the statistics say
-- (a sort would hide free rows from concurrent SKIP LOCKED claimers).
SELECT task_id, priority, run_at, fairness_key, concurrency_key, handler_version, gate_id
  FROM task_ready {{force_index:task_ready_claim}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND (:any_version = 1 OR handler_version IS NULL OR handler_version IN (:versions))
 ORDER BY priority DESC, run_at, task_id
 LIMIT :limit {{for_update_skip_locked}}

-- name: ready_candidates_of_key
SELECT task_id, priority, run_at, fairness_key, concurrency_key, handler_version, gate_id
  FROM task_ready {{force_index:task_ready_fair}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND fairness_key = :fairness_key
   AND (:any_version = 1 OR handler_version IS NULL OR handler_version IN (:versions))
 ORDER BY priority DESC, run_at, task_id
 LIMIT :limit {{for_update_skip_locked}}

-- name: gates_read_shared
SELECT id, open, version FROM gates WHERE id IN (:gate_ids) {{lock_in_share_mode}}

-- name: key_permits_lock
-- By primary key whatever the table's size (a scan would wait for other keys' rows).
SELECT concurrency_key, active FROM key_permits {{force_index:PRIMARY}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)
 ORDER BY concurrency_key {{for_update}}

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

-- name: gate_lock
SELECT id, tenant, environment, open, version, created_at, updated_at FROM gates
 WHERE id = :id AND tenant = :tenant AND environment = :environment {{for_update}}

-- name: key_head_pending
-- The first pending tasks of a concurrency key in claim order, behind an open gate or none.
SELECT t.id, t.pending_key AS concurrency_key FROM tasks t {{indexed_by:tasks_key}}
  LEFT JOIN gates g ON g.id = t.pending_gate
 WHERE t.tenant = :tenant AND t.environment = :environment AND t.queue = :queue
   AND t.pending_key = :concurrency_key AND (t.pending_gate IS NULL OR g.open = 1)
 ORDER BY t.priority DESC, t.run_at, t.id
 LIMIT :limit

-- name: keys_first_pending
-- The first pending task of each key in claim order (open gate or none), NULL for a key with
-- none: the key's permit row drives one correlated index seek per key, all keys in one
-- statement, planned once (a union plans every part).
SELECT k.concurrency_key,
       (SELECT t.id FROM tasks t {{indexed_by:tasks_key}}
          LEFT JOIN gates g ON g.id = t.pending_gate
         WHERE t.tenant = k.tenant AND t.environment = k.environment AND t.queue = k.queue
           AND t.pending_key = k.concurrency_key AND (t.pending_gate IS NULL OR g.open = 1)
         ORDER BY t.priority DESC, t.run_at, t.id
         LIMIT 1) AS id
  FROM key_permits k
 WHERE k.tenant = :tenant AND k.environment = :environment AND k.queue = :queue
   AND k.concurrency_key IN (:keys)

-- name: keys_admission
-- Per key, after its permits came back: its free permits, its first pending task in claim
-- order (open gate or none; NULL for none) and its rows in the claim range (how many, and the
-- first), all in one statement driven by the permit rows the caller has locked.
SELECT k.concurrency_key, q.key_concurrency - k.active AS free,
       (SELECT t.id FROM tasks t {{indexed_by:tasks_key}}
          LEFT JOIN gates g ON g.id = t.pending_gate
         WHERE t.tenant = k.tenant AND t.environment = k.environment AND t.queue = k.queue
           AND t.pending_key = k.concurrency_key AND (t.pending_gate IS NULL OR g.open = 1)
         ORDER BY t.priority DESC, t.run_at, t.id
         LIMIT 1) AS head,
       (SELECT COUNT(*) FROM task_ready r
         WHERE r.tenant = k.tenant AND r.environment = k.environment AND r.queue = k.queue
           AND r.concurrency_key = k.concurrency_key) AS admitted,
       (SELECT MIN(r.task_id) FROM task_ready r
         WHERE r.tenant = k.tenant AND r.environment = k.environment AND r.queue = k.queue
           AND r.concurrency_key = k.concurrency_key) AS admitted_first
  FROM key_permits k
  JOIN queues q ON q.tenant = k.tenant AND q.environment = k.environment AND q.name = k.queue
 WHERE k.tenant = :tenant AND k.environment = :environment AND k.queue = :queue
   AND k.concurrency_key IN (:keys)

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

-- name: key_permits_lock_free
-- Rows another transaction holds are skipped, not waited for (SQLite has one writer: none are).
SELECT concurrency_key, active FROM key_permits {{force_index:PRIMARY}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)
 ORDER BY concurrency_key {{for_update_skip_locked}}
