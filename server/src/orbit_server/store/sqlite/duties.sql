-- Node duties on SQLite.

-- name: duty_take
-- Take the duty if nobody has it or its term ended, renew it if this node holds it, else
-- leave it.
INSERT INTO node_duties (name, holder, expires_at) VALUES (:name, :node, :until)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
 WHERE node_duties.holder = excluded.holder OR node_duties.expires_at <= :now
