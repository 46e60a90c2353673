-- Worker sessions (decision 0005); the same on every dialect.

-- name: session_insert
INSERT INTO worker_sessions (id, tenant, environment, node, worker_id, key_id, capacity, handlers,
                             connected_at, last_seen_at, closed_at)
VALUES (:id, :tenant, :environment, :node, :worker_id, :key_id, :capacity, :handlers, :now, :now,
        NULL)

-- name: session_queue_insert
INSERT INTO worker_session_queues (tenant, environment, queue, session_id)
VALUES (:tenant, :environment, :queue, :session_id)

-- name: session_close
UPDATE worker_sessions SET closed_at = :now, last_seen_at = :now
 WHERE id = :id AND closed_at IS NULL

-- name: sessions_close_node
UPDATE worker_sessions SET closed_at = :now WHERE node = :node AND closed_at IS NULL

-- name: sessions_touch_node
UPDATE worker_sessions SET last_seen_at = :now WHERE node = :node AND closed_at IS NULL

-- name: session_get
SELECT id, tenant, environment, node, worker_id, key_id, capacity, handlers, connected_at,
       last_seen_at, closed_at
  FROM worker_sessions WHERE id = :id

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
