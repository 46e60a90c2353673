-- What operators see of worker sessions (the SDK, the protocol spoken, why a session ended) and
-- bulk operations: a frozen selection of targets, applied in bounded batches by any node.

ALTER TABLE worker_sessions ADD COLUMN sdk VARCHAR(100) NULL;
ALTER TABLE worker_sessions ADD COLUMN protocol INT NULL;
ALTER TABLE worker_sessions ADD COLUMN end_reason VARCHAR(32) NULL;
CREATE INDEX worker_sessions_scope ON worker_sessions (tenant, environment, id);

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
