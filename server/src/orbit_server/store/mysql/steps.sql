-- name: workflow_steps_update_many
-- One statement for a batch's changed step executions: their new values as a JSON table
-- joined by key (JSON columns travel as their JSON text).
UPDATE JSON_TABLE(:rows_json, '$[*]' COLUMNS (
         workflow_id VARCHAR(40) PATH '$.workflow_id',
         step_key VARCHAR(160) PATH '$.step_key',
         state VARCHAR(16) PATH '$.state',
         task_id VARCHAR(40) PATH '$.task_id',
         tries INT PATH '$.tries',
         output LONGTEXT PATH '$.output',
         error LONGTEXT PATH '$.error',
         progress LONGTEXT PATH '$.progress',
         followed INT PATH '$.followed',
         due_at DATETIME(6) PATH '$.due_at',
         wake_at DATETIME(6) PATH '$.wake_at',
         ended_at DATETIME(6) PATH '$.ended_at',
         updated_at DATETIME(6) PATH '$.updated_at')) p
  STRAIGHT_JOIN workflow_steps s ON s.workflow_id = p.workflow_id AND s.step_key = p.step_key
   SET s.state = p.state, s.task_id = p.task_id, s.tries = p.tries, s.output = p.output,
       s.error = p.error, s.progress = p.progress, s.followed = p.followed,
       s.due_at = p.due_at, s.wake_at = p.wake_at, s.ended_at = p.ended_at,
       s.updated_at = p.updated_at

-- name: workflow_steps_delete_some
DELETE FROM workflow_steps WHERE workflow_id = :workflow_id LIMIT :limit
