-- The whole current schema, equal to applying every numbered migration in order.
-- A test applies both ways and compares; change both together.

CREATE TABLE IF NOT EXISTS tenants (
  name TEXT NOT NULL PRIMARY KEY,
  created_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS environments (
  tenant TEXT NOT NULL,
  name TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (tenant, name)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT NOT NULL PRIMARY KEY,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  name TEXT NULL,
  roles TEXT NOT NULL,
  queues TEXT NULL,
  secret_hash TEXT NOT NULL,
  created_at TEXT NOT NULL,
  revoked_at TEXT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS api_keys_scope ON api_keys (tenant, environment, id);

CREATE TABLE IF NOT EXISTS audit_log (
  id TEXT NOT NULL PRIMARY KEY,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  target_kind TEXT NOT NULL,
  target_id TEXT NOT NULL,
  details TEXT NULL,
  request_id TEXT NULL,
  created_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS audit_log_scope ON audit_log (tenant, environment, id);

CREATE INDEX IF NOT EXISTS audit_log_target ON audit_log (tenant, environment, target_kind, target_id, id);

CREATE TABLE IF NOT EXISTS queues (
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  name TEXT NOT NULL,
  paused INTEGER NOT NULL DEFAULT 0,
  concurrency_limit INTEGER NULL,
  key_concurrency INTEGER NOT NULL DEFAULT 1,
  max_pending INTEGER NULL,
  pending INTEGER NOT NULL DEFAULT 0,
  active INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (tenant, environment, name)
);

CREATE TABLE IF NOT EXISTS tasks (
  id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  queue TEXT NOT NULL,
  type TEXT NOT NULL,
  state TEXT NOT NULL,
  params TEXT NOT NULL,
  priority INTEGER NOT NULL,
  run_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL,
  initial_backoff_ms INTEGER NOT NULL,
  backoff_multiplier REAL NOT NULL,
  max_backoff_ms INTEGER NOT NULL,
  timeout_ms INTEGER NOT NULL,
  idempotency_key TEXT NULL,
  request_hash TEXT NULL,
  concurrency_key TEXT NULL,
  fairness_key TEXT NULL,
  side_effect TEXT NOT NULL,
  handler_version TEXT NULL,
  labels TEXT NULL,
  owner_kind TEXT NULL,
  owner_id TEXT NULL,
  owner_step TEXT NULL,
  gate_id TEXT NULL,
  traceparent TEXT NULL,
  result TEXT NULL,
  error TEXT NULL,
  cancel_requested INTEGER NOT NULL DEFAULT 0,
  cancel_reason TEXT NULL,
  lease_epoch INTEGER NOT NULL DEFAULT 0,
  event_seq INTEGER NOT NULL DEFAULT 0,
  lease_token TEXT NULL,
  lease_expires_at TEXT NULL,
  deadline_at TEXT NULL,
  session_id TEXT NULL,
  node TEXT NULL,
  worker_id TEXT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  finished_at TEXT NULL,
  due_at TEXT GENERATED ALWAYS AS (CASE WHEN state = 'scheduled' THEN run_at END) VIRTUAL,
  held_by TEXT GENERATED ALWAYS AS (CASE WHEN state IN ('leased', 'running') THEN session_id END) VIRTUAL,
  pending_gate TEXT GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN gate_id END) VIRTUAL,
  pending_key TEXT GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN concurrency_key END) VIRTUAL,
  PRIMARY KEY (id)
);

CREATE UNIQUE INDEX IF NOT EXISTS tasks_idempotency ON tasks (tenant, environment, idempotency_key);

CREATE INDEX IF NOT EXISTS tasks_scope ON tasks (tenant, environment, id);

CREATE INDEX IF NOT EXISTS tasks_queue ON tasks (tenant, environment, queue, id);

CREATE INDEX IF NOT EXISTS tasks_queue_state ON tasks (tenant, environment, queue, state, id);

CREATE INDEX IF NOT EXISTS tasks_state ON tasks (tenant, environment, state, id);

CREATE INDEX IF NOT EXISTS tasks_due ON tasks (due_at);

CREATE INDEX IF NOT EXISTS tasks_lease ON tasks (state, lease_expires_at);

CREATE INDEX IF NOT EXISTS tasks_finished ON tasks (finished_at, tenant, environment);

CREATE INDEX IF NOT EXISTS tasks_owner ON tasks (owner_kind, owner_id);

CREATE INDEX IF NOT EXISTS tasks_session ON tasks (held_by);

CREATE INDEX IF NOT EXISTS tasks_gate ON tasks (pending_gate);

CREATE INDEX IF NOT EXISTS tasks_key ON tasks (tenant, environment, queue, pending_key, priority DESC, run_at, id, pending_gate);


CREATE TABLE IF NOT EXISTS task_ready (
  task_id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  queue TEXT NOT NULL,
  type TEXT NOT NULL,
  priority INTEGER NOT NULL,
  run_at TEXT NOT NULL,
  fairness_key TEXT NOT NULL DEFAULT '',
  concurrency_key TEXT NULL,
  handler_version TEXT NULL,
  gate_id TEXT NULL,
  PRIMARY KEY (task_id)
);

CREATE INDEX IF NOT EXISTS task_ready_claim ON task_ready (tenant, environment, queue, type, priority DESC, run_at, task_id, handler_version);

CREATE INDEX IF NOT EXISTS task_ready_fair ON task_ready (tenant, environment, queue, type, fairness_key, priority DESC, run_at, task_id, handler_version);

CREATE INDEX IF NOT EXISTS task_ready_key ON task_ready (tenant, environment, queue, concurrency_key);

CREATE INDEX IF NOT EXISTS task_ready_gate ON task_ready (gate_id);


CREATE TABLE IF NOT EXISTS task_attempts (
  task_id TEXT NOT NULL,
  number INTEGER NOT NULL,
  state TEXT NOT NULL,
  cause TEXT NULL,
  worker_id TEXT NULL,
  session_id TEXT NULL,
  node TEXT NULL,
  leased_at TEXT NOT NULL,
  started_at TEXT NULL,
  ended_at TEXT NULL,
  lease_expires_at TEXT NULL,
  error TEXT NULL,
  progress TEXT NULL,
  progress_at TEXT NULL,
  PRIMARY KEY (task_id, number)
);

CREATE TABLE IF NOT EXISTS task_events (
  id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  task_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  state TEXT NOT NULL,
  owner_kind TEXT NULL,
  owner_id TEXT NULL,
  processed INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  processed_at TEXT NULL,
  PRIMARY KEY (id)
);

CREATE UNIQUE INDEX IF NOT EXISTS task_events_once ON task_events (task_id, seq);

CREATE INDEX IF NOT EXISTS task_events_pending ON task_events (processed, id);


CREATE TABLE IF NOT EXISTS gates (
  id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  open INTEGER NOT NULL DEFAULT 1,
  version INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS gates_scope ON gates (tenant, environment, id);


CREATE TABLE IF NOT EXISTS key_permits (
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  queue TEXT NOT NULL,
  concurrency_key TEXT NOT NULL,
  active INTEGER NOT NULL DEFAULT 0,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (tenant, environment, queue, concurrency_key)
);

CREATE INDEX IF NOT EXISTS key_permits_idle ON key_permits (active, updated_at);

-- Keys a submit admits after its commit (decision 0012).
CREATE TABLE IF NOT EXISTS key_admissions (
  id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  queue TEXT NOT NULL,
  concurrency_keys TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS key_admissions_age ON key_admissions (created_at);


CREATE TABLE IF NOT EXISTS worker_sessions (
  id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  node TEXT NOT NULL,
  worker_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  capacity INTEGER NOT NULL,
  handlers TEXT NOT NULL,
  connected_at TEXT NOT NULL,
  last_seen_at TEXT NOT NULL,
  closed_at TEXT NULL,
  sdk TEXT NULL,
  protocol INTEGER NULL,
  end_reason TEXT NULL,
  PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS worker_sessions_node ON worker_sessions (node, closed_at);

CREATE INDEX IF NOT EXISTS worker_sessions_closed ON worker_sessions (closed_at);

CREATE INDEX IF NOT EXISTS worker_sessions_scope ON worker_sessions (tenant, environment, id);

CREATE TABLE IF NOT EXISTS worker_session_queues (
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  queue TEXT NOT NULL,
  session_id TEXT NOT NULL,
  PRIMARY KEY (tenant, environment, queue, session_id)
);

CREATE INDEX IF NOT EXISTS worker_session_queues_session ON worker_session_queues (session_id);

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
  failure TEXT NULL,
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
  failure TEXT NULL,
  PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS schedule_backfills_state ON schedule_backfills (state, created_at);
CREATE INDEX IF NOT EXISTS schedule_backfills_schedule ON schedule_backfills (schedule_id, created_at);

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

-- Fairness rotation per queue and type (SPEC P7).
CREATE TABLE IF NOT EXISTS fairness_cursors (
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  queue TEXT NOT NULL,
  type TEXT NOT NULL,
  after_key TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (tenant, environment, queue, type)
);

-- Bulk operations (decision 0025).
CREATE TABLE IF NOT EXISTS bulk_operations (
  id TEXT NOT NULL,
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  kind TEXT NOT NULL,
  action TEXT NOT NULL,
  filter TEXT NOT NULL,
  params TEXT NOT NULL,
  state TEXT NOT NULL,
  matched INTEGER NOT NULL,
  done INTEGER NOT NULL DEFAULT 0,
  skipped INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  skipped_reasons TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  finished_at TEXT NULL,
  PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS bulk_operations_scope ON bulk_operations (tenant, environment, id);
CREATE INDEX IF NOT EXISTS bulk_operations_state ON bulk_operations (state, id);

CREATE TABLE IF NOT EXISTS bulk_operation_items (
  operation_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  target_id TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NULL,
  PRIMARY KEY (operation_id, seq)
);

CREATE INDEX IF NOT EXISTS bulk_operation_items_state ON bulk_operation_items (operation_id, state, seq);

-- Duties one node at a time performs for the cluster (the metrics sampler).
CREATE TABLE IF NOT EXISTS node_duties (
  name TEXT NOT NULL,
  holder TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  PRIMARY KEY (name)
);
