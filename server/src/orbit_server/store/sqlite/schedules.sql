-- name: schedules_advance
UPDATE schedules
   SET next_fire_at = :next_fire_at, due_at = :due_at, last_fire_at = :last_fire_at,
       last_task_id = :last_task_id, queued_fire_at = :queued_fire_at, failure = :failure,
       updated_at = :now
 WHERE id = :id

-- name: fires_prune
DELETE FROM schedule_fires WHERE rowid IN (
  SELECT rowid FROM schedule_fires WHERE recorded_at < :before AND outcome <> :fire.queued
   ORDER BY recorded_at LIMIT :limit)
