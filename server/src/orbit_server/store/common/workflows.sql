-- Workflow instances (decision 0015); the same on every dialect but for their {{hints}}
-- (sql.py), unless a dialect's workflows.sql has its own text.

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

-- name: workflows_finished_before
-- Instances finished before the retention's limit (running ones have no finished_at).
SELECT id, gate_id FROM workflows WHERE finished_at < :before LIMIT :limit

-- name: workflow_delete
DELETE FROM workflows WHERE id = :id

-- name: workflow_lock
SELECT * FROM workflows WHERE id = :id {{for_update}}

-- name: workflows_lock_many
SELECT * FROM workflows WHERE id IN (:ids)
 ORDER BY id {{for_update}}
