-- Duties one node at a time performs for the whole cluster (the metrics sampler's reads of
-- queue depth): the node that holds a duty and until when. A node takes an expired duty or
-- renews its own with one conditional statement; another node takes over once the holder
-- stops renewing.

CREATE TABLE IF NOT EXISTS node_duties (
  name VARCHAR(64) NOT NULL,
  holder VARCHAR(128) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
