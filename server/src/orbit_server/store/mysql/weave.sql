-- name: workflow_lock
SELECT * FROM workflows WHERE id = :id
   FOR UPDATE
