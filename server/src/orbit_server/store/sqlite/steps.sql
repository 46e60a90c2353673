-- name: workflow_steps_update_many
-- Run once per changed execution (SQLite has no JSON_TABLE join to update from).
UPDATE workflow_steps
   SET state = :state, task_id = :task_id, tries = :tries, output = :output, error = :error,
       progress = :progress, followed = :followed, due_at = :due_at, wake_at = :wake_at,
       ended_at = :ended_at, updated_at = :updated_at
 WHERE workflow_id = :workflow_id AND step_key = :step_key

-- name: workflow_steps_delete_some
DELETE FROM workflow_steps WHERE rowid IN (
  SELECT rowid FROM workflow_steps WHERE workflow_id = :workflow_id LIMIT :limit)
