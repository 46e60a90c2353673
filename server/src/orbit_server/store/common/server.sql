-- The server itself; the same on every dialect unless a dialect's file has its own text.

-- name: ping
SELECT 1 AS ok
