-- Schedules, their fire ledger and backfills (SPEC P9); the same on every dialect unless a
-- dialect's file has its own text.

-- name: schedule_insert
INSERT INTO schedules (id, tenant, environment, name, version, cron, timezone, interval_ms, task,
                       catchup, catchup_max, overlap, start_at, end_at, paused, paused_reason,
                       next_fire_at, due_at, last_fire_at, last_task_id, queued_fire_at,
                       created_at, updated_at, failure)
VALUES (:id, :tenant, :environment, :name, :version, :cron, :timezone, :interval_ms, :task,
        :catchup, :catchup_max, :overlap, :start_at, :end_at, :paused, :paused_reason,
        :next_fire_at, :due_at, :last_fire_at, :last_task_id, :queued_fire_at,
        :created_at, :updated_at, :failure)

-- name: schedule_get
SELECT * FROM schedules WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: schedules_list
SELECT * FROM schedules
 WHERE tenant = :tenant AND environment = :environment AND name > :after
 ORDER BY name
 LIMIT :limit

-- name: schedule_update
UPDATE schedules
   SET version = :version, cron = :cron, timezone = :timezone, interval_ms = :interval_ms,
       task = :task, catchup = :catchup, catchup_max = :catchup_max, overlap = :overlap,
       start_at = :start_at, end_at = :end_at, paused = :paused, paused_reason = :paused_reason,
       next_fire_at = :next_fire_at, due_at = :due_at, last_fire_at = :last_fire_at,
       last_task_id = :last_task_id, queued_fire_at = :queued_fire_at, updated_at = :updated_at,
       failure = :failure
 WHERE id = :id

-- name: schedule_delete
DELETE FROM schedules WHERE id = :id

-- name: schedules_due_times
SELECT due_at FROM schedules WHERE due_at IS NOT NULL ORDER BY due_at LIMIT :limit

-- name: fire_insert
INSERT INTO schedule_fires (schedule_id, fire_at, planned, tenant, environment, schedule, outcome,
                            cause, task_id, recorded_at)
VALUES (:schedule_id, :fire_at, :planned, :tenant, :environment, :schedule, :outcome, :cause,
        :task_id, :recorded_at)

-- name: fire_update
UPDATE schedule_fires SET outcome = :outcome, cause = :cause, task_id = :task_id,
                          recorded_at = :recorded_at
 WHERE schedule_id = :schedule_id AND fire_at = :fire_at AND planned = :planned

-- name: fires_newest
-- The key's order backwards; naming the equal schedule_id in the ORDER BY made MariaDB sort.
SELECT * FROM schedule_fires
 WHERE schedule_id = :schedule_id AND fire_at < :before
 ORDER BY fire_at DESC, planned DESC
 LIMIT :limit

-- name: fires_last_planned
SELECT MAX(fire_at) AS fire_at FROM schedule_fires
 WHERE schedule_id = :schedule_id AND planned = 1

-- name: fires_between
SELECT * FROM schedule_fires
 WHERE schedule_id = :schedule_id AND planned = 1 AND fire_at >= :first AND fire_at <= :last

-- name: backfill_insert
INSERT INTO schedule_backfills (id, schedule_id, tenant, environment, schedule, from_at, to_at,
                                cursor_at, state, fired, existing, created_at, finished_at,
                                failure)
VALUES (:id, :schedule_id, :tenant, :environment, :schedule, :from_at, :to_at, :cursor_at,
        :state, :fired, :existing, :created_at, :finished_at, :failure)

-- name: backfill_get
SELECT * FROM schedule_backfills WHERE id = :id AND schedule_id = :schedule_id

-- name: backfills_of
SELECT * FROM schedule_backfills WHERE schedule_id = :schedule_id
 ORDER BY created_at DESC, id DESC LIMIT :limit

-- name: backfill_update
UPDATE schedule_backfills SET cursor_at = :cursor_at, state = :state, fired = :fired,
                              existing = :existing, finished_at = :finished_at,
                              failure = :failure
 WHERE id = :id

-- name: schedule_lock
SELECT * FROM schedules WHERE tenant = :tenant AND environment = :environment AND name = :name
   {{for_update}}

-- name: schedule_lock_by_id
SELECT * FROM schedules WHERE id = :id {{for_update}}

-- name: schedules_due_lock
-- Due schedules, oldest due first; rows another node's pass holds are passed over, so that
-- passes on several nodes split the due work instead of queueing behind each other.
SELECT * FROM schedules {{force_index:schedules_due}}
 WHERE due_at <= :now ORDER BY due_at LIMIT :limit {{for_update_skip_locked}}

-- name: backfills_running_lock
-- The index's order; naming the equal state in the ORDER BY made MariaDB sort.
SELECT * FROM schedule_backfills
 WHERE state = :backfill.running ORDER BY created_at LIMIT :limit {{for_update_skip_locked}}
