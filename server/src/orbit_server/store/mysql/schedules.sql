-- name: schedule_lock
SELECT * FROM schedules WHERE tenant = :tenant AND environment = :environment AND name = :name
   FOR UPDATE

-- name: schedule_lock_by_id
SELECT * FROM schedules WHERE id = :id
   FOR UPDATE

-- name: schedules_due_lock
-- Due schedules, oldest due first; rows another node's pass holds are passed over, so that
-- passes on several nodes split the due work instead of queueing behind each other.
SELECT * FROM schedules FORCE INDEX (schedules_due)
 WHERE due_at <= :now ORDER BY due_at LIMIT :limit FOR UPDATE SKIP LOCKED

-- name: schedules_advance
-- One statement for a pass's schedules: their new positions as a JSON table joined by id.
UPDATE JSON_TABLE(:rows_json, '$[*]' COLUMNS (
         id VARCHAR(40) PATH '$.id',
         next_fire_at DATETIME(6) PATH '$.next_fire_at',
         due_at DATETIME(6) PATH '$.due_at',
         last_fire_at DATETIME(6) PATH '$.last_fire_at',
         last_task_id VARCHAR(40) PATH '$.last_task_id',
         queued_fire_at DATETIME(6) PATH '$.queued_fire_at',
         failure VARCHAR(500) PATH '$.failure')) p
  STRAIGHT_JOIN schedules s ON s.id = p.id
   SET s.next_fire_at = p.next_fire_at, s.due_at = p.due_at, s.last_fire_at = p.last_fire_at,
       s.last_task_id = p.last_task_id, s.queued_fire_at = p.queued_fire_at,
       s.failure = p.failure, s.updated_at = :now

-- name: backfills_running_lock
-- The index's order; naming the equal state in the ORDER BY made MariaDB sort.
SELECT * FROM schedule_backfills
 WHERE state = :backfill.running ORDER BY created_at LIMIT :limit FOR UPDATE SKIP LOCKED

-- name: fires_prune
-- In no particular order: every row it takes is past the retention (an ORDER BY would sort).
DELETE FROM schedule_fires WHERE recorded_at < :before AND outcome <> :fire.queued LIMIT :limit
