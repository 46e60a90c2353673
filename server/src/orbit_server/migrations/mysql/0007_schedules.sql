-- Schedules (SPEC P9): the schedules, their fire ledger (one row per slot: unique per schedule
-- and fire time, so that a slot fires at most once across nodes and restarts) and backfills.

CREATE TABLE IF NOT EXISTS schedules (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  name VARCHAR(128) NOT NULL,
  version INT NOT NULL,
  cron VARCHAR(200) NULL,
  timezone VARCHAR(64) NOT NULL,
  interval_ms BIGINT NULL,
  task MEDIUMTEXT NOT NULL,
  catchup VARCHAR(8) NOT NULL,
  catchup_max INT NOT NULL,
  overlap VARCHAR(10) NOT NULL,
  start_at DATETIME(6) NULL,
  end_at DATETIME(6) NULL,
  paused TINYINT NOT NULL DEFAULT 0,
  paused_reason VARCHAR(500) NULL,
  next_fire_at DATETIME(6) NULL,
  due_at DATETIME(6) NULL,
  last_fire_at DATETIME(6) NULL,
  last_task_id VARCHAR(40) NULL,
  queued_fire_at DATETIME(6) NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY schedules_name (tenant, environment, name),
  KEY schedules_due (due_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS schedule_fires (
  schedule_id VARCHAR(40) NOT NULL,
  fire_at DATETIME(6) NOT NULL,
  planned TINYINT NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  schedule VARCHAR(128) NOT NULL,
  outcome VARCHAR(10) NOT NULL,
  cause VARCHAR(10) NOT NULL,
  task_id VARCHAR(40) NULL,
  recorded_at DATETIME(6) NOT NULL,
  PRIMARY KEY (schedule_id, fire_at, planned),
  KEY schedule_fires_age (recorded_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS schedule_backfills (
  id VARCHAR(40) NOT NULL,
  schedule_id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  schedule VARCHAR(128) NOT NULL,
  from_at DATETIME(6) NOT NULL,
  to_at DATETIME(6) NOT NULL,
  cursor_at DATETIME(6) NULL,
  state VARCHAR(10) NOT NULL,
  fired INT NOT NULL DEFAULT 0,
  existing INT NOT NULL DEFAULT 0,
  created_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  KEY schedule_backfills_state (state, created_at),
  KEY schedule_backfills_schedule (schedule_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
