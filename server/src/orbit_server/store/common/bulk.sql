-- Bulk operations (decision 0025): the operation, its frozen selection of targets, and the
-- reads that select tasks for it; the same on every dialect but for their {{hints}}.

-- name: bulk_insert
INSERT INTO bulk_operations (id, tenant, environment, kind, action, filter, params, state, matched,
                             done, skipped, failed, skipped_reasons, created_by, created_at,
                             updated_at, finished_at)
VALUES (:id, :tenant, :environment, :kind, :action, :filter, :params, :state, :matched, 0, 0, 0,
        '{}', :created_by, :now, :now, :finished_at)

-- name: bulk_item_insert
INSERT INTO bulk_operation_items (operation_id, seq, target_id, state, reason)
VALUES (:operation_id, :seq, :target_id, :state, NULL)

-- name: bulk_get
SELECT * FROM bulk_operations WHERE id = :id AND tenant = :tenant AND environment = :environment

-- name: bulk_list
SELECT * FROM bulk_operations
 WHERE tenant = :tenant AND environment = :environment AND id < :before
 ORDER BY id DESC LIMIT :limit

-- name: bulk_next_running
-- The oldest running operation that no other transaction is stepping now.
SELECT * FROM bulk_operations WHERE state = :running ORDER BY state, id
 LIMIT 1 {{for_update_skip_locked}}

-- name: bulk_lock
SELECT * FROM bulk_operations WHERE id = :id AND tenant = :tenant AND environment = :environment
   {{for_update}}

-- name: bulk_lock_by_id
SELECT * FROM bulk_operations WHERE id = :id {{for_update}}

-- name: bulk_items_pending
SELECT seq, target_id FROM bulk_operation_items
 WHERE operation_id = :id AND state = :pending ORDER BY operation_id, state, seq LIMIT :limit

-- name: bulk_item_settle
UPDATE bulk_operation_items SET state = :state, reason = :reason
 WHERE operation_id = :operation_id AND seq = :seq AND state = :pending

-- name: bulk_progress
UPDATE bulk_operations
   SET done = done + :done, skipped = skipped + :skipped, failed = failed + :failed,
       skipped_reasons = :skipped_reasons, state = :state, updated_at = :now,
       finished_at = :finished_at
 WHERE id = :id

-- name: bulk_items_list
SELECT seq, target_id, state, reason FROM bulk_operation_items
 WHERE operation_id = :id AND seq > :after ORDER BY operation_id, seq LIMIT :limit

-- name: tasks_select
-- A page of a bulk operation's selection: the filters an index or a column answers; labels
-- and error codes are matched by the caller.
SELECT id, state, labels, error FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND id > :after
   AND (:any_queue = 1 OR queue = :queue)
   AND (:any_state = 1 OR state IN (:states))
   AND (:any_type = 1 OR type = :type)
   AND (:any_ids = 1 OR id IN (:ids))
   AND created_at >= :created_from AND created_at < :created_to
   AND (:any_finished = 1 OR (finished_at >= :finished_from AND finished_at < :finished_to))
 ORDER BY tenant, environment, id
 LIMIT :limit

-- name: task_set_priority
UPDATE tasks SET priority = :priority, updated_at = :now
 WHERE id = :id AND state IN (:states)

-- name: ready_set_priority
UPDATE task_ready SET priority = :priority WHERE task_id = :id

-- name: task_move_run_at
UPDATE tasks SET run_at = :run_at, updated_at = :now WHERE id = :id AND state = :scheduled

-- name: bulk_tasks_lock
-- Whole rows of a batch's tasks, locked in id order (a transition writes from the whole row).
SELECT * FROM tasks {{force_index:PRIMARY}}
 WHERE id IN (:task_ids) AND tenant = :tenant AND environment = :environment
 ORDER BY id {{for_update}}

-- name: workflows_select
-- A page of a workflow bulk operation's selection.
SELECT id FROM workflows
 WHERE tenant = :tenant AND environment = :environment AND id > :after
   AND (:any_definition = 1 OR definition = :definition)
   AND (:any_state = 1 OR state IN (:states))
   AND (:any_ids = 1 OR id IN (:ids))
   AND created_at >= :created_from AND created_at < :created_to
 ORDER BY tenant, environment, id
 LIMIT :limit

-- name: bulk_finished_before
SELECT id FROM bulk_operations
 WHERE state <> :running AND finished_at < :before ORDER BY state, id LIMIT 1

-- name: bulk_items_first_seq
SELECT MIN(seq) AS seq FROM bulk_operation_items WHERE operation_id = :id

-- name: bulk_items_delete_below
DELETE FROM bulk_operation_items WHERE operation_id = :id AND seq < :below

-- name: bulk_delete
DELETE FROM bulk_operations WHERE id = :id
