-- Weave (SPEC W1-W10, decision 0015): immutable definition versions, instances, one row per
-- step execution (keyed within its instance), signals; pending workflow result events by owner.

CREATE TABLE IF NOT EXISTS workflow_definitions (
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  digest TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (tenant, environment, name, version)
);

CREATE INDEX IF NOT EXISTS workflow_definitions_latest ON workflow_definitions (tenant, environment, name, created_at);

CREATE TABLE IF NOT EXISTS workflows (
  id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  definition TEXT NOT NULL,
  version TEXT NOT NULL,
  state TEXT NOT NULL,
  input TEXT NOT NULL,
  output TEXT NULL,
  error TEXT NULL,
  context TEXT NOT NULL,
  control_version INTEGER NOT NULL DEFAULT 0,
  gate_id TEXT NOT NULL,
  idempotency_key TEXT NULL,
  request_hash TEXT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  finished_at TEXT NULL,
  PRIMARY KEY (id)
);

CREATE UNIQUE INDEX IF NOT EXISTS workflows_idempotency ON workflows (tenant, environment, idempotency_key);
CREATE INDEX IF NOT EXISTS workflows_scope ON workflows (tenant, environment, id);
CREATE INDEX IF NOT EXISTS workflows_definition ON workflows (tenant, environment, definition, id);
CREATE INDEX IF NOT EXISTS workflows_state ON workflows (tenant, environment, state, id);
CREATE INDEX IF NOT EXISTS workflows_definition_state ON workflows (tenant, environment, definition, state, id);
CREATE INDEX IF NOT EXISTS workflows_finished ON workflows (finished_at);

CREATE TABLE IF NOT EXISTS workflow_steps (
  workflow_id TEXT NOT NULL,
  step_key TEXT NOT NULL,
  seq INTEGER NOT NULL,
  step TEXT NOT NULL,
  kind TEXT NOT NULL,
  state TEXT NOT NULL,
  parent_key TEXT NULL,
  branch TEXT NULL,
  item INTEGER NULL,
  round INTEGER NULL,
  task_id TEXT NULL,
  tries INTEGER NOT NULL DEFAULT 0,
  input TEXT NULL,
  output TEXT NULL,
  error TEXT NULL,
  progress TEXT NULL,
  items TEXT NULL,
  followed INTEGER NOT NULL DEFAULT 0,
  due_at TEXT NULL,
  wake_at TEXT NULL,
  started_at TEXT NOT NULL,
  ended_at TEXT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (workflow_id, step_key)
);

CREATE INDEX IF NOT EXISTS workflow_steps_order ON workflow_steps (workflow_id, seq);
CREATE INDEX IF NOT EXISTS workflow_steps_state ON workflow_steps (workflow_id, state);
CREATE INDEX IF NOT EXISTS workflow_steps_children ON workflow_steps (workflow_id, parent_key, item);
CREATE INDEX IF NOT EXISTS workflow_steps_wake ON workflow_steps (wake_at);
CREATE INDEX IF NOT EXISTS workflow_steps_unfollowed ON workflow_steps (workflow_id, followed);
CREATE INDEX IF NOT EXISTS workflow_steps_main ON workflow_steps (workflow_id, item, round, seq);

CREATE TABLE IF NOT EXISTS workflow_signals (
  id TEXT NOT NULL,
  workflow_id TEXT NOT NULL,
  name TEXT NOT NULL,
  payload TEXT NULL,
  idempotency_key TEXT NULL,
  state TEXT NOT NULL,
  step_key TEXT NULL,
  created_at TEXT NOT NULL,
  delivered_at TEXT NULL,
  PRIMARY KEY (id)
);

CREATE UNIQUE INDEX IF NOT EXISTS workflow_signals_once ON workflow_signals (workflow_id, idempotency_key);
CREATE INDEX IF NOT EXISTS workflow_signals_pending ON workflow_signals (workflow_id, state, name, id);

CREATE INDEX IF NOT EXISTS task_events_owned ON task_events (owner_kind, processed, id);
