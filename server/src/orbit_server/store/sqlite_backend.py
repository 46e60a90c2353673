"""Embedded SQLite backend: one dedicated thread, one hop per unit of work.

The thread owns the only connection and runs its own event loop. A unit's coroutine is handed
to that loop whole, so its ``await tx....`` calls complete in place without crossing threads;
only the unit's result crosses back. Writes start with ``BEGIN IMMEDIATE`` (DATABASE.md: a
deferred transaction that upgrades gets SQLITE_BUSY at once, ignoring ``busy_timeout``).
WAL with ``synchronous=FULL`` keeps an acknowledged commit across power loss.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from orbit_server.errors import CommitOutcomeUnknown, DatabaseBusy, DatabaseUnavailable
from orbit_server.store.base import (
    Database,
    DuplicateKey,
    Params,
    RetryPolicy,
    Row,
    ServerInfo,
    T,
    TransientConflict,
    Unit,
    to_db_time,
    utc,
)
from orbit_server.store.probe import evaluate_sqlite_version
from orbit_server.store.sql import QueryBook

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
_BUSY = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_BUSY_SNAPSHOT", "SQLITE_BUSY_RECOVERY"})
# The file cannot serve for now (disk full, I/O error, read-only, unopenable, damaged).
_UNAVAILABLE_PREFIXES = (
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_CANTOPEN",
    "SQLITE_READONLY",
    "SQLITE_CORRUPT",
    "SQLITE_NOTADB",
)


class InstanceLocked(Exception):
    """Another Orbit server holds this SQLite file."""


def encode_time(moment: datetime) -> str:
    return to_db_time(moment).strftime(_TIME_FORMAT)


def decode_time(text: str) -> datetime:
    return utc(datetime.fromisoformat(text))


def _convert_params(args: tuple[Any, ...]) -> tuple[Any, ...]:
    if not any(isinstance(a, datetime) for a in args):
        return args
    return tuple(encode_time(a) if isinstance(a, datetime) else a for a in args)


def _translate(exc: sqlite3.Error) -> BaseException:
    name = getattr(exc, "sqlite_errorname", "")
    if name in ("SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"):
        return DuplicateKey(str(exc))
    if name in _BUSY:
        return TransientConflict(name)
    if name.startswith(_UNAVAILABLE_PREFIXES):
        return DatabaseUnavailable("the database file cannot be used right now")
    return exc


class SQLiteTx:
    dialect: Literal["sqlite"] = "sqlite"

    def __init__(self, conn: sqlite3.Connection, queries: QueryBook) -> None:
        self._conn = conn
        self._queries = queries
        self.events: list[object] = []

    def publish(self, event: object) -> None:
        self.events.append(event)

    def _execute(
        self, sql: str, args: tuple[Any, ...] | Sequence[tuple[Any, ...]], many: bool
    ) -> sqlite3.Cursor:
        try:
            if many:
                return self._conn.executemany(sql, args)
            return self._conn.execute(sql, args)
        except sqlite3.Error as exc:
            translated = _translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    async def fetch_all(self, query: str, params: Params | None = None) -> list[Row]:
        return self._fetch(*self._queries.bind(query, params or {}))

    async def fetch_union(self, query: str, many: Sequence[Params]) -> list[Row]:
        return self._fetch(*self._queries[query].bind_union(many))

    def _fetch(self, sql: str, args: tuple[Any, ...]) -> list[Row]:
        cursor = self._execute(sql, _convert_params(args), many=False)
        names = [d[0] for d in cursor.description or ()]
        time_columns = [i for i, n in enumerate(names) if n.endswith("_at")]
        rows: list[Row] = []
        for raw in cursor.fetchall():
            row = dict(zip(names, raw, strict=True))
            for i in time_columns:
                value = raw[i]
                if isinstance(value, str):
                    row[names[i]] = decode_time(value)
            rows.append(row)
        return rows

    async def fetch_one(self, query: str, params: Params | None = None) -> Row | None:
        rows = await self.fetch_all(query, params)
        return rows[0] if rows else None

    def _write(self, query: str, params: Params | None) -> int:
        sql, args = self._queries.bind(query, params or {})
        return self._execute(sql, _convert_params(args), many=False).rowcount

    def _write_many(self, query: str, rows: Sequence[Params]) -> int:
        if not rows:
            return 0
        named = self._queries[query]
        args = [_convert_params(named.args(r)) for r in rows]
        return self._execute(named.positional, args, many=True).rowcount

    async def execute(self, query: str, params: Params | None = None) -> int:
        return self._write(query, params)

    async def execute_many(self, query: str, rows: Sequence[Params]) -> int:
        return self._write_many(query, rows)

    # In process, a statement costs no round trip: a deferred write runs at once.

    def defer(self, query: str, params: Params | None = None) -> None:
        self._write(query, params)

    def defer_many(self, query: str, rows: Sequence[Params]) -> None:
        self._write_many(query, rows)

    async def execute_script(self, statements: Sequence[str]) -> None:
        for statement in statements:
            self._execute(statement, (), many=False)


class SQLiteDatabase(Database):
    dialect = "sqlite"

    def __init__(
        self,
        path: Path,
        *,
        exclusive: bool = False,
        busy_timeout_ms: int = 5000,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(retry)
        self.path = path
        self.queries = QueryBook.load("sqlite")
        self._exclusive = exclusive
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = None
        self._unit_lock: asyncio.Lock | None = None
        self._busy = 0
        self._closing = False

    async def connect(self) -> ServerInfo:
        if self._loop is not None:
            return evaluate_sqlite_version(sqlite3.sqlite_version)
        info = evaluate_sqlite_version(sqlite3.sqlite_version)
        self._closing = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._exclusive:
            self._lock_fd = acquire_file_lock(instance_lock_path(self.path))
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name="orbit-sqlite", daemon=True)
        self._thread.start()
        await asyncio.to_thread(ready.wait)
        self._loop = loop
        try:
            await self._call(self._open)
        except BaseException:
            await self.close()
            raise
        return info

    async def _open(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            conn.close()
            raise DatabaseUnavailable("the SQLite file cannot use WAL mode")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        self._conn = conn
        self._unit_lock = asyncio.Lock()

    async def _call(self, factory: Any) -> Any:
        if self._loop is None or self._closing:
            raise DatabaseUnavailable("the database is closed")
        future = asyncio.run_coroutine_threadsafe(factory(), self._loop)
        return await asyncio.wrap_future(future)

    async def _run_once(self, unit: Unit[T], *, write: bool, timeout_s: float) -> T:
        # A local file cannot stall like a network peer; busy_timeout bounds lock waits.
        del timeout_s

        async def in_thread() -> T:
            assert self._unit_lock is not None
            async with self._unit_lock:
                if self._conn is None:  # closed while this unit waited its turn
                    raise DatabaseUnavailable("the database is closed")
                self._busy = 1
                try:
                    return await self._transaction(self._conn, unit, write)
                finally:
                    self._busy = 0

        result: T = await self._call(in_thread)
        return result

    async def _transaction(self, conn: sqlite3.Connection, unit: Unit[T], write: bool) -> T:
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as exc:
            translated = _translate(exc)
            raise (translated if translated is not exc else DatabaseUnavailable()) from exc
        try:
            result = await unit(SQLiteTx(conn, self.queries))
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            name = getattr(exc, "sqlite_errorname", "")
            if conn.in_transaction:  # COMMIT refused (busy): still open, nothing written
                conn.execute("ROLLBACK")
                raise TransientConflict(name) from exc
            if name.startswith("SQLITE_IOERR"):  # the disk failed mid-write: do not guess
                raise CommitOutcomeUnknown() from exc
            raise DatabaseUnavailable() from exc
        return result

    def _exhausted(self, exc: Exception) -> Exception:
        return DatabaseBusy("the database file is busy; retry shortly")

    async def ping(self) -> None:
        async def select_one(tx: Any) -> None:
            await tx.fetch_one("ping")

        await self.read(select_one)

    async def close(self) -> None:
        """Refuse new units, let the running one finish, fail those still waiting, then stop."""
        self._closing = True
        loop, self._loop = self._loop, None
        if loop is not None:

            async def shut() -> None:
                if self._unit_lock is not None:
                    async with self._unit_lock:
                        self._close_connection()
                else:
                    self._close_connection()
                current = asyncio.current_task()
                waiting = [t for t in asyncio.all_tasks() if t is not current]
                await asyncio.gather(*waiting, return_exceptions=True)

            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(shut(), loop))
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                await asyncio.to_thread(self._thread.join)
                self._thread = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def pool_stats(self) -> tuple[int, int]:
        return self._busy, 1


def instance_lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def acquire_file_lock(path: Path) -> int:
    """An exclusive advisory lock held until the descriptor is closed (or the process dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InstanceLocked(
            f"another Orbit server is using {path.with_suffix('')}; "
            "SQLite serves one instance only (use MySQL/MariaDB for several)"
        ) from None
    return fd
