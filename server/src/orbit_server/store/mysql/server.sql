-- name: server_version
SELECT VERSION() AS version

-- name: server_variables
SHOW GLOBAL VARIABLES WHERE Variable_name IN
  ('wsrep_on', 'binlog_format', 'log_bin', 'innodb_flush_log_at_trx_commit', 'sync_binlog')

-- name: connection_id
SELECT CONNECTION_ID() AS id
