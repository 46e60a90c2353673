-- name: server_version
SELECT VERSION() AS version

-- name: server_variables
SHOW GLOBAL VARIABLES WHERE Variable_name IN
  ('wsrep_on', 'binlog_format', 'log_bin', 'innodb_flush_log_at_trx_commit', 'sync_binlog',
   'read_only', 'super_read_only', 'innodb_autoinc_lock_mode', 'wsrep_certify_nonPK',
   'default_storage_engine')

-- name: node_variables
SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'super_read_only', 'wsrep_on')

-- name: node_status
SHOW GLOBAL STATUS WHERE Variable_name IN
  ('wsrep_ready', 'wsrep_local_state', 'wsrep_cluster_status', 'wsrep_cluster_size')

-- name: tables_unsafe_for_galera
SELECT t.table_name AS name, t.engine AS engine,
       EXISTS (SELECT 1 FROM information_schema.table_constraints c
               WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name
                 AND c.constraint_type = 'PRIMARY KEY') AS has_primary_key
FROM information_schema.tables t
WHERE t.table_schema = DATABASE() AND t.table_type = 'BASE TABLE'
  AND (t.engine <> 'InnoDB'
       OR NOT EXISTS (SELECT 1 FROM information_schema.table_constraints c
                      WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name
                        AND c.constraint_type = 'PRIMARY KEY'))

-- name: connection_id
SELECT CONNECTION_ID() AS id
