"""The storage seam (SPEC S1–S5): backends, named queries, migrations and per-aggregate methods."""

from __future__ import annotations

from orbit_server.store.base import (
    Database,
    DuplicateKey,
    RetryPolicy,
    Row,
    ServerInfo,
    Tx,
    Unit,
)
from orbit_server.store.url import DatabaseUrl, MySQLUrl, SQLiteUrl, parse_database_url


def open_database(
    url: str | DatabaseUrl,
    *,
    pool_min: int = 1,
    pool_max: int = 10,
    connect_timeout_s: float = 5.0,
    exclusive: bool = False,
    unit_timeout_s: float = 30.0,
    retry: RetryPolicy | None = None,
) -> Database:
    """Build (not connect) the backend for ``url``; call ``await db.connect()`` next.

    ``exclusive`` applies to SQLite: the server holds a lock file so that a second server on
    the same file refuses to start.
    """
    parsed = parse_database_url(url) if isinstance(url, str) else url
    if isinstance(parsed, MySQLUrl):
        from orbit_server.store.mysql_backend import MySQLDatabase

        return MySQLDatabase(
            parsed,
            pool_min=pool_min,
            pool_max=pool_max,
            connect_timeout_s=connect_timeout_s,
            unit_timeout_s=unit_timeout_s,
            retry=retry,
        )
    from orbit_server.store.sqlite_backend import SQLiteDatabase

    return SQLiteDatabase(parsed.path, exclusive=exclusive, retry=retry)


__all__ = [
    "Database",
    "DatabaseUrl",
    "DuplicateKey",
    "MySQLUrl",
    "RetryPolicy",
    "Row",
    "SQLiteUrl",
    "ServerInfo",
    "Tx",
    "Unit",
    "open_database",
    "parse_database_url",
]
