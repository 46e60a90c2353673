-- The finished-time index carries the scope, so that a scope's tasks finished in the last hour
-- (the console's throughput chart) are counted from the index alone: without it each finished
-- task of the hour is one more read of its row (7,000 an hour: 30–100 ms a look).

ALTER TABLE tasks
  DROP INDEX tasks_finished,
  ADD KEY tasks_finished (finished_at, tenant, environment);
