-- Why the scheduler could not fire a schedule at its last try, and why a backfill failed: a
-- schedule or backfill that cannot be planned fails alone, and its answer says why.

ALTER TABLE schedules ADD COLUMN IF NOT EXISTS failure VARCHAR(500) NULL;

ALTER TABLE schedule_backfills ADD COLUMN IF NOT EXISTS failure VARCHAR(500) NULL;
