-- Step executions (decision 0015); the same on every dialect unless a dialect's steps.sql
-- has its own text.

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
