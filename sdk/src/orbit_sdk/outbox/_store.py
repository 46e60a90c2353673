"""The relay's side of ``orbit_outbox``: its own DB-API connection, and one short transaction
per use case (claim, record outcomes, prune, measure). No network I/O happens inside one.

The methods are blocking; the relay runs them in a worker thread, one at a time.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

from orbit_sdk.outbox._dialects import (
    Dialect,
    dialect_named,
    pyformat,
    queries_for,
    time_param,
    time_value,
)
from orbit_sdk.outbox._errors import OutboxError

__all__ = ["ClaimedRow", "Measure", "Outcome", "RelayStore", "redact_url"]


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    id: str
    kind: str
    payload: dict[str, Any]
    aggregate_key: str | None
    attempts: int
    """Delivery attempts before this one."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one claimed row: ``delivered`` (``result`` is the Orbit id), ``retry``
    (at ``next_attempt_at``) or ``parked``, with the ``error`` text."""

    row_id: str
    verdict: str
    result: str | None = None
    error: str | None = None
    next_attempt_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Measure:
    undelivered: int
    due: int
    oldest_created_at: datetime | None
    parked: int


def redact_url(url: str) -> str:
    """``url`` without its password, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


class RelayStore:
    """One connection to the business database, opened on first use and again after an error."""

    def __init__(self, database_url: str) -> None:
        scheme = urlsplit(database_url).scheme
        if not scheme:
            raise OutboxError("unsupported_database", "the database URL has no scheme")
        self.dialect: Dialect = dialect_named(scheme)
        self._url = database_url
        self._conn: Any = None
        self._queries = queries_for(self.dialect)

    # -- connection ---------------------------------------------------------------------------

    def _connect(self) -> Any:
        parts = urlsplit(self._url)
        if self.dialect == "sqlite":
            path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
            if not path:
                raise OutboxError("unsupported_database", "sqlite URLs are sqlite:///path")
            # Autocommit mode: the store opens each transaction itself (BEGIN IMMEDIATE).
            # One thread at a time uses it (the relay awaits each call), not always the same.
            return sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False)
        if self.dialect == "postgresql":
            import psycopg

            url = parts._replace(scheme="postgresql").geturl()
            return psycopg.connect(url, connect_timeout=10)
        import pymysql

        conn = pymysql.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=unquote(parts.path.lstrip("/")) or None,
            charset="utf8mb4",
            autocommit=False,
            connect_timeout=10,
        )
        with conn.cursor() as cursor:
            # Read committed: the claim's locking read takes no gap locks that would make the
            # business's inserts wait.
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn
        cursor = conn.cursor()
        try:
            if self.dialect == "sqlite":
                cursor.execute("BEGIN IMMEDIATE")
            yield cursor
            conn.commit()
        except BaseException:
            try:
                conn.rollback()
            except Exception:  # the connection is gone: open a new one next time
                self.close()
            raise
        finally:
            with contextlib.suppress(Exception):  # the connection is gone
                cursor.close()

    def _execute(self, cursor: Any, sql: str, params: dict[str, Any]) -> None:
        cursor.execute(sql if self.dialect == "sqlite" else pyformat(sql), params)

    def _t(self, moment: datetime) -> Any:
        return time_param(self.dialect, moment)

    # -- use cases ----------------------------------------------------------------------------

    def create_table(self) -> None:
        """Create ``orbit_outbox`` if it does not exist (for tests and quick starts)."""
        from orbit_sdk.outbox._dialects import ddl_statements

        with self._transaction() as cursor:
            for statement in ddl_statements(self.dialect):
                cursor.execute(statement)

    def claim(self, owner: str, now: datetime, lease: timedelta, limit: int) -> list[ClaimedRow]:
        """Lease up to ``limit`` due rows to ``owner`` until ``now + lease``, oldest first."""
        params = {
            "owner": owner,
            "now": self._t(now),
            "until": self._t(now + lease),
            "limit": limit,
        }
        with self._transaction() as cursor:
            self._execute(cursor, self._queries.claim, params)
            rows = cursor.fetchall()
            if self._queries.claim_mark is not None and rows:
                ids = {f"id{index}": row[0] for index, row in enumerate(rows)}
                sql = self._queries.claim_mark.format(ids=", ".join(f":{name}" for name in ids))
                self._execute(cursor, sql, {**params, **ids})
        claimed = [
            ClaimedRow(
                id=row[0],
                kind=row[1],
                payload=json.loads(row[2]) if isinstance(row[2], str | bytes) else row[2],
                aggregate_key=row[3],
                attempts=int(row[4]),
            )
            for row in rows
        ]
        return sorted(claimed, key=lambda row: row.id)

    def record(self, owner: str, now: datetime, outcomes: list[Outcome]) -> int:
        """Write what became of claimed rows; answers how many were still ``owner``'s (a row
        whose lease ran out and that another relay claimed is left to that relay)."""
        written = 0
        with self._transaction() as cursor:
            for outcome in outcomes:
                params: dict[str, Any] = {
                    "id": outcome.row_id,
                    "owner": owner,
                    "now": self._t(now),
                    "error": outcome.error,
                }
                if outcome.verdict == "delivered":
                    sql = self._queries.delivered
                    params = {**params, "result": outcome.result}
                    del params["error"]
                elif outcome.verdict == "retry":
                    assert outcome.next_attempt_at is not None
                    sql = self._queries.retry
                    params = {**params, "next": self._t(outcome.next_attempt_at)}
                    del params["now"]
                else:
                    sql = self._queries.park
                self._execute(cursor, sql, params)
                written += max(cursor.rowcount, 0)
        return written

    def prune(self, cutoff: datetime, limit: int) -> int:
        """Delete up to ``limit`` rows delivered before ``cutoff``."""
        with self._transaction() as cursor:
            self._execute(cursor, self._queries.prune, {"cutoff": self._t(cutoff), "limit": limit})
            return max(int(cursor.rowcount), 0)

    def measure(self, now: datetime) -> Measure:
        with self._transaction() as cursor:
            self._execute(cursor, self._queries.measure, {"now": self._t(now)})
            undelivered, due, oldest = cursor.fetchone()
            self._execute(cursor, self._queries.parked_count, {})
            (parked,) = cursor.fetchone()
        return Measure(
            undelivered=int(undelivered or 0),
            due=int(due or 0),
            oldest_created_at=time_value(oldest),
            parked=int(parked or 0),
        )
