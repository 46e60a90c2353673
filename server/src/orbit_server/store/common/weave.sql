-- Weave (decision 0015): definitions, instances, step executions and signals; the same on
-- every dialect unless a dialect's file has its own text.

-- name: workflow_definition_insert
INSERT INTO workflow_definitions (tenant, environment, name, version, digest, body, created_at)
VALUES (:tenant, :environment, :name, :version, :digest, :body, :created_at)

-- name: workflow_definition_get
SELECT * FROM workflow_definitions
 WHERE tenant = :tenant AND environment = :environment AND name = :name AND version = :version

-- name: workflow_definition_latest_version
SELECT version FROM workflow_definitions
 WHERE tenant = :tenant AND environment = :environment AND name = :name
 ORDER BY created_at DESC, version DESC
 LIMIT 1

-- name: workflow_definitions_list
SELECT tenant, environment, name, version, digest, created_at FROM workflow_definitions
 WHERE tenant = :tenant AND environment = :environment
   AND (name > :after_name OR (name = :after_name AND version > :after_version))
 ORDER BY name, version
 LIMIT :limit

-- name: workflow_definition_versions
SELECT tenant, environment, name, version, digest, created_at FROM workflow_definitions
 WHERE tenant = :tenant AND environment = :environment AND name = :name AND version > :after
 ORDER BY version
 LIMIT :limit

-- name: workflow_insert
INSERT INTO workflows (id, tenant, environment, definition, version, state, input, output, error,
                       context, control_version, gate_id, idempotency_key, request_hash,
                       created_at, updated_at, finished_at)
VALUES (:id, :tenant, :environment, :definition, :version, :state, :input, :output, :error,
        :context, :control_version, :gate_id, :idempotency_key, :request_hash,
        :created_at, :updated_at, :finished_at)

-- name: workflow_get
SELECT * FROM workflows WHERE id = :id AND tenant = :tenant AND environment = :environment

-- name: workflow_get_by_idempotency_key
SELECT * FROM workflows
 WHERE tenant = :tenant AND environment = :environment AND idempotency_key = :idempotency_key

-- name: workflows_list
-- Newest first; the ORDER BY names the index's columns after the equal ones (decision 0006).
SELECT * FROM workflows
 WHERE tenant = :tenant AND environment = :environment AND id < :before
 ORDER BY id DESC
 LIMIT :limit

-- name: workflows_list_by_definition
SELECT * FROM workflows
 WHERE tenant = :tenant AND environment = :environment AND definition = :definition
   AND id < :before
 ORDER BY id DESC
 LIMIT :limit

-- name: workflows_list_by_definition_state
SELECT * FROM workflows
 WHERE tenant = :tenant AND environment = :environment AND definition = :definition
   AND state = :state AND id < :before
 ORDER BY id DESC
 LIMIT :limit

-- name: workflows_list_by_state
SELECT * FROM workflows
 WHERE tenant = :tenant AND environment = :environment AND state = :state AND id < :before
 ORDER BY id DESC
 LIMIT :limit

-- name: workflow_step_insert
INSERT INTO workflow_steps (workflow_id, step_key, seq, step, kind, state, parent_key, branch,
                            item, round, task_id, tries, input, output, error, progress, items,
                            followed, due_at, wake_at, started_at, ended_at, updated_at)
VALUES (:workflow_id, :step_key, :seq, :step, :kind, :state, :parent_key, :branch,
        :item, :round, :task_id, :tries, :input, :output, :error, :progress, :items,
        :followed, :due_at, :wake_at, :started_at, :ended_at, :updated_at)

-- name: workflow_step_get
SELECT workflow_id, step_key, seq, step, kind, state, parent_key, branch, item, round, task_id,
       tries, input, output, error, progress, followed, due_at, wake_at, started_at, ended_at,
       updated_at
  FROM workflow_steps WHERE workflow_id = :workflow_id AND step_key = :step_key

-- name: workflow_step_items
SELECT items FROM workflow_steps WHERE workflow_id = :workflow_id AND step_key = :step_key

-- name: workflow_step_set_items
UPDATE workflow_steps SET items = :items WHERE workflow_id = :workflow_id AND step_key = :step_key

