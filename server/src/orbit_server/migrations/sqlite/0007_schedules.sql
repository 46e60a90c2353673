-- Schedules (SPEC P9): the schedules, their fire ledger (one row per slot: unique per schedule
-- and fire time, so that a slot fires at most once across nodes and restarts) and backfills.

CREATE TABLE IF NOT EXISTS schedules (
  id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  cron TEXT NULL,
  timezone TEXT NOT NULL,
  interval_ms INTEGER NULL,
  task TEXT NOT NULL,
  catchup TEXT NOT NULL,
  catchup_max INTEGER NOT NULL,
  overlap TEXT NOT NULL,
  start_at TEXT NULL,
  end_at TEXT NULL,
  paused INTEGER NOT NULL DEFAULT 0,
  paused_reason TEXT NULL,
  next_fire_at TEXT NULL,
  due_at TEXT NULL,
  last_fire_at TEXT NULL,
  last_task_id TEXT NULL,
  queued_fire_at TEXT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (id)
);

CREATE UNIQUE INDEX IF NOT EXISTS schedules_name ON schedules (tenant, environment, name);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (due_at);

CREATE TABLE IF NOT EXISTS schedule_fires (
  schedule_id TEXT NOT NULL,
  fire_at TEXT NOT NULL,
  planned INTEGER NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  schedule TEXT NOT NULL,
  outcome TEXT NOT NULL,
  cause TEXT NOT NULL,
  task_id TEXT NULL,
  recorded_at TEXT NOT NULL,
  PRIMARY KEY (schedule_id, fire_at, planned)
);

CREATE INDEX IF NOT EXISTS schedule_fires_age ON schedule_fires (recorded_at);

CREATE TABLE IF NOT EXISTS schedule_backfills (
  id TEXT NOT NULL,
  schedule_id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  schedule TEXT NOT NULL,
  from_at TEXT NOT NULL,
  to_at TEXT NOT NULL,
  cursor_at TEXT NULL,
  state TEXT NOT NULL,
  fired INTEGER NOT NULL DEFAULT 0,
  existing INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  finished_at TEXT NULL,
  PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS schedule_backfills_state ON schedule_backfills (state, created_at);
CREATE INDEX IF NOT EXISTS schedule_backfills_schedule ON schedule_backfills (schedule_id, created_at);
