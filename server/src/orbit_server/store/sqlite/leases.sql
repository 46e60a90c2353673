-- SQLite runs every write unit under BEGIN IMMEDIATE: row locks are not needed.

-- name: ready_delete_many
DELETE FROM task_ready WHERE task_id IN (:task_ids)

-- name: claim_outlook
-- The queue, and whether a type has claimable work and over how many fairness keys (first =
-- last: one), and where its fairness rotation stands: three index seeks a type, every type of
-- a claim in one statement (a union).
SELECT q.tenant, q.environment, q.name, q.paused, q.concurrency_limit, q.key_concurrency,
       q.max_pending, q.pending, q.active, q.created_at, q.updated_at, :type AS type,
       (SELECT fairness_key FROM task_ready
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
         ORDER BY fairness_key LIMIT 1) AS first_key,
       (SELECT fairness_key FROM task_ready
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
         ORDER BY fairness_key DESC LIMIT 1) AS last_key,
       (SELECT after_key FROM fairness_cursors
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue
           AND type = :type) AS fair_after
  FROM queues q WHERE q.tenant = :tenant AND q.environment = :environment AND q.name = :queue

-- name: ready_first_fairness_key
SELECT fairness_key FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
 ORDER BY fairness_key LIMIT 1

-- name: ready_next_fairness_key
-- One index seek per key: DISTINCT would read every ready row of the queue.
SELECT fairness_key FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND fairness_key > :after
 ORDER BY fairness_key LIMIT 1

-- name: ready_candidates
SELECT task_id, priority, run_at, fairness_key, concurrency_key, handler_version, gate_id FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND (:any_version = 1 OR handler_version IS NULL OR handler_version IN (:versions))
 ORDER BY priority DESC, run_at, task_id
 LIMIT :limit

-- name: ready_candidates_of_key
SELECT task_id, priority, run_at, fairness_key, concurrency_key, handler_version, gate_id FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND fairness_key = :fairness_key
   AND (:any_version = 1 OR handler_version IS NULL OR handler_version IN (:versions))
 ORDER BY priority DESC, run_at, task_id
 LIMIT :limit

-- name: gates_read_shared
SELECT id, open, version FROM gates WHERE id IN (:gate_ids)

-- name: key_permits_lock
SELECT concurrency_key, active FROM key_permits
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)
 ORDER BY concurrency_key

-- name: task_lock_fenced
SELECT * FROM tasks
 WHERE id = :id AND lease_epoch = :epoch AND lease_token = :token AND session_id = :session_id

-- name: leases_expired
SELECT id, tenant, environment, queue FROM tasks
 WHERE state IN (:task.leased, :task.running) AND lease_expires_at <= :now
 LIMIT :limit

-- name: scheduled_due
SELECT * FROM tasks WHERE due_at <= :now AND state = :task.scheduled
 ORDER BY due_at LIMIT :limit

-- name: gate_lock
SELECT id, tenant, environment, open, version, created_at, updated_at FROM gates
 WHERE id = :id AND tenant = :tenant AND environment = :environment

-- name: key_head_pending
-- The first pending tasks of a concurrency key in claim order, behind an open gate or none.
SELECT t.id, t.pending_key AS concurrency_key FROM tasks t INDEXED BY tasks_key
  LEFT JOIN gates g ON g.id = t.pending_gate
 WHERE t.tenant = :tenant AND t.environment = :environment AND t.queue = :queue
   AND t.pending_key = :concurrency_key AND (t.pending_gate IS NULL OR g.open = 1)
 ORDER BY t.priority DESC, t.run_at, t.id
 LIMIT :limit

-- name: keys_first_pending
-- The first pending task of each key in claim order (open gate or none), NULL for a key with
-- none: the key's permit row drives one correlated index seek per key, all keys in one
-- statement, planned once (a union plans every part).
SELECT k.concurrency_key,
       (SELECT t.id FROM tasks t INDEXED BY tasks_key
          LEFT JOIN gates g ON g.id = t.pending_gate
         WHERE t.tenant = k.tenant AND t.environment = k.environment AND t.queue = k.queue
           AND t.pending_key = k.concurrency_key AND (t.pending_gate IS NULL OR g.open = 1)
         ORDER BY t.priority DESC, t.run_at, t.id
         LIMIT 1) AS id
  FROM key_permits k
 WHERE k.tenant = :tenant AND k.environment = :environment AND k.queue = :queue
   AND k.concurrency_key IN (:keys)

-- name: keys_admission
-- Per key, after its permits came back: its free permits, its first pending task in claim
-- order (open gate or none; NULL for none) and its rows in the claim range (how many, and the
-- first), all in one statement driven by the permit rows the caller has locked.
SELECT k.concurrency_key, q.key_concurrency - k.active AS free,
       (SELECT t.id FROM tasks t INDEXED BY tasks_key
          LEFT JOIN gates g ON g.id = t.pending_gate
         WHERE t.tenant = k.tenant AND t.environment = k.environment AND t.queue = k.queue
           AND t.pending_key = k.concurrency_key AND (t.pending_gate IS NULL OR g.open = 1)
         ORDER BY t.priority DESC, t.run_at, t.id
         LIMIT 1) AS head,
       (SELECT COUNT(*) FROM task_ready r
         WHERE r.tenant = k.tenant AND r.environment = k.environment AND r.queue = k.queue
           AND r.concurrency_key = k.concurrency_key) AS admitted,
       (SELECT MIN(r.task_id) FROM task_ready r
         WHERE r.tenant = k.tenant AND r.environment = k.environment AND r.queue = k.queue
           AND r.concurrency_key = k.concurrency_key) AS admitted_first
  FROM key_permits k
  JOIN queues q ON q.tenant = k.tenant AND q.environment = k.environment AND q.name = k.queue
 WHERE k.tenant = :tenant AND k.environment = :environment AND k.queue = :queue
   AND k.concurrency_key IN (:keys)

-- name: tasks_lock_many
SELECT id, tenant, environment, queue, state, lease_epoch, lease_token, session_id,
       lease_expires_at, deadline_at, cancel_requested, gate_id, timeout_ms, concurrency_key, owner_kind, owner_id,
       event_seq, side_effect
  FROM tasks WHERE id IN (:task_ids) ORDER BY id

-- name: tasks_lock_many_in
-- Only the rows of one tenant and environment (others are not kept locked).
SELECT id, tenant, environment, queue, state, lease_epoch, lease_token, session_id,
       lease_expires_at, deadline_at, cancel_requested, gate_id, timeout_ms, concurrency_key, owner_kind, owner_id,
       event_seq, side_effect
  FROM tasks WHERE id IN (:task_ids)
   AND tenant = :tenant AND environment = :environment ORDER BY id

-- name: key_permits_lock_free
-- One writer at a time: no row is held by another transaction.
SELECT concurrency_key, active FROM key_permits
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)
 ORDER BY concurrency_key

-- name: fairness_cursor_set
-- Written after the claim's count of the queue's row, so claims take the two rows in one order.
INSERT INTO fairness_cursors (tenant, environment, queue, type, after_key, updated_at)
VALUES (:tenant, :environment, :queue, :type, :after_key, :now)
ON CONFLICT (tenant, environment, queue, type)
DO UPDATE SET after_key = excluded.after_key, updated_at = excluded.updated_at
