-- Duties one node at a time performs for the whole cluster (the metrics sampler's reads of
-- queue depth): the node that holds a duty and until when. A node takes an expired duty or
-- renews its own with one conditional statement; another node takes over once the holder
-- stops renewing.

CREATE TABLE IF NOT EXISTS node_duties (
  name TEXT NOT NULL,
  holder TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  PRIMARY KEY (name)
);
