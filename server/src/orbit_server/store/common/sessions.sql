-- Worker sessions (decision 0005); the same on every dialect.

-- name: session_insert
INSERT INTO worker_sessions (id, tenant, environment, node, worker_id, key_id, capacity, handlers,
                             connected_at, last_seen_at, closed_at, sdk, protocol, end_reason)
VALUES (:id, :tenant, :environment, :node, :worker_id, :key_id, :capacity, :handlers, :now, :now,
        NULL, :sdk, :protocol, NULL)

-- name: session_queue_insert
INSERT INTO worker_session_queues (tenant, environment, queue, session_id)
VALUES (:tenant, :environment, :queue, :session_id)

-- name: session_close
UPDATE worker_sessions SET closed_at = :now, last_seen_at = :now, end_reason = :reason
 WHERE id = :id AND closed_at IS NULL

-- name: sessions_close_node
UPDATE worker_sessions SET closed_at = :now, end_reason = 'lost'
 WHERE node = :node AND closed_at IS NULL

-- name: sessions_replace
UPDATE worker_sessions SET closed_at = :now, end_reason = 'replaced'
 WHERE tenant = :tenant AND environment = :environment AND worker_id = :worker_id
   AND closed_at IS NULL AND last_seen_at < :seen_before

-- name: sessions_touch_node
UPDATE worker_sessions SET last_seen_at = :now WHERE node = :node AND closed_at IS NULL

-- name: session_get
SELECT id, tenant, environment, node, worker_id, key_id, capacity, handlers, connected_at,
       last_seen_at, closed_at, sdk, protocol, end_reason
  FROM worker_sessions WHERE id = :id

-- name: sessions_list
-- Newest first: open sessions and those that ended after :ended_after, optionally of one queue.
SELECT id, tenant, environment, node, worker_id, key_id, capacity, handlers, connected_at,
       last_seen_at, closed_at, sdk, protocol, end_reason
  FROM worker_sessions s
 WHERE tenant = :tenant AND environment = :environment
   AND (closed_at IS NULL OR closed_at >= :ended_after)
   AND (:any_queue = 1 OR EXISTS (SELECT 1 FROM worker_session_queues q
                                   WHERE q.tenant = :tenant AND q.environment = :environment
                                     AND q.queue = :queue AND q.session_id = s.id))
   AND id < :before
 ORDER BY id DESC
 LIMIT :limit

-- name: sessions_held_counts
SELECT held_by AS session_id, COUNT(*) AS n FROM tasks WHERE held_by IN (:ids) GROUP BY held_by

-- name: session_held_attempts
SELECT t.id AS task_id, t.queue AS queue, t.type AS type, t.state AS state,
       t.lease_epoch AS attempt, t.lease_expires_at AS lease_expires_at, a.leased_at AS leased_at,
       a.started_at AS started_at
  FROM tasks t LEFT JOIN task_attempts a ON a.task_id = t.id AND a.number = t.lease_epoch
 WHERE t.held_by = :id
 ORDER BY t.id
 LIMIT :limit

-- name: sessions_open_handlers
-- Open sessions of a scope that their nodes still refresh: what connected workers serve.
SELECT handlers FROM worker_sessions
 WHERE tenant = :tenant AND environment = :environment AND closed_at IS NULL
   AND last_seen_at >= :seen_after

-- name: sessions_per_queue
SELECT q.queue AS queue, COUNT(*) AS n
  FROM worker_session_queues q JOIN worker_sessions s ON s.id = q.session_id
 WHERE q.tenant = :tenant AND q.environment = :environment
   AND s.closed_at IS NULL AND s.last_seen_at >= :seen_after
 GROUP BY q.queue

-- name: sessions_closed_before
SELECT id FROM worker_sessions WHERE closed_at IS NOT NULL AND closed_at < :before LIMIT :limit

-- name: session_queues_delete
DELETE FROM worker_session_queues WHERE session_id IN (:ids)

-- name: sessions_delete
DELETE FROM worker_sessions WHERE id IN (:ids)