-- name: workflow_steps_unfollowed
-- Executions that ended while their instance was paused (resume follows them).
SELECT workflow_id, step_key, seq, step, kind, state, parent_key, branch, item, round, task_id,
       tries, input, output, error, progress, followed, due_at, wake_at, started_at, ended_at,
       updated_at
  FROM workflow_steps
 WHERE workflow_id = :workflow_id AND followed = 0
   AND state IN (:step.succeeded, :step.failed, :step.skipped)

-- name: workflow_steps_list
SELECT workflow_id, step_key, seq, step, kind, state, parent_key, branch, item, round, task_id,
       tries, input, output, error, progress, followed, due_at, wake_at, started_at, ended_at,
       updated_at
  FROM workflow_steps WHERE workflow_id = :workflow_id AND seq > :after
 ORDER BY seq
 LIMIT :limit

-- name: workflow_steps_main
-- The newest executions that are steps (not a map's items, not a poll's rounds): the index
-- (workflow_id, item, round, seq) reads them alone, past no item.
SELECT workflow_id, step_key, seq, step, kind, state, parent_key, branch, item, round, task_id,
       tries, input, output, error, progress, followed, due_at, wake_at, started_at, ended_at,
       updated_at
  FROM workflow_steps
 WHERE workflow_id = :workflow_id AND item IS NULL AND round IS NULL
 ORDER BY seq DESC
 LIMIT :limit

-- name: workflow_steps_in_states
SELECT workflow_id, step_key, seq, step, kind, state, parent_key, branch, item, round, task_id,
       tries, input, output, error, progress, followed, due_at, wake_at, started_at, ended_at,
       updated_at
  FROM workflow_steps WHERE workflow_id IN (:workflow_ids) AND state IN (:states)

-- name: workflow_steps_count_in_state
SELECT COUNT(*) AS n FROM workflow_steps WHERE workflow_id = :workflow_id AND state = :state

-- name: workflow_step_outputs
-- A map's item outputs in item order (its fan-in).
SELECT item, output FROM workflow_steps
 WHERE workflow_id = :workflow_id AND parent_key = :parent_key AND item IS NOT NULL
 ORDER BY item

-- name: workflow_steps_due
SELECT workflow_id, step_key FROM workflow_steps
 WHERE wake_at <= :now
 ORDER BY wake_at
 LIMIT :limit

-- name: workflow_steps_next_wake
SELECT MIN(wake_at) AS wake_at FROM workflow_steps

-- name: workflow_steps_rearm
UPDATE workflow_steps SET wake_at = due_at
 WHERE workflow_id = :workflow_id AND wake_at IS NULL AND due_at IS NOT NULL
   AND state IN (:step.pending, :step.running, :step.waiting)

-- name: workflow_signal_insert
INSERT INTO workflow_signals (id, workflow_id, name, payload, idempotency_key, state, step_key,
                              created_at, delivered_at)
VALUES (:id, :workflow_id, :name, :payload, :idempotency_key, :state, :step_key, :created_at,
        :delivered_at)

-- name: workflow_signal_get_by_key
SELECT * FROM workflow_signals
 WHERE workflow_id = :workflow_id AND idempotency_key = :idempotency_key

-- name: workflow_signal_oldest_pending
SELECT * FROM workflow_signals
 WHERE workflow_id = :workflow_id AND state = :signal.pending AND name = :name
 ORDER BY id
 LIMIT 1

-- name: workflow_signal_deliver
UPDATE workflow_signals SET state = :signal.delivered, step_key = :step_key, delivered_at = :now
 WHERE id = :id AND state = :signal.pending

-- name: workflow_signals_pending
SELECT * FROM workflow_signals
 WHERE workflow_id = :workflow_id AND state = :signal.pending
 ORDER BY name, id
 LIMIT :limit

-- name: workflows_finished_before
-- Instances finished before the retention's limit (running ones have no finished_at).
SELECT id, gate_id FROM workflows WHERE finished_at < :before LIMIT :limit

-- name: workflow_signals_delete
DELETE FROM workflow_signals WHERE workflow_id = :workflow_id

-- name: workflow_delete
DELETE FROM workflows WHERE id = :id

-- name: workflow_lock
SELECT * FROM workflows WHERE id = :id {{for_update}}

-- name: workflows_lock_many
SELECT * FROM workflows WHERE id IN (:ids)
 ORDER BY id {{for_update}}
