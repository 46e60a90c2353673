-- Node duties: what one node at a time does for the cluster; the same on every dialect but
-- for the take, which is an upsert of each dialect's own form.

-- name: duty_get
SELECT name, holder, expires_at FROM node_duties WHERE name = :name

-- name: duty_release
-- The holder stops: the duty is free at once, for the next node that asks.
UPDATE node_duties SET expires_at = :now WHERE name = :name AND holder = :node
