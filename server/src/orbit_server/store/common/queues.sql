-- Queues: a queue's row, its settings and its counters; the same on every dialect but for
-- their {{hints}} (sql.py).

-- name: queue_insert
INSERT INTO queues (tenant, environment, name, paused, concurrency_limit, key_concurrency,
                    max_pending, pending, active, created_at, updated_at)
VALUES (:tenant, :environment, :name, 0, NULL, 1, NULL, 0, 0, :now, :now)

-- name: queue_get
SELECT tenant, environment, name, paused, concurrency_limit, key_concurrency, max_pending,
       pending, active, created_at, updated_at
  FROM queues WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: queue_list
SELECT tenant, environment, name, paused, concurrency_limit, key_concurrency, max_pending,
       pending, active, created_at, updated_at
  FROM queues WHERE tenant = :tenant AND environment = :environment AND name > :after
 ORDER BY name LIMIT :limit

-- name: queue_update_settings
UPDATE queues SET paused = :paused, concurrency_limit = :concurrency_limit,
       key_concurrency = :key_concurrency, max_pending = :max_pending, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: queue_add_counts
UPDATE queues SET pending = pending + :pending, active = active + :active, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: queue_add_pending_within
-- A submit's count, only if the queue exists and stays within its waiting-tasks quota: one
-- statement in the common case; 0 rows changed sends the caller to the locking path.
UPDATE queues SET pending = pending + :pending, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name
   AND (max_pending IS NULL OR pending + :pending <= max_pending)

-- name: queue_take_active_within
-- A claim's count under the queue's concurrency limit, only if the limit still has room and
-- the queue is not paused: 0 rows changed means a claim that committed meanwhile took it.
UPDATE queues SET pending = pending - :n, active = active + :n, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name AND paused = 0
   AND (concurrency_limit IS NULL OR active + :n <= concurrency_limit)

-- name: queue_take_direct
-- A task leased as it is submitted counts as active — only if the queue is open, has no
-- concurrency limit and nothing of the task's type waits in its claim range (it overtakes
-- nobody); 0 rows changed sends the submit down the ordinary path.
UPDATE queues SET active = active + 1, updated_at = :now
 WHERE tenant = :tenant AND environment = :environment AND name = :name AND paused = 0
   AND concurrency_limit IS NULL
   AND NOT EXISTS (SELECT 1 FROM task_ready r
                    WHERE r.tenant = :tenant AND r.environment = :environment
                      AND r.queue = :name AND r.type = :type)

-- name: queue_lock
SELECT tenant, environment, name, paused, concurrency_limit, key_concurrency, max_pending,
       pending, active, created_at, updated_at
  FROM queues WHERE tenant = :tenant AND environment = :environment AND name = :name {{for_update}}

-- name: queues_with_work
-- The queues holding waiting or active tasks, with their counters: the metrics sampler's
-- queue depth, read from the counters the transactions keep rather than counted over tasks.
SELECT tenant, environment, name, pending, active FROM queues
 WHERE pending > 0 OR active > 0
 ORDER BY tenant, environment, name LIMIT :limit

-- name: queue_first_pending
-- A queue's first pending task in submission (id) order and when it became due: one seek in
-- tasks_queue_state, however many wait.
SELECT tenant, environment, queue, run_at FROM tasks
 WHERE tenant = :tenant AND environment = :environment AND queue = :queue
   AND state = :task.pending
 ORDER BY id LIMIT 1
