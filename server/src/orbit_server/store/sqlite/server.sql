-- name: server_version
SELECT sqlite_version() AS version
