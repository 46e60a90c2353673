-- Weave (SPEC W1-W10, decision 0015): immutable definition versions, instances, one row per
-- step execution (keyed within its instance), signals; pending workflow result events by owner.

CREATE TABLE IF NOT EXISTS workflow_definitions (
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  name VARCHAR(128) NOT NULL,
  version VARCHAR(64) NOT NULL,
  digest CHAR(64) NOT NULL,
  body LONGTEXT NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tenant, environment, name, version),
  KEY workflow_definitions_latest (tenant, environment, name, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS workflows (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  definition VARCHAR(128) NOT NULL,
  version VARCHAR(64) NOT NULL,
  state VARCHAR(16) NOT NULL,
  input LONGTEXT NOT NULL,
  output LONGTEXT NULL,
  error TEXT NULL,
  context LONGTEXT NOT NULL,
  control_version INT NOT NULL DEFAULT 0,
  gate_id VARCHAR(40) NOT NULL,
  idempotency_key VARCHAR(200) NULL,
  request_hash CHAR(64) NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY workflows_idempotency (tenant, environment, idempotency_key),
  KEY workflows_scope (tenant, environment, id),
  KEY workflows_definition (tenant, environment, definition, id),
  KEY workflows_state (tenant, environment, state, id),
  KEY workflows_definition_state (tenant, environment, definition, state, id),
  KEY workflows_finished (finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS workflow_steps (
  workflow_id VARCHAR(40) NOT NULL,
  step_key VARCHAR(160) NOT NULL,
  seq INT NOT NULL,
  step VARCHAR(64) NOT NULL,
  kind VARCHAR(16) NOT NULL,
  state VARCHAR(16) NOT NULL,
  parent_key VARCHAR(160) NULL,
  branch VARCHAR(64) NULL,
  item INT NULL,
  round INT NULL,
  task_id VARCHAR(40) NULL,
  tries INT NOT NULL DEFAULT 0,
  input LONGTEXT NULL,
  output LONGTEXT NULL,
  error TEXT NULL,
  progress LONGTEXT NULL,
  items LONGTEXT NULL,
  followed TINYINT NOT NULL DEFAULT 0,
  due_at DATETIME(6) NULL,
  wake_at DATETIME(6) NULL,
  started_at DATETIME(6) NOT NULL,
  ended_at DATETIME(6) NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (workflow_id, step_key),
  KEY workflow_steps_order (workflow_id, seq),
  KEY workflow_steps_state (workflow_id, state),
  KEY workflow_steps_children (workflow_id, parent_key, item),
  KEY workflow_steps_wake (wake_at),
  KEY workflow_steps_unfollowed (workflow_id, followed),
  KEY workflow_steps_main (workflow_id, item, round, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS workflow_signals (
  id VARCHAR(40) NOT NULL,
  workflow_id VARCHAR(40) NOT NULL,
  name VARCHAR(128) NOT NULL,
  payload LONGTEXT NULL,
  idempotency_key VARCHAR(200) NULL,
  state VARCHAR(16) NOT NULL,
  step_key VARCHAR(160) NULL,
  created_at DATETIME(6) NOT NULL,
  delivered_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY workflow_signals_once (workflow_id, idempotency_key),
  KEY workflow_signals_pending (workflow_id, state, name, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE INDEX task_events_owned ON task_events (owner_kind, processed, id);
