-- Why the scheduler could not fire a schedule at its last try, and why a backfill failed: a
-- schedule or backfill that cannot be planned fails alone, and its answer says why.

ALTER TABLE schedules ADD COLUMN failure TEXT NULL;

ALTER TABLE schedule_backfills ADD COLUMN failure TEXT NULL;
