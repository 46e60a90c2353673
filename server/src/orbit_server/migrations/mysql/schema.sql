-- The whole current schema, equal to applying every numbered migration in order.
-- A test applies both ways and compares; change both together.

CREATE TABLE IF NOT EXISTS tenants (
  name VARCHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS environments (
  tenant VARCHAR(64) NOT NULL,
  name VARCHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tenant, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS api_keys (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  name VARCHAR(200) NULL,
  roles VARCHAR(200) NOT NULL,
  queues TEXT NULL,
  secret_hash CHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  revoked_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  KEY api_keys_scope (tenant, environment, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS audit_log (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  actor VARCHAR(100) NOT NULL,
  action VARCHAR(64) NOT NULL,
  target_kind VARCHAR(32) NOT NULL,
  target_id VARCHAR(200) NOT NULL,
  details TEXT NULL,
  request_id VARCHAR(64) NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  KEY audit_log_scope (tenant, environment, id),
  KEY audit_log_target (tenant, environment, target_kind, target_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS queues (
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  name VARCHAR(128) NOT NULL,
  paused TINYINT NOT NULL DEFAULT 0,
  concurrency_limit INT NULL,
  key_concurrency INT NOT NULL DEFAULT 1,
  max_pending INT NULL,
  pending INT NOT NULL DEFAULT 0,
  active INT NOT NULL DEFAULT 0,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tenant, environment, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS tasks (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  queue VARCHAR(128) NOT NULL,
  type VARCHAR(128) NOT NULL,
  state VARCHAR(16) NOT NULL,
  params LONGTEXT NOT NULL,
  priority INT NOT NULL,
  run_at DATETIME(6) NOT NULL,
  attempts INT NOT NULL DEFAULT 0,
  max_attempts INT NOT NULL,
  initial_backoff_ms INT NOT NULL,
  backoff_multiplier DOUBLE NOT NULL,
  max_backoff_ms INT NOT NULL,
  timeout_ms INT NOT NULL,
  idempotency_key VARCHAR(200) NULL,
  request_hash CHAR(64) NULL,
  concurrency_key VARCHAR(200) NULL,
  fairness_key VARCHAR(128) NULL,
  side_effect VARCHAR(16) NOT NULL,
  handler_version VARCHAR(64) NULL,
  labels TEXT NULL,
  owner_kind VARCHAR(32) NULL,
  owner_id VARCHAR(64) NULL,
  owner_step VARCHAR(200) NULL,
  gate_id VARCHAR(40) NULL,
  traceparent VARCHAR(64) NULL,
  result LONGTEXT NULL,
  error TEXT NULL,
  cancel_requested TINYINT NOT NULL DEFAULT 0,
  cancel_reason VARCHAR(500) NULL,
  lease_epoch INT NOT NULL DEFAULT 0,
  event_seq INT NOT NULL DEFAULT 0,
  lease_token VARCHAR(40) NULL,
  lease_expires_at DATETIME(6) NULL,
  deadline_at DATETIME(6) NULL,
  session_id VARCHAR(64) NULL,
  node VARCHAR(128) NULL,
  worker_id VARCHAR(200) NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  due_at DATETIME(6) GENERATED ALWAYS AS (CASE WHEN state = 'scheduled' THEN run_at END) STORED,
  held_by VARCHAR(64) GENERATED ALWAYS AS (CASE WHEN state IN ('leased', 'running') THEN session_id END) STORED,
  pending_gate VARCHAR(40) GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN gate_id END) STORED,
  pending_key VARCHAR(200) GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN concurrency_key END) STORED,
  PRIMARY KEY (id),
  UNIQUE KEY tasks_idempotency (tenant, environment, idempotency_key),
  KEY tasks_scope (tenant, environment, id),
  KEY tasks_queue (tenant, environment, queue, id),
  KEY tasks_queue_state (tenant, environment, queue, state, id),
  KEY tasks_state (tenant, environment, state, id),
  KEY tasks_lease (state, lease_expires_at),
  KEY tasks_owner (owner_kind, owner_id),
  KEY tasks_due (due_at),
  KEY tasks_session (held_by),
  KEY tasks_gate (pending_gate),
  KEY tasks_key (tenant, environment, queue, pending_key, priority DESC, run_at, id, pending_gate),
  KEY tasks_finished (finished_at, tenant, environment)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS task_ready (
  task_id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  queue VARCHAR(128) NOT NULL,
  type VARCHAR(128) NOT NULL,
  priority INT NOT NULL,
  run_at DATETIME(6) NOT NULL,
  fairness_key VARCHAR(128) NOT NULL DEFAULT '',
  concurrency_key VARCHAR(200) NULL,
  handler_version VARCHAR(64) NULL,
  gate_id VARCHAR(40) NULL,
  PRIMARY KEY (task_id),
  KEY task_ready_claim (tenant, environment, queue, type, priority DESC, run_at, task_id, handler_version),
  KEY task_ready_fair (tenant, environment, queue, type, fairness_key, priority DESC, run_at, task_id, handler_version),
  KEY task_ready_key (tenant, environment, queue, concurrency_key),
  KEY task_ready_gate (gate_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS task_attempts (
  task_id VARCHAR(40) NOT NULL,
  number INT NOT NULL,
  state VARCHAR(16) NOT NULL,
  cause VARCHAR(32) NULL,
  worker_id VARCHAR(200) NULL,
  session_id VARCHAR(64) NULL,
  node VARCHAR(128) NULL,
  leased_at DATETIME(6) NOT NULL,
  started_at DATETIME(6) NULL,
  ended_at DATETIME(6) NULL,
  lease_expires_at DATETIME(6) NULL,
  error TEXT NULL,
  progress TEXT NULL,
  progress_at DATETIME(6) NULL,
  PRIMARY KEY (task_id, number)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS task_events (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  task_id VARCHAR(40) NOT NULL,
  attempt INT NOT NULL,
  seq INT NOT NULL,
  state VARCHAR(16) NOT NULL,
  owner_kind VARCHAR(32) NULL,
  owner_id VARCHAR(64) NULL,
  processed TINYINT NOT NULL DEFAULT 0,
  created_at DATETIME(6) NOT NULL,
  processed_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY task_events_once (task_id, seq),
  KEY task_events_pending (processed, id),
  KEY task_events_owned (owner_kind, processed, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS gates (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  open TINYINT NOT NULL DEFAULT 1,
  version INT NOT NULL DEFAULT 0,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  KEY gates_scope (tenant, environment, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS key_permits (
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  queue VARCHAR(128) NOT NULL,
  concurrency_key VARCHAR(200) NOT NULL,
  active INT NOT NULL DEFAULT 0,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tenant, environment, queue, concurrency_key),
  KEY key_permits_idle (active, updated_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Keys a submit admits after its commit (decision 0012).
CREATE TABLE IF NOT EXISTS key_admissions (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  queue VARCHAR(128) NOT NULL,
  concurrency_keys MEDIUMTEXT NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  KEY key_admissions_age (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;


CREATE TABLE IF NOT EXISTS worker_sessions (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  node VARCHAR(128) NOT NULL,
  worker_id VARCHAR(200) NOT NULL,
  key_id VARCHAR(40) NOT NULL,
  capacity INT NOT NULL,
  handlers TEXT NOT NULL,
  connected_at DATETIME(6) NOT NULL,
  last_seen_at DATETIME(6) NOT NULL,
  closed_at DATETIME(6) NULL,
  sdk VARCHAR(100) NULL,
  protocol INT NULL,
  end_reason VARCHAR(32) NULL,
  PRIMARY KEY (id),
  KEY worker_sessions_node (node, closed_at),
  KEY worker_sessions_closed (closed_at),
  KEY worker_sessions_scope (tenant, environment, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS worker_session_queues (
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  queue VARCHAR(128) NOT NULL,
  session_id VARCHAR(40) NOT NULL,
  PRIMARY KEY (tenant, environment, queue, session_id),
  KEY worker_session_queues_session (session_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

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
  failure VARCHAR(500) NULL,
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
  failure VARCHAR(500) NULL,
  PRIMARY KEY (id),
  KEY schedule_backfills_state (state, created_at),
  KEY schedule_backfills_schedule (schedule_id, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

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

-- Fairness rotation per queue and type (SPEC P7).
CREATE TABLE IF NOT EXISTS fairness_cursors (
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  queue VARCHAR(128) NOT NULL,
  type VARCHAR(128) NOT NULL,
  after_key VARCHAR(128) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tenant, environment, queue, type)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Bulk operations (decision 0025).
CREATE TABLE IF NOT EXISTS bulk_operations (
  id VARCHAR(40) NOT NULL,
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  kind VARCHAR(16) NOT NULL,
  action VARCHAR(32) NOT NULL,
  filter MEDIUMTEXT NOT NULL,
  params MEDIUMTEXT NOT NULL,
  state VARCHAR(16) NOT NULL,
  matched INT NOT NULL,
  done INT NOT NULL DEFAULT 0,
  skipped INT NOT NULL DEFAULT 0,
  failed INT NOT NULL DEFAULT 0,
  skipped_reasons TEXT NOT NULL,
  created_by VARCHAR(200) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  KEY bulk_operations_scope (tenant, environment, id),
  KEY bulk_operations_state (state, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS bulk_operation_items (
  operation_id VARCHAR(40) NOT NULL,
  seq INT NOT NULL,
  target_id VARCHAR(64) NOT NULL,
  state VARCHAR(16) NOT NULL,
  reason VARCHAR(200) NULL,
  PRIMARY KEY (operation_id, seq),
  KEY bulk_operation_items_state (operation_id, state, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Duties one node at a time performs for the cluster (the metrics sampler).
CREATE TABLE IF NOT EXISTS node_duties (
  name VARCHAR(64) NOT NULL,
  holder VARCHAR(128) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
