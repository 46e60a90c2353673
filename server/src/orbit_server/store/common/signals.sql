-- Workflow signals (decision 0015); the same on every dialect.

-- name: workflow_signal_insert
INSERT INTO workflow_signals (id, workflow_id, name, payload, idempotency_key, state, step_key,
                              created_at, delivered_at)
VALUES (:id, :workflow_id, :name, :payload, :idempotency_key, :state, :step_key, :created_at,
        :delivered_at)

-- name: workflow_signal_get_by_key
SELECT * FROM workflow_signals
 WHERE workflow_id = :workflow_id AND idempotency_key = :idempotency_key

-- name: workflow_signal_oldest_pending
SELECT * FROM workflow_signals
 WHERE workflow_id = :workflow_id AND state = :signal.pending AND name = :name
 ORDER BY id
 LIMIT 1

-- name: workflow_signal_deliver
UPDATE workflow_signals SET state = :signal.delivered, step_key = :step_key, delivered_at = :now
 WHERE id = :id AND state = :signal.pending

-- name: workflow_signals_pending
SELECT * FROM workflow_signals
 WHERE workflow_id = :workflow_id AND state = :signal.pending
 ORDER BY name, id
 LIMIT :limit

-- name: workflow_signals_delete
DELETE FROM workflow_signals WHERE workflow_id = :workflow_id
