-- A submit with many concurrency keys admits them after its commit, in short transactions
-- (decision 0012); this row, written in the submit's transaction, says which keys are still to
-- be admitted, so that a node that stops before it is done leaves the work to another.

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
