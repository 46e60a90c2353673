-- Worker sessions: one row per WebSocket connection of a worker (SPEC D1-D3). A node refreshes
-- last_seen_at of its open sessions; a session not seen for a while belongs to a dead node.

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
  PRIMARY KEY (id),
  KEY worker_sessions_node (node, closed_at),
  KEY worker_sessions_closed (closed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS worker_session_queues (
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  queue VARCHAR(128) NOT NULL,
  session_id VARCHAR(40) NOT NULL,
  PRIMARY KEY (tenant, environment, queue, session_id),
  KEY worker_session_queues_session (session_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
