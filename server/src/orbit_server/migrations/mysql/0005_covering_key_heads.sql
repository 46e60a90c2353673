-- A concurrency key's next task is found from the index alone: the pending gate is the last
-- column of tasks_key, so admission's head seek reads no table row (decision 0011). The entry
-- of a task without a key does not change with it; a keyed task's changes when it is claimed,
-- as before.

ALTER TABLE tasks
  DROP INDEX tasks_key,
  ADD KEY tasks_key (tenant, environment, queue, pending_key, priority DESC, run_at, id, pending_gate);
