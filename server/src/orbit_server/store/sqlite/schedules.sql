-- SQLite: BEGIN IMMEDIATE already holds the only write lock; no row locks to take or skip.

-- name: schedule_lock
SELECT * FROM schedules WHERE tenant = :tenant AND environment = :environment AND name = :name

-- name: schedule_lock_by_id
SELECT * FROM schedules WHERE id = :id

-- name: schedules_due_lock
SELECT * FROM schedules WHERE due_at <= :now ORDER BY due_at LIMIT :limit

-- name: schedules_advance
UPDATE schedules
   SET next_fire_at = :next_fire_at, due_at = :due_at, last_fire_at = :last_fire_at,
       last_task_id = :last_task_id, queued_fire_at = :queued_fire_at, failure = :failure,
       updated_at = :now
 WHERE id = :id

-- name: backfills_running_lock
SELECT * FROM schedule_backfills WHERE state = :backfill.running ORDER BY created_at LIMIT :limit

-- name: fires_prune
DELETE FROM schedule_fires WHERE rowid IN (
  SELECT rowid FROM schedule_fires WHERE recorded_at < :before AND outcome <> :fire.queued
   ORDER BY recorded_at LIMIT :limit)
