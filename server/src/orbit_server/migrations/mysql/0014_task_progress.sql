-- What a handler last reported about its progress (a small JSON object) and when, on its
-- attempt: written with the heartbeat that carries it, shown on the task and its attempts.
-- Each attempt keeps its own, so a retry starts without one.

ALTER TABLE task_attempts
  ADD COLUMN progress TEXT NULL,
  ADD COLUMN progress_at DATETIME(6) NULL;
