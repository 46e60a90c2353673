-- A concurrency key's next task is found from the index alone: the pending gate is the last
-- column of tasks_key, so admission's head seek reads no table row (decision 0011).

DROP INDEX IF EXISTS tasks_key;

CREATE INDEX IF NOT EXISTS tasks_key ON tasks (tenant, environment, queue, pending_key, priority DESC, run_at, id, pending_gate);
