-- Indexes that a task's ordinary life (pending → leased → running → succeeded) does not touch.
-- Each finder index keys on a column that holds a value only in the states it finds and is NULL
-- in every other, so a state change outside those states leaves the index entry as it was
-- (decision 0006). The generated columns are stored: plain columns to InnoDB.

ALTER TABLE tasks
  ADD COLUMN due_at DATETIME(6) GENERATED ALWAYS AS (CASE WHEN state = 'scheduled' THEN run_at END) STORED,
  ADD COLUMN held_by VARCHAR(64) GENERATED ALWAYS AS (CASE WHEN state IN ('leased', 'running') THEN session_id END) STORED,
  ADD COLUMN pending_gate VARCHAR(40) GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN gate_id END) STORED,
  ADD COLUMN pending_key VARCHAR(200) GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN concurrency_key END) STORED,
  DROP INDEX tasks_due,
  DROP INDEX tasks_finished,
  DROP INDEX tasks_session,
  DROP INDEX tasks_gate,
  DROP INDEX tasks_key,
  ADD KEY tasks_due (due_at),
  ADD KEY tasks_finished (finished_at),
  ADD KEY tasks_session (held_by),
  ADD KEY tasks_gate (pending_gate),
  ADD KEY tasks_key (tenant, environment, queue, pending_key, priority DESC, run_at, id);
