-- Where the fairness rotation of a queue's type stands: the last fairness key a claim leased
-- from. Every node's claims read and move it, so consecutive claims alternate between the keys
-- with ready work whichever node makes them (SPEC P7).

CREATE TABLE IF NOT EXISTS fairness_cursors (
  tenant VARCHAR(64) NOT NULL,
  environment VARCHAR(64) NOT NULL,
  queue VARCHAR(128) NOT NULL,
  type VARCHAR(128) NOT NULL,
  after_key VARCHAR(128) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tenant, environment, queue, type)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
