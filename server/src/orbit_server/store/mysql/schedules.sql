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

-- name: fires_prune
-- In no particular order: every row it takes is past the retention (an ORDER BY would sort).
DELETE FROM schedule_fires WHERE recorded_at < :before AND outcome <> :fire.queued LIMIT :limit
