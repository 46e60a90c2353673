-- name: workflows_update_many
UPDATE workflows
   SET state = :state, output = :output, error = :error, context = :context,
       control_version = :control_version, updated_at = :updated_at, finished_at = :finished_at
 WHERE id = :id
