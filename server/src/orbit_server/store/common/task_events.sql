-- Result events; the same on every dialect but for their {{hints}} (sql.py).

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

-- name: task_event_mark_processed
UPDATE task_events SET processed = 1, processed_at = :now WHERE id = :id AND processed = 0

-- name: events_delete_for_tasks
DELETE FROM task_events WHERE task_id IN (:task_ids)

-- name: task_events_lock_unprocessed
-- Events a consumer is about to handle, held until it commits (the unprocessed of them).
SELECT id FROM task_events WHERE id IN (:ids) AND processed = 0
 ORDER BY id {{for_update}}

-- name: task_events_pending_owned_count
-- How many of a consumer's events wait, counted in its index up to :most (a bounded read,
-- however long the backlog).
SELECT COUNT(*) AS n FROM (
  SELECT id FROM task_events WHERE owner_kind = :owner_kind AND processed = 0 LIMIT :most
) AS waiting
