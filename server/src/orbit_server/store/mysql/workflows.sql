-- name: workflows_update_many
UPDATE JSON_TABLE(:rows_json, '$[*]' COLUMNS (
         id VARCHAR(40) PATH '$.id',
         state VARCHAR(16) PATH '$.state',
         output LONGTEXT PATH '$.output',
         error LONGTEXT PATH '$.error',
         context LONGTEXT PATH '$.context',
         control_version INT PATH '$.control_version',
         updated_at DATETIME(6) PATH '$.updated_at',
         finished_at DATETIME(6) PATH '$.finished_at')) p
  STRAIGHT_JOIN workflows w ON w.id = p.id
   SET w.state = p.state, w.output = p.output, w.error = p.error, w.context = p.context,
       w.control_version = p.control_version, w.updated_at = p.updated_at,
       w.finished_at = p.finished_at
