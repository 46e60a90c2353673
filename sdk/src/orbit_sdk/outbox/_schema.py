"""The DDL of ``orbit_outbox`` for each dialect, as ``orbit_sdk.outbox.ddl(dialect)`` answers it.

Kept as Python text rather than ``.sql`` files: the SDK's wheel carries no SQL files (its
packaging test keeps the server's SQL out of it), and this is all the SQL a user runs.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DDL"]

DDL: Final[dict[str, str]] = {
    "postgresql": """\
-- The outbox table of orbit_sdk.outbox, for PostgreSQL. Create it in the business database,
-- beside the tables whose transactions write to it.
CREATE TABLE IF NOT EXISTS orbit_outbox (
    id              VARCHAR(26) COLLATE "C" PRIMARY KEY,
    kind            VARCHAR(16)  NOT NULL,
    payload         JSONB        NOT NULL,
    aggregate_key   VARCHAR(255),
    created_at      TIMESTAMPTZ  NOT NULL,
    attempts        INTEGER      NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ  NOT NULL,
    claimed_until   TIMESTAMPTZ,
    claimed_by      VARCHAR(64),
    delivered_at    TIMESTAMPTZ,
    parked_at       TIMESTAMPTZ,
    last_error      TEXT,
    result          VARCHAR(255)
);
CREATE INDEX IF NOT EXISTS orbit_outbox_due ON orbit_outbox (next_attempt_at)
    WHERE delivered_at IS NULL AND parked_at IS NULL;
CREATE INDEX IF NOT EXISTS orbit_outbox_aggregate ON orbit_outbox (aggregate_key, id)
    WHERE delivered_at IS NULL;
CREATE INDEX IF NOT EXISTS orbit_outbox_delivered ON orbit_outbox (delivered_at)
    WHERE delivered_at IS NOT NULL;
""",
    "mysql": """\
-- The outbox table of orbit_sdk.outbox, for MySQL 8 and MariaDB 10.6 or newer (SKIP LOCKED).
-- Create it in the business database, beside the tables whose transactions write to it.
CREATE TABLE IF NOT EXISTS orbit_outbox (
    id              VARCHAR(26) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind            VARCHAR(16)  NOT NULL,
    payload         JSON         NOT NULL,
    aggregate_key   VARCHAR(255) NULL,
    created_at      DATETIME(6)  NOT NULL,
    attempts        INT          NOT NULL DEFAULT 0,
    next_attempt_at DATETIME(6)  NOT NULL,
    claimed_until   DATETIME(6)  NULL,
    claimed_by      VARCHAR(64)  NULL,
    delivered_at    DATETIME(6)  NULL,
    parked_at       DATETIME(6)  NULL,
    last_error      TEXT         NULL,
    result          VARCHAR(255) NULL,
    PRIMARY KEY (id),
    KEY orbit_outbox_due (delivered_at, parked_at, next_attempt_at),
    KEY orbit_outbox_aggregate (aggregate_key, id),
    KEY orbit_outbox_delivered (delivered_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
""",
    "sqlite": """\
-- The outbox table of orbit_sdk.outbox, for SQLite (one relay at a time). Times are UTC text,
-- 'YYYY-MM-DD HH:MM:SS.ffffff', so they sort as they compare.
CREATE TABLE IF NOT EXISTS orbit_outbox (
    id              TEXT    NOT NULL PRIMARY KEY,
    kind            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    aggregate_key   TEXT,
    created_at      TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT    NOT NULL,
    claimed_until   TEXT,
    claimed_by      TEXT,
    delivered_at    TEXT,
    parked_at       TEXT,
    last_error      TEXT,
    result          TEXT
);
CREATE INDEX IF NOT EXISTS orbit_outbox_due ON orbit_outbox (next_attempt_at)
    WHERE delivered_at IS NULL AND parked_at IS NULL;
CREATE INDEX IF NOT EXISTS orbit_outbox_aggregate ON orbit_outbox (aggregate_key, id)
    WHERE delivered_at IS NULL;
CREATE INDEX IF NOT EXISTS orbit_outbox_delivered ON orbit_outbox (delivered_at)
    WHERE delivered_at IS NOT NULL;
""",
}
