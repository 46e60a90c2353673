-- The claim range: task_ready rows, a claim's reads of them and the fairness cursors; the
-- same on every dialect but for their {{hints}} (sql.py), unless a dialect's claim_range.sql
-- has its own text.

-- name: ready_head_first
-- The first type of a queue's claim range after :after in index order, its highest priority
-- and that priority's first run time: one seek.
SELECT type, priority, run_at FROM task_ready {{force_index:task_ready_claim}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type > :after
 ORDER BY type, priority DESC, run_at LIMIT 1

-- name: ready_head_next
-- A type's next priority below :priority and its first run time: one seek. Stepping with this
-- and ready_head_first reads one index entry per type and priority (a loose index scan, which
-- MariaDB does not do itself on task_ready_claim: its priority is descending) where GROUP BY
-- reads every row.
SELECT type, priority, run_at FROM task_ready {{force_index:task_ready_claim}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND priority < :priority
 ORDER BY priority DESC, run_at LIMIT 1

-- name: ready_count_upto
-- Claimable tasks of a queue's type, counted up to :upto (a bounded range of the claim index);
-- with :any_version = 0, only those that name a handler version not in :versions.
SELECT COUNT(*) AS n FROM (
  SELECT 1 AS one FROM task_ready {{force_index:task_ready_claim}}
   WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
     AND (:any_version = 1 OR (handler_version IS NOT NULL AND handler_version NOT IN (:versions)))
   LIMIT :upto) counted

-- name: ready_groups
-- Claimable work of a scope by queue, type and handler version: what connected workers must be
-- able to take (GET /v1/queues "unserved"). Reads the claim index, not the task rows.
SELECT queue, type, handler_version, COUNT(*) AS n, MIN(run_at) AS oldest_at
  FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND (:any_queue = 1 OR queue = :queue)
 GROUP BY queue, type, handler_version
 LIMIT :limit

-- name: task_ready_insert
INSERT INTO task_ready (task_id, tenant, environment, queue, type, priority, run_at, fairness_key,
                        concurrency_key, handler_version, gate_id)
VALUES (:task_id, :tenant, :environment, :queue, :type, :priority, :run_at, :fairness_key,
        :concurrency_key, :handler_version, :gate_id)

-- name: task_ready_delete
DELETE FROM task_ready WHERE task_id = :task_id

-- name: ready_delete_for_gate
DELETE FROM task_ready WHERE gate_id = :gate_id

-- name: ready_insert_for_gate
INSERT INTO task_ready (task_id, tenant, environment, queue, type, priority, run_at, fairness_key,
                        concurrency_key, handler_version, gate_id)
SELECT id, tenant, environment, queue, type, priority, run_at, COALESCE(fairness_key, ''),
       concurrency_key, handler_version, gate_id
  FROM tasks WHERE pending_gate = :gate_id AND state = :task.pending AND concurrency_key IS NULL

-- name: ready_of_keys
SELECT task_id FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)

-- name: ready_insert_tasks
INSERT INTO task_ready (task_id, tenant, environment, queue, type, priority, run_at, fairness_key,
                        concurrency_key, handler_version, gate_id)
SELECT id, tenant, environment, queue, type, priority, run_at, COALESCE(fairness_key, ''),
       concurrency_key, handler_version, gate_id
  FROM tasks WHERE id IN (:task_ids) AND state = :task.pending

-- name: ready_exists
SELECT task_id FROM task_ready
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue LIMIT 1

-- name: claim_outlook
-- The queue, and whether a type has claimable work and over how many fairness keys (first =
-- last: one), and where its fairness rotation stands: three index seeks a type, every type of
-- a claim in one statement (a union).
SELECT q.tenant, q.environment, q.name, q.paused, q.concurrency_limit, q.key_concurrency,
       q.max_pending, q.pending, q.active, q.created_at, q.updated_at, :type AS type,
       (SELECT fairness_key FROM task_ready {{force_index:task_ready_fair}}
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
         ORDER BY fairness_key LIMIT 1) AS first_key,
       (SELECT fairness_key FROM task_ready {{force_index:task_ready_fair}}
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
         ORDER BY fairness_key DESC LIMIT 1) AS last_key,
       (SELECT after_key FROM fairness_cursors
         WHERE tenant = :tenant AND environment = :environment AND queue = :queue
           AND type = :type) AS fair_after
  FROM queues q WHERE q.tenant = :tenant AND q.environment = :environment AND q.name = :queue

-- name: ready_first_fairness_key
SELECT fairness_key FROM task_ready {{force_index:task_ready_fair}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
 ORDER BY fairness_key LIMIT 1

-- name: ready_next_fairness_key
-- One index seek per key: DISTINCT would read every ready row of the queue.
SELECT fairness_key FROM task_ready {{force_index:task_ready_fair}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND fairness_key > :after
 ORDER BY fairness_key LIMIT 1

-- name: ready_candidates
-- FORCE INDEX: the claim order must come from the index whatever the statistics say
-- (a sort would hide free rows from concurrent SKIP LOCKED claimers).
SELECT task_id, priority, run_at, fairness_key, concurrency_key, handler_version, gate_id
  FROM task_ready {{force_index:task_ready_claim}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND (:any_version = 1 OR handler_version IS NULL OR handler_version IN (:versions))
 ORDER BY priority DESC, run_at, task_id
 LIMIT :limit {{for_update_skip_locked}}

-- name: ready_candidates_of_key
SELECT task_id, priority, run_at, fairness_key, concurrency_key, handler_version, gate_id
  FROM task_ready {{force_index:task_ready_fair}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue AND type = :type
   AND fairness_key = :fairness_key
   AND (:any_version = 1 OR handler_version IS NULL OR handler_version IN (:versions))
 ORDER BY priority DESC, run_at, task_id
 LIMIT :limit {{for_update_skip_locked}}
