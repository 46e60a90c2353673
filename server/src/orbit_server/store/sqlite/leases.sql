-- name: ready_delete_many
DELETE FROM task_ready WHERE task_id IN (:task_ids)

-- name: fairness_cursor_set
-- Written after the claim's count of the queue's row, so claims take the two rows in one order.
INSERT INTO fairness_cursors (tenant, environment, queue, type, after_key, updated_at)
VALUES (:tenant, :environment, :queue, :type, :after_key, :now)
ON CONFLICT (tenant, environment, queue, type)
DO UPDATE SET after_key = excluded.after_key, updated_at = excluded.updated_at

-- name: task_results_set
-- Run once per result (SQLite has no JSON_TABLE join to update from).
UPDATE tasks SET result = :result WHERE id = :id
