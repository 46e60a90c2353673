"""MySQL 8.4+ / MariaDB 10.11+ backend on asyncmy with a bounded pool.

Every connection runs READ COMMITTED (DATABASE.md: REPEATABLE READ gap locks block inserts
behind a claimer) and autocommit off, so a unit's first statement opens its transaction and no
extra ``BEGIN`` round trip is paid.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import asyncmy
from asyncmy import errors as my_errors
from asyncmy.connection import Connection
from asyncmy.cursors import DictCursor
from asyncmy.pool import Pool

from orbit_server.errors import CommitOutcomeUnknown, DatabaseUnavailable
from orbit_server.store.base import (
    ConnectionLost,
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
from orbit_server.store.probe import evaluate_mysql_server
from orbit_server.store.sql import QueryBook
from orbit_server.store.url import MySQLUrl

ER_DUP_ENTRY = 1062
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
# Client-side codes for a connection that could not be made or was lost.
_CONNECTION_CODES = frozenset({2002, 2003, 2005, 2006, 2013, 2014, 2055, 1053, 1927, 4031})
_CONNECTION_EXCEPTIONS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    EOFError,
    asyncio.IncompleteReadError,
    TimeoutError,
    my_errors.InterfaceError,
)


def _error_code(exc: BaseException) -> int | None:
    if isinstance(exc, my_errors.MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


def is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, _CONNECTION_EXCEPTIONS) or _error_code(exc) in _CONNECTION_CODES


def translate(exc: BaseException) -> BaseException:
    """Map a driver error onto the seam's vocabulary (or return it unchanged)."""
    code = _error_code(exc)
    if code == ER_DUP_ENTRY:
        return DuplicateKey(str(exc))
    if code in (ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT):
        return TransientConflict(f"mysql error {code}")
    if is_connection_error(exc):
        return ConnectionLost(type(exc).__name__)
    return exc


def _convert_params(args: tuple[Any, ...]) -> tuple[Any, ...]:
    if not any(isinstance(a, datetime) for a in args):
        return args
    return tuple(to_db_time(a) if isinstance(a, datetime) else a for a in args)


def _convert_row(row: dict[str, Any]) -> Row:
    for key, value in row.items():
        if isinstance(value, datetime):
            row[key] = utc(value)
    return row


class MySQLTx:
    dialect: Literal["mysql"] = "mysql"

    def __init__(self, conn: Connection, queries: QueryBook) -> None:
        self._conn = conn
        self._queries = queries

    async def _run(self, sql: str, args: tuple[Any, ...] | None) -> Any:
        cursor: Any = self._conn.cursor(DictCursor)
        try:
            await cursor.execute(sql, args)
        except BaseException as exc:
            await cursor.close()
            translated = translate(exc)
            if translated is exc:
                raise
            raise translated from exc
        return cursor

    async def fetch_all(self, query: str, params: Params | None = None) -> list[Row]:
        sql, args = self._queries.bind(query, params or {})
        cursor = await self._run(sql, _convert_params(args))
        try:
            rows = await cursor.fetchall()
        finally:
            await cursor.close()
        return [_convert_row(r) for r in rows]

    async def fetch_one(self, query: str, params: Params | None = None) -> Row | None:
        rows = await self.fetch_all(query, params)
        return rows[0] if rows else None

    async def execute(self, query: str, params: Params | None = None) -> int:
        sql, args = self._queries.bind(query, params or {})
        cursor = await self._run(sql, _convert_params(args))
        count = int(cursor.rowcount)
        await cursor.close()
        return count

    async def execute_many(self, query: str, rows: Sequence[Params]) -> int:
        if not rows:
            return 0
        name = self._queries[query]
        sql = name.positional
        args = [_convert_params(tuple(r[p] for p in name.params)) for r in rows]
        cursor: Any = self._conn.cursor(DictCursor)
        try:
            await cursor.executemany(sql, args)
            return int(cursor.rowcount)
        except BaseException as exc:
            translated = translate(exc)
            if translated is exc:
                raise
            raise translated from exc
        finally:
            await cursor.close()

    async def execute_script(self, statements: Sequence[str]) -> None:
        for statement in statements:
            await self._run(statement, None)


