-- Workflow definitions (decision 0015); the same on every dialect.

-- name: workflow_definition_insert
INSERT INTO workflow_definitions (tenant, environment, name, version, digest, body, created_at)
VALUES (:tenant, :environment, :name, :version, :digest, :body, :created_at)

-- name: workflow_definition_get
SELECT * FROM workflow_definitions
 WHERE tenant = :tenant AND environment = :environment AND name = :name AND version = :version

-- name: workflow_definition_latest_version
SELECT version FROM workflow_definitions
 WHERE tenant = :tenant AND environment = :environment AND name = :name
 ORDER BY created_at DESC, version DESC
 LIMIT 1

-- name: workflow_definitions_list
SELECT tenant, environment, name, version, digest, created_at FROM workflow_definitions
 WHERE tenant = :tenant AND environment = :environment
   AND (name > :after_name OR (name = :after_name AND version > :after_version))
 ORDER BY name, version
 LIMIT :limit

-- name: workflow_definition_versions
SELECT tenant, environment, name, version, digest, created_at FROM workflow_definitions
 WHERE tenant = :tenant AND environment = :environment AND name = :name AND version > :after
 ORDER BY version
 LIMIT :limit
