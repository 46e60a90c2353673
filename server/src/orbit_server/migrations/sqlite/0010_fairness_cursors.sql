-- Where the fairness rotation of a queue's type stands: the last fairness key a claim leased
-- from. Every node's claims read and move it, so consecutive claims alternate between the keys
-- with ready work whichever node makes them (SPEC P7).

CREATE TABLE IF NOT EXISTS fairness_cursors (
  tenant TEXT NOT NULL,
  environment TEXT NOT NULL,
  queue TEXT NOT NULL,
  type TEXT NOT NULL,
  after_key TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (tenant, environment, queue, type)
);
