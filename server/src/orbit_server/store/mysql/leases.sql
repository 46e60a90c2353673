-- name: ready_delete_many
-- Row by row through the primary key, whatever the table's size: on a small claim range the
-- optimizer would rather scan it, and a DELETE that scans waits for every row other claims
-- hold (READ COMMITTED passes over locked rows that do not match only for UPDATE). A DELETE
-- takes no index hint; the ids as a table, joined first, leave the optimizer no scan.
DELETE r FROM JSON_TABLE(:task_ids_json, '$[*]' COLUMNS (task_id VARCHAR(40) PATH '$')) ids
  STRAIGHT_JOIN task_ready r ON r.task_id = ids.task_id

-- name: fairness_cursor_set
-- Written after the claim's count of the queue's row, so claims take the two rows in one order.
INSERT INTO fairness_cursors (tenant, environment, queue, type, after_key, updated_at)
VALUES (:tenant, :environment, :queue, :type, :after_key, :now)
ON DUPLICATE KEY UPDATE after_key = VALUES(after_key), updated_at = VALUES(updated_at)

-- name: task_results_set
-- The results of a batch of tasks, one statement: ids and results (as JSON text) as a JSON
-- table joined by id.
UPDATE JSON_TABLE(:rows_json, '$[*]' COLUMNS (
         id VARCHAR(40) PATH '$.id',
         result LONGTEXT PATH '$.result')) p
  STRAIGHT_JOIN tasks t ON t.id = p.id
   SET t.result = p.result
