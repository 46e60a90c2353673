-- What operators see of worker sessions (the SDK, the protocol spoken, why a session ended) and
-- bulk operations: a frozen selection of targets, applied in bounded batches by any node.

ALTER TABLE worker_sessions ADD COLUMN sdk TEXT NULL;
ALTER TABLE worker_sessions ADD COLUMN protocol INTEGER NULL;
ALTER TABLE worker_sessions ADD COLUMN end_reason TEXT NULL;
CREATE INDEX IF NOT EXISTS worker_sessions_scope ON worker_sessions (tenant, environment, id);

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
