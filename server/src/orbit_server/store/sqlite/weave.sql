-- SQLite: BEGIN IMMEDIATE already holds the only write lock; no row locks to take.

-- name: workflow_lock
SELECT * FROM workflows WHERE id = :id