class MySQLDatabase(Database):
    dialect = "mysql"

    def __init__(
        self,
        url: MySQLUrl,
        *,
        pool_min: int = 1,
        pool_max: int = 10,
        connect_timeout_s: float = 5.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(retry)
        self.url = url
        self.queries = QueryBook.load("mysql")
        self._pool_min = pool_min
        self._pool_max = pool_max
        self._connect_timeout_s = connect_timeout_s
        self._pool: Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._closed = False

    def connection_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "host": self.url.host,
            "port": self.url.port,
            "user": self.url.user,
            "password": self.url.password,
            "database": self.url.database,
            "charset": "utf8mb4",
            "autocommit": False,
            "connect_timeout": max(1, round(self._connect_timeout_s)),
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
            # asyncmy sends ``SET sql_mode=<value>`` verbatim, so the value carries its quotes.
            "sql_mode": "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,NO_ZERO_DATE'",
            "stmt_cache_size": 256,
        }
        if self.url.unix_socket:
            kwargs["unix_socket"] = self.url.unix_socket
        return kwargs

    async def _ensure_pool(self) -> Pool:
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise DatabaseUnavailable("the database connection is closed")
        async with self._pool_lock:
            if self._pool is None:
                try:
                    self._pool = await asyncmy.create_pool(
                        minsize=self._pool_min,
                        maxsize=self._pool_max,
                        pool_recycle=3600,
                        **self.connection_kwargs(),
                    )
                except BaseException as exc:
                    if is_connection_error(exc) or isinstance(exc, my_errors.OperationalError):
                        raise ConnectionLost(type(exc).__name__) from exc
                    raise
            return self._pool

    async def connect(self) -> ServerInfo:
        try:
            await self._ensure_pool()
        except ConnectionLost as exc:
            raise DatabaseUnavailable(
                f"cannot connect to the database at {self.url.redacted()}"
            ) from exc

        async def probe(tx: Any) -> ServerInfo:
            row = await tx.fetch_one("server_version")
            variables = await tx.fetch_all("server_variables")
            found = {str(v["Variable_name"]).lower(): str(v["Value"]) for v in variables}
            return evaluate_mysql_server(str(row["version"]) if row else "", found)

        return await self.read(probe)

    async def _run_once(self, unit: Unit[T], *, write: bool) -> T:
        pool = await self._ensure_pool()
        try:
            conn: Connection = await pool.acquire()
        except BaseException as exc:
            if is_connection_error(exc) or isinstance(exc, my_errors.OperationalError):
                raise ConnectionLost(type(exc).__name__) from exc
            raise
        reusable = False
        try:
            try:
                result = await unit(MySQLTx(conn, self.queries))
            except BaseException:
                reusable = await self._rollback(conn)
                raise
            try:
                await conn.commit()
            except BaseException as exc:
                raise CommitOutcomeUnknown() from exc
            reusable = True
            return result
        finally:
            if not reusable:
                conn.close()
            pool.release(conn)

    @staticmethod
    async def _rollback(conn: Connection) -> bool:
        """Roll back; answers whether the connection is fit to go back to the pool."""
        try:
            await asyncio.shield(conn.rollback())
        except BaseException:
            return False
        return True

    def _exhausted(self, exc: Exception) -> Exception:
        if isinstance(exc, TransientConflict):
            return DatabaseUnavailable("the database is busy (lock conflicts); retry shortly")
        return DatabaseUnavailable()

    async def ping(self) -> None:
        async def select_one(tx: Any) -> None:
            await tx.fetch_one("ping")

        try:
            await asyncio.wait_for(self.read(select_one), timeout=self._connect_timeout_s)
        except TimeoutError as exc:
            raise DatabaseUnavailable("the database did not answer in time") from exc

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
            await pool.wait_closed()

    def pool_stats(self) -> tuple[int, int]:
        if self._pool is None:
            return 0, self._pool_max
        return int(self._pool.size) - int(self._pool.freesize), self._pool_max
