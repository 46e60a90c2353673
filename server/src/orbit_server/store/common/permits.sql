-- Key permits, and the admission reads that start from them; the same on every dialect but
-- for their {{hints}} (sql.py), unless a dialect's permits.sql has its own text.

-- name: key_permits_add_many
UPDATE key_permits SET active = active + :delta, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)

-- name: key_permit_get
SELECT active FROM key_permits
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key = :concurrency_key

-- name: key_permits_existing
SELECT concurrency_key FROM key_permits
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)

-- name: key_permits_lock
-- By primary key whatever the table's size (a scan would wait for other keys' rows).
SELECT concurrency_key, active FROM key_permits {{force_index:PRIMARY}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)
 ORDER BY concurrency_key {{for_update}}

-- name: key_head_pending
-- The first pending tasks of a concurrency key in claim order, behind an open gate or none.
SELECT t.id, t.pending_key AS concurrency_key FROM tasks t {{indexed_by:tasks_key}}
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
       (SELECT t.id FROM tasks t {{indexed_by:tasks_key}}
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
       (SELECT t.id FROM tasks t {{indexed_by:tasks_key}}
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

-- name: key_permits_lock_free
-- Rows another transaction holds are skipped, not waited for (SQLite has one writer: none are).
SELECT concurrency_key, active FROM key_permits {{force_index:PRIMARY}}
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND concurrency_key IN (:keys)
 ORDER BY concurrency_key {{for_update_skip_locked}}
