-- Indexes that a task's ordinary life (pending → leased → running → succeeded) does not touch.
-- Each finder index keys on a column that holds a value only in the states it finds and is NULL
-- in every other, so a state change outside those states leaves the index entry as it was
-- (decision 0006).

ALTER TABLE tasks ADD COLUMN due_at TEXT GENERATED ALWAYS AS (CASE WHEN state = 'scheduled' THEN run_at END) VIRTUAL;

ALTER TABLE tasks ADD COLUMN held_by TEXT GENERATED ALWAYS AS (CASE WHEN state IN ('leased', 'running') THEN session_id END) VIRTUAL;

ALTER TABLE tasks ADD COLUMN pending_gate TEXT GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN gate_id END) VIRTUAL;

ALTER TABLE tasks ADD COLUMN pending_key TEXT GENERATED ALWAYS AS (CASE WHEN state = 'pending' THEN concurrency_key END) VIRTUAL;

DROP INDEX IF EXISTS tasks_due;

DROP INDEX IF EXISTS tasks_finished;

DROP INDEX IF EXISTS tasks_session;

DROP INDEX IF EXISTS tasks_gate;

DROP INDEX IF EXISTS tasks_key;

CREATE INDEX IF NOT EXISTS tasks_due ON tasks (due_at);

CREATE INDEX IF NOT EXISTS tasks_finished ON tasks (finished_at);

CREATE INDEX IF NOT EXISTS tasks_session ON tasks (held_by);

CREATE INDEX IF NOT EXISTS tasks_gate ON tasks (pending_gate);

CREATE INDEX IF NOT EXISTS tasks_key ON tasks (tenant, environment, queue, pending_key, priority DESC, run_at, id);
