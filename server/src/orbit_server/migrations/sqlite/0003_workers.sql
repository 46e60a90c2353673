-- Worker sessions: one row per WebSocket connection of a worker (SPEC D1-D3). A node refreshes
-- last_seen_at of its open sessions; a session not seen for a while belongs to a dead node.

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
  PRIMARY KEY (id)
);

CREATE INDEX IF NOT EXISTS worker_sessions_node ON worker_sessions (node, closed_at);

CREATE INDEX IF NOT EXISTS worker_sessions_closed ON worker_sessions (closed_at);

CREATE TABLE IF NOT EXISTS worker_session_queues (
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  queue TEXT NOT NULL,
  session_id TEXT NOT NULL,
  PRIMARY KEY (tenant, environment, queue, session_id)
);

CREATE INDEX IF NOT EXISTS worker_session_queues_session ON worker_session_queues (session_id);
