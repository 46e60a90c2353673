-- A submit with many concurrency keys admits them after its commit, in short transactions
-- (decision 0012); this row, written in the submit's transaction, says which keys are still to
-- be admitted, so that a node that stops before it is done leaves the work to another.

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
