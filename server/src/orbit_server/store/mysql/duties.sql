-- Node duties on MySQL/MariaDB.

-- name: duty_take
-- Take the duty if nobody has it or its term ended, renew it if this node holds it, else
-- leave it: the assignments run left to right, so the second sees the holder the first set.
INSERT INTO node_duties (name, holder, expires_at) VALUES (:name, :node, :until)
ON DUPLICATE KEY UPDATE
  holder = IF(holder = :node OR expires_at <= :now, :node, holder),
  expires_at = IF(holder = :node, :until, expires_at)
