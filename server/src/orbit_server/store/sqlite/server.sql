-- name: ping
SELECT 1 AS ok

-- name: server_version
SELECT sqlite_version() AS version
