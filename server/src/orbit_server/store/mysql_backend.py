"""MySQL 8.4+ / MariaDB 10.11+ backend on asyncmy with a bounded pool.

Every connection runs READ COMMITTED (DATABASE.md: REPEATABLE READ gap locks block inserts
behind a claimer), a short lock wait timeout, and autocommit off, so a unit's first statement
opens its transaction and no extra ``BEGIN`` round trip is paid. Read-only units run on a
smaller pool of autocommit connections: under READ COMMITTED each statement sees the latest
commits either way, and a read then costs no ``COMMIT`` round trip. The startup probe runs on a
connection of its own before the pool exists, because the session variable names it sets differ
between MySQL and MariaDB. With several hosts in the URL, the pools talk to the first writable
primary and are rebuilt on another node when it fails (``MySQLDatabase``; decision 0028).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncmy
import structlog
from asyncmy import errors as my_errors
from asyncmy.connection import Connection
from asyncmy.cursors import DictCursor
from asyncmy.pool import Pool

from orbit_server.errors import (
    CommitOutcomeUnknown,
    DatabaseBusy,
    DatabaseUnavailable,
    InvalidRequest,
)
from orbit_server.store.base import (
    ConnectionLost,
    Database,
    DuplicateKey,
    NodeNotWritable,
    Params,
    RetryPolicy,
    Row,
    ServerInfo,
    T,
    TransientConflict,
    Unit,
    chunks,
    to_db_time,
    utc,
)
from orbit_server.store.probe import (
    GALERA_SYNCED,
    NotWritable,
    UnsupportedServer,
    evaluate_mysql_server,
    evaluate_node_role,
    isolation_variable,
)
from orbit_server.store.sql import QueryBook
from orbit_server.store.url import Endpoint, MySQLUrl, endpoint_text

log = structlog.get_logger("orbit.store")

ER_DUP_ENTRY = 1062
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
ROWS_PER_INSERT = 500  # rows per multi-row INSERT of execute_many
TEXT_BATCH_CHARS = 1 << 20  # most text sent in one multi-statement round trip (max_allowed_packet)
# Most values of a statement that waits as text: escaping one costs about 2 µs of CPU, a round
# trip about 130 µs (measured on a 2-core machine), so a larger statement runs prepared alone.
TEXT_VALUES = 100
CLOSE_GRACE_S = 5.0  # longest close() waits for connections still in use
# With several hosts, a node whose readiness check gets no answer this long is left for
# another: the check is two reads of server variables, milliseconds on a node that works.
SILENT_AFTER_S = 2.0
# A connection that could not be made or was lost: nothing of the unit was committed.
_CONNECTION_CODES = frozenset({2002, 2003, 2005, 2006, 2013, 2014, 2055, 1053, 1927, 4031})
_CONNECTION_EXCEPTIONS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    asyncio.IncompleteReadError,
    TimeoutError,
    my_errors.InterfaceError,
)
# The server refuses work for now: read-only after a failover, interrupted or timed-out
# statements, too many connections, access denied, unknown database.
_UNAVAILABLE_CODES = {
    1290: "the database is read-only",
    1047: "the database node is not ready (not a synced member of the primary component)",
    1792: "the database is read-only",
    1317: "the database interrupted the statement",
    1969: "the database timed out the statement",
    3024: "the database timed out the statement",
    1040: "the database has too many connections",
    1203: "the database user has too many connections",
    1045: "access to the database was denied",
    1044: "access to the database was denied",
    1049: "the database does not exist",
}
# The node refuses work until another is chosen: read-only, or a Galera node that left the
# primary component.
_NODE_REFUSES = frozenset({1290, 1792, 1047})
# Values the column cannot hold (too long, out of range, wrong type): the caller's input.
_DATA_CODES = frozenset({1264, 1265, 1292, 1366, 1406, 3140})


def _error_code(exc: BaseException) -> int | None:
    if isinstance(exc, my_errors.MySQLError) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


def is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, _CONNECTION_EXCEPTIONS) or _error_code(exc) in _CONNECTION_CODES


def could_not_connect(exc: BaseException) -> bool:
    """Opening or handing out a connection failed (nothing of any unit was sent)."""
    return is_connection_error(exc) or isinstance(exc, my_errors.OperationalError)


def translate(exc: BaseException) -> BaseException:
    """Map a driver error onto the seam's vocabulary (or return it unchanged)."""
    code = _error_code(exc)
    if code == ER_DUP_ENTRY:
        return DuplicateKey(str(exc))
    if code in (ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT):
        return TransientConflict(f"mysql error {code}")
    if code in _UNAVAILABLE_CODES:
        return DatabaseUnavailable(_UNAVAILABLE_CODES[code])
    if code in _DATA_CODES:
        return InvalidRequest("a value is too long or out of range for its field")
    if is_connection_error(exc):
        return ConnectionLost(type(exc).__name__)
    return exc


async def translated(call: Awaitable[T]) -> T:
    """Await a driver call, raising the seam's errors instead of the driver's."""
    try:
        return await call
    except Exception as exc:
        mapped = translate(exc)
        if mapped is exc:
            raise
        raise mapped from exc


def _convert_params(args: tuple[Any, ...]) -> tuple[Any, ...]:
    if not any(isinstance(a, datetime) for a in args):
        return args
    return tuple(to_db_time(a) if isinstance(a, datetime) else a for a in args)


def _convert_row(row: dict[str, Any]) -> Row:
    for key, value in row.items():
        if isinstance(value, datetime):
            row[key] = utc(value)
    return row


Statement = tuple[str, tuple[Any, ...]]  # positional text and its values
# A deferred write as it waits: text with its values escaped in, to share a multi-statement
# round trip, or — with more values than TEXT_VALUES — its statement, to run prepared alone.
Deferred = str | Statement


class _SendFailed(Exception):
    """An item of ``_send`` failed: which one, and the driver's error (its cause)."""

    def __init__(self, index: int) -> None:
        super().__init__(f"statement {index} of a batch failed")
        self.index = index


async def _send(cursor: Any, items: Sequence[Deferred], skip: int) -> int:
    """Run ``items`` in order: consecutive texts as multi-statement queries, one round trip for
    as many as fit in ``TEXT_BATCH_CHARS`` (a longer one goes alone), statements as prepared
    ones. Answers the rows changed by the items after the first ``skip``; the cursor is left
    on the last one's result. A failure is raised as ``_SendFailed``, which says which item
    failed, the driver's error its cause."""
    count, at, i = 0, 0, 0
    try:
        while at < len(items):
            item = items[at]
            i = at
            if not isinstance(item, str):
                await cursor.execute(item[0], _convert_params(item[1]))
                count += int(cursor.rowcount) if at >= skip else 0
                at += 1
                continue
            texts = [item]
            size = len(item)
            while at + len(texts) < len(items):
                following = items[at + len(texts)]
                if not isinstance(following, str) or size + len(following) > TEXT_BATCH_CHARS:
                    break
                texts.append(following)
                size += len(following) + 2
            await cursor.execute(";\n".join(texts))  # no arguments: sent as it is
            for i in range(at, at + len(texts)):
                if i > at:
                    await cursor.nextset()
                if i >= skip:
                    count += int(cursor.rowcount)
            at += len(texts)
    except Exception as exc:
        raise _SendFailed(i) from exc
    return count


def _cause(failed: _SendFailed) -> Exception:
    error = failed.__cause__
    assert isinstance(error, Exception)
    return error


class MySQLTx:
    """One transaction on one pooled connection. Statements run as server-side prepared
    statements; deferred writes (``defer``) wait, small ones as text, and go out with the next
    statement (or before the commit), small ones in one multi-statement round trip."""

    dialect: Literal["mysql"] = "mysql"

    def __init__(self, conn: Connection, queries: QueryBook) -> None:
        self._conn = conn
        self._queries = queries
        self._deferred: list[Deferred] = []
        self.events: list[object] = []

    def publish(self, event: object) -> None:
        self.events.append(event)

    async def _cursor_call(self, use: Callable[[Any], Awaitable[T]]) -> T:
        cursor: Any = self._conn.cursor(DictCursor)
        try:
            return await translated(use(cursor))
        finally:
            await cursor.close()

    async def _run(self, cursor: Any, statements: Sequence[Statement]) -> int:
        """Run ``statements`` on ``cursor`` after the deferred writes, sharing their round trip
        where they are small; answers the rows the statements changed, the cursor left on the
        last one's result. A lone statement with nothing deferred runs prepared."""
        batch, self._deferred = self._deferred, []
        skip = len(batch)
        if batch or len(statements) > 1:
            batch += [self._waiting(sql, args) for sql, args in statements]
        else:
            batch = list(statements)
        try:
            return await _send(cursor, batch, skip)
        except _SendFailed as failed:
            error = _cause(failed)
            # A deferred write's duplicate key is not this statement's: a caller that expects
            # one from its own insert must not take it for that.
            if failed.index < skip and isinstance(translate(error), DuplicateKey):
                raise RuntimeError("a deferred write met a duplicate key") from error
            raise error from None

    def _waiting(self, sql: str, args: tuple[Any, ...]) -> Deferred:
        """The statement as it waits to be sent: as text with its values escaped in (what the
        text protocol sends), unless escaping its many values costs more than a round trip."""
        if len(args) > TEXT_VALUES:
            return (sql, args)
        conn: Any = self._conn
        literal = conn.literal
        return sql % tuple(literal(a) for a in _convert_params(args))

    async def flush(self) -> None:
        """Send the deferred writes (in one round trip where they are small); the unit's end
        calls it before COMMIT. (Not with the COMMIT: after a multi-statement query the driver
        keeps the first result's "in transaction" status, and its pool would then close the
        connection instead of reusing it.)"""
        if self._deferred:
            batch, self._deferred = self._deferred, []

            async def use(cursor: Any) -> None:
                try:
                    await _send(cursor, batch, len(batch))
                except _SendFailed as failed:
                    raise _cause(failed) from None

            await self._cursor_call(use)

    async def fetch_all(self, query: str, params: Params | None = None) -> list[Row]:
        return await self._fetch(*self._queries.bind(query, params or {}))

    async def fetch_union(self, query: str, many: Sequence[Params]) -> list[Row]:
        return await self._fetch(*self._queries[query].bind_union(many))

    async def _fetch(self, sql: str, args: tuple[Any, ...]) -> list[Row]:
        async def use(cursor: Any) -> list[Row]:
            await self._run(cursor, [(sql, args)])
            return [_convert_row(r) for r in await cursor.fetchall()]

        return await self._cursor_call(use)

    async def fetch_one(self, query: str, params: Params | None = None) -> Row | None:
        rows = await self.fetch_all(query, params)
        return rows[0] if rows else None

    async def execute(self, query: str, params: Params | None = None) -> int:
        sql, args = self._queries.bind(query, params or {})

        async def use(cursor: Any) -> int:
            return await self._run(cursor, [(sql, args)])

        return await self._cursor_call(use)

    def _statements(self, query: str, rows: Sequence[Params]) -> list[Statement]:
        """``rows`` of ``query`` as statements: one multi-row statement per chunk where the
        query has a rows form (a round trip and a statement for many rows), else one each."""
        named = self._queries[query]
        args = [named.args(r) for r in rows]
        form = named.rows_form
        if form is None:
            return [(named.positional, a) for a in args]
        head, row, tail = form
        return [
            (head + ", ".join([row] * len(chunk)) + tail, tuple(v for a in chunk for v in a))
            for chunk in chunks(args, ROWS_PER_INSERT)
        ]

    async def execute_many(self, query: str, rows: Sequence[Params]) -> int:
        if not rows:
            return 0
        statements = self._statements(query, rows)

        async def together(cursor: Any) -> int:
            return await self._run(cursor, statements)

        return await self._cursor_call(together)

    def defer(self, query: str, params: Params | None = None) -> None:
        self._deferred.append(self._waiting(*self._queries.bind(query, params or {})))

    def defer_many(self, query: str, rows: Sequence[Params]) -> None:
        self._deferred.extend(self._waiting(sql, a) for sql, a in self._statements(query, rows))

    async def execute_script(self, statements: Sequence[str]) -> None:
        if self._deferred:
            raise RuntimeError("a script runs in a unit of its own, never after deferred writes")
        for statement in statements:

            async def use(cursor: Any, sql: str = statement) -> None:
                await cursor.execute(sql)

            await self._cursor_call(use)


@dataclass(frozen=True, slots=True)
class DatabaseNode:
    """The server the pools talk to and what it is: ``primary`` or ``galera synced``."""

    endpoint: Endpoint
    role: str
    detail: str = ""

    @property
    def address(self) -> str:
        return endpoint_text(self.endpoint)


class NoWritableNode(ConnectionLost):
    """No host of the URL is a writable primary now; the message says what each one is.
    A lost connection for the unit that meets it (retried, then refused with a 503)."""

    def __init__(self, message: str, *, unsupported: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.unsupported = unsupported


def _name_values(rows: Sequence[Any]) -> dict[str, str]:
    """``SHOW VARIABLES``/``SHOW STATUS`` rows (tuples or dicts) as lower-case name -> value."""
    found: dict[str, str] = {}
    for row in rows:
        name, value = tuple(row.values()) if isinstance(row, dict) else tuple(row)
        found[str(name).lower()] = "" if value is None else str(value)
    return found


class MySQLDatabase(Database):
    """A MySQL-family database behind one or several hosts (``mysql://u@h1,h2:3307/db``).

    Every pool talks to one node: the first host, in the URL's order, that answers and is a
    writable primary (``evaluate_node_role``), chosen when the pools are built. A unit that
    loses its connection, or finds the node read-only or out of the Galera primary component,
    drops the pools; the next unit chooses again, the node it used first, then the others,
    each looked up by name again. Selection runs once at a time, and units that waited for a
    failed one fail with it instead of trying every host again."""

    dialect = "mysql"

    def __init__(
        self,
        url: MySQLUrl,
        *,
        pool_min: int = 1,
        pool_max: int = 10,
        connect_timeout_s: float = 5.0,
        lock_wait_timeout_s: int = 5,
        unit_timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(retry, unit_timeout_s)
        self.url = url
        self.queries = QueryBook.load("mysql")
        # A quarter of the connections (when there are at least four) serve read-only units.
        self._read_max = pool_max // 4 if pool_max >= 4 else 0
        self._pool_min = min(pool_min, pool_max - self._read_max)
        self._pool_max = pool_max - self._read_max
        self._read_pool: Pool | None = None
        self._connect_timeout_s = connect_timeout_s
        self._lock_wait_timeout_s = lock_wait_timeout_s
        self._pool: Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._closed = False
        self._info: ServerInfo | None = None
        self.isolation_variable = "transaction_isolation"
        #: The node the pools talk to (None while there are no pools).
        self.node: DatabaseNode | None = None
        self._current = url.endpoints[0]  # tried first at the next selection
        self._silent: Endpoint | None = None  # stopped answering: tried last at the next one
        self._selections_failed = 0
        self._last_failure: NoWritableNode | None = None
        self._retiring: set[asyncio.Task[None]] = set()

    def connection_kwargs(
        self,
        init_command: str | None = None,
        *,
        autocommit: bool = False,
        endpoint: Endpoint | None = None,
    ) -> dict[str, Any]:
        host, port = endpoint or self._current
        kwargs: dict[str, Any] = {
            "host": host,
            "port": port,
            "user": self.url.user,
            "password": self.url.password,
            "database": self.url.database,
            "charset": "utf8mb4",
            "autocommit": autocommit,
            "connect_timeout": max(1, round(self._connect_timeout_s)),
            # asyncmy sends ``SET sql_mode=<value>`` verbatim, so the value carries its quotes.
            "sql_mode": "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,NO_ZERO_DATE'",
            "stmt_cache_size": 256,
        }
        if init_command:
            kwargs["init_command"] = init_command
        if self.url.unix_socket:
            kwargs["unix_socket"] = self.url.unix_socket
        return kwargs

    def session_setup(self, *, galera: bool = False) -> str:
        """One statement run on every pooled connection as it opens. On Galera, reads wait
        until the node has applied every write the cluster committed before them
        (``wsrep_sync_wait`` bit 1), so a node taken over after a failover never answers
        from a state older than what Orbit was told was committed."""
        setup = (
            f"SET SESSION {self.isolation_variable} = 'READ-COMMITTED', "
            f"SESSION innodb_lock_wait_timeout = {int(self._lock_wait_timeout_s)}"
        )
        if galera:
            setup += ", SESSION wsrep_sync_wait = @@GLOBAL.wsrep_sync_wait | 1"
        return setup

    async def _connect_to(self, endpoint: Endpoint) -> Connection:
        try:
            conn: Connection = await asyncmy.connect(**self.connection_kwargs(endpoint=endpoint))
        except Exception as exc:
            mapped = translate(exc)
            if isinstance(mapped, DatabaseUnavailable):
                raise mapped from exc
            if isinstance(mapped, ConnectionLost) or could_not_connect(exc):
                raise DatabaseUnavailable(
                    f"cannot connect to the database at {endpoint_text(endpoint)}"
                ) from exc
            raise
        return conn

    async def open_connection(self) -> Connection:
        """A connection outside the pool (migration lock) to the node in use; errors are the
        seam's."""
        if self.node is None:
            await self.connect()
        return await self._connect_to(self._current)

    async def _probe(self, endpoint: Endpoint) -> tuple[ServerInfo, DatabaseNode]:
        """What ``endpoint`` is: its settings checked (UnsupportedServer) and its role
        (NotWritable unless it may take Orbit's writes)."""
        conn = await self._connect_to(endpoint)
        try:
            version = await self._raw_fetch(conn, "server_version")
            variables = _name_values(await self._raw_fetch(conn, "server_variables"))
            galera = variables.get("wsrep_on", "").upper() == "ON"
            status = _name_values(await self._raw_fetch(conn, "node_status")) if galera else {}
            info = evaluate_mysql_server(str(version[0][0]) if version else "", variables)
            role = evaluate_node_role(variables, status)
            if galera:
                await self._check_galera_tables(conn)
        finally:
            conn.close()
        return info, DatabaseNode(endpoint, role.role, role.detail)

    async def _check_galera_tables(self, conn: Connection) -> None:
        """Galera certifies writes by primary key and replicates InnoDB only."""
        unsafe = await self._raw_fetch(conn, "tables_unsafe_for_galera")
        if unsafe:
            names = ", ".join(
                f"{name} ({engine}{'' if has_pk else ', no primary key'})"
                for name, engine, has_pk in unsafe
            )
            raise UnsupportedServer(
                f"on Galera every table must be InnoDB with a primary key; these are not: {names}"
            )

    async def _select_node(self) -> tuple[ServerInfo, DatabaseNode]:
        """The first writable primary: the node used last first, then the URL's order."""
        order = [self._current, *(e for e in self.url.endpoints if e != self._current)]
        if self._silent in order and len(order) > 1:
            order = [e for e in order if e != self._silent] + [self._silent]
        refused: list[str] = []
        unsupported = False
        for endpoint in order:
            try:
                async with asyncio.timeout(self._connect_timeout_s * 2):
                    info, node = await self._probe(endpoint)
            except (DatabaseUnavailable, TimeoutError) as exc:
                reason = exc.message if isinstance(exc, DatabaseUnavailable) else "no answer"
                refused.append(f"{endpoint_text(endpoint)}: {reason}")
            except (NotWritable, UnsupportedServer) as exc:
                unsupported = unsupported or isinstance(exc, UnsupportedServer)
                refused.append(f"{endpoint_text(endpoint)}: {exc}")
            else:
                self._silent = None
                if endpoint != self._current:
                    log.warning("database node changed", node=node.address, role=node.role,
                                refused="; ".join(refused))  # fmt: skip
                self._current = endpoint
                return info, node
        if len(order) == 1:
            raise NoWritableNode(refused[0].partition(": ")[2], unsupported=unsupported)
        raise NoWritableNode(
            "no database host is a writable primary: " + "; ".join(refused),
            unsupported=unsupported,
        )

    async def _raw_fetch(self, conn: Connection, query: str) -> list[Any]:
        sql, args = self.queries.bind(query, {})
        async with conn.cursor() as cursor:
            await translated(cursor.execute(sql, args))
            rows: list[Any] = await cursor.fetchall()
        return rows

    async def _ensure_pool(self, *, read: bool = False) -> Pool:
        """The write pool, or with ``read`` the autocommit pool of read-only units (the write
        pool when there is none); built on a node chosen now when there is none."""
        read = read and self._read_max > 0
        pool = self._read_pool if read else self._pool
        if pool is not None:
            return pool
        failed_before = self._selections_failed
        async with self._pool_lock:
            if self._closed:
                raise DatabaseUnavailable("the database connection is closed")
            if self._pool is None:
                if self._selections_failed != failed_before and self._last_failure is not None:
                    raise self._last_failure  # it failed while this unit waited for it
                try:
                    await self._build_pools()
                except NoWritableNode as exc:
                    self._selections_failed += 1
                    self._last_failure = exc
                    raise
            if read and self._read_pool is None:
                try:
                    self._read_pool = await self._create_pool(0, self._read_max, True)
                except ConnectionLost:
                    assert self._pool is not None
                    self._drop_pools(self._pool)  # its node went away: choose again
                    raise
            pool = self._read_pool if read else self._pool
            assert pool is not None
            return pool

    async def _build_pools(self) -> None:
        info, node = await self._select_node()
        self.isolation_variable = isolation_variable(info.version)
        self._info, self.node = info, node
        try:
            self._pool = await self._create_pool(self._pool_min, self._pool_max, False)
        except ConnectionLost as exc:
            self.node = None
            raise NoWritableNode(f"the database at {node.address} went away") from exc

    async def _create_pool(self, minsize: int, maxsize: int, autocommit: bool) -> Pool:
        node = self.node
        assert node is not None
        setup = self.session_setup(galera=node.role == GALERA_SYNCED)
        try:
            pool: Pool = await asyncmy.create_pool(
                minsize=minsize,
                maxsize=maxsize,
                pool_recycle=3600,
                **self.connection_kwargs(setup, autocommit=autocommit, endpoint=node.endpoint),
            )
        except Exception as exc:
            if could_not_connect(exc):
                raise ConnectionLost(type(exc).__name__) from exc
            raise
        return pool

    async def connect(self) -> ServerInfo:
        try:
            await self._ensure_pool()
        except NoWritableNode as exc:
            if exc.unsupported:
                raise UnsupportedServer(exc.message) from exc
            raise DatabaseUnavailable(exc.message) from exc
        except ConnectionLost as exc:
            raise DatabaseUnavailable(
                f"cannot connect to the database at {self.url.redacted()}"
            ) from exc
        assert self._info is not None
        return self._info

    def database_node(self) -> tuple[str, str] | None:
        node = self.node
        return None if node is None else (node.address, node.role)

    def _drop_current_pools(self) -> None:
        for pool in (self._pool, self._read_pool):
            if pool is not None:
                self._drop_pools(pool)
                return

    def _drop_pools(self, pool: Pool) -> None:
        """``pool``'s node failed: the next unit chooses a node again. The old pools close
        as their connections come back (in-flight units end on their own), or are
        terminated after a grace period."""
        if pool is not self._pool and pool is not self._read_pool:
            return  # another unit dropped them already
        dropped = [p for p in (self._pool, self._read_pool) if p is not None]
        self._pool = self._read_pool = None
        self.node = None
        for old in dropped:
            old.close()
            task = asyncio.get_running_loop().create_task(self._retire(old))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    async def _retire(self, pool: Pool) -> None:
        try:
            async with asyncio.timeout(min(self.unit_timeout_s, CLOSE_GRACE_S)):
                await pool.wait_closed()
        except TimeoutError:
            pool.terminate()
        except Exception:  # a dead server's connections: nothing to save
            pool.terminate()

    async def _acquire(self, pool: Pool) -> Connection:
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                conn: Connection = await pool.acquire()
        except TimeoutError as exc:
            raise DatabaseBusy("no database connection became free in time") from exc
        except RuntimeError as exc:  # the pool was closed after this unit took it
            if pool is self._pool or pool is self._read_pool:
                raise
            raise ConnectionLost("the pool was replaced") from exc
        except Exception as exc:
            if could_not_connect(exc):
                self._drop_pools(pool)
                raise ConnectionLost(type(exc).__name__) from exc
            raise
        return conn

    async def _run_once(self, unit: Unit[T], *, write: bool, timeout_s: float) -> T:
        pool = await self._ensure_pool(read=not write)
        try:
            return await self._run_on(pool, unit, timeout_s)
        except (ConnectionLost, CommitOutcomeUnknown, DatabaseUnavailable) as exc:
            if not _node_failed(exc):
                raise
            self._drop_pools(pool)
            if isinstance(exc, DatabaseUnavailable):
                # Refused before COMMIT (read-only, not primary): nothing was written, so the
                # unit is retried, on the node chosen next, like one that lost its connection.
                raise ConnectionLost(exc.message) from exc
            raise

    async def _run_on(self, pool: Pool, unit: Unit[T], timeout_s: float) -> T:
        conn = await self._acquire(pool)
        reusable = False
        try:
            try:
                async with asyncio.timeout(timeout_s):
                    tx = MySQLTx(conn, self.queries)
                    result = await unit(tx)
                    await tx.flush()
            except asyncio.CancelledError:
                raise  # mid-statement: the connection's state is unknown, it is closed below
            except TimeoutError as exc:
                raise DatabaseBusy("the database did not answer in time") from exc
            except BaseException:
                reusable = await self._rollback(conn)
                raise
            if pool is self._read_pool:  # autocommit: nothing to commit
                reusable = True
                return result
            try:
                async with asyncio.timeout(timeout_s):
                    await conn.commit()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # includes the timeout: the COMMIT may have landed
                if _error_code(exc) == ER_LOCK_DEADLOCK:
                    # A deadlock at COMMIT is a Galera certification failure: the server rolled
                    # the transaction back (a definite outcome), and the unit may run again.
                    reusable = await self._rollback(conn)
                    raise TransientConflict(f"mysql error {ER_LOCK_DEADLOCK} at commit") from exc
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
            await conn.rollback()
        except Exception:
            return False
        return True

    def _exhausted(self, exc: Exception) -> Exception:
        if isinstance(exc, TransientConflict):
            return DatabaseBusy("the database is busy (lock conflicts); retry shortly")
        return DatabaseUnavailable()

    async def ping(self) -> None:
        """The node in use answers and may still take writes (a node made read-only, or a
        Galera node out of the primary component, is dropped: the next unit chooses again)."""

        async def role(tx: Any) -> tuple[list[Row], list[Row]]:
            variables = await tx.fetch_all("node_variables")
            galera = _name_values(variables).get("wsrep_on", "").upper() == "ON"
            return variables, (await tx.fetch_all("node_status") if galera else [])

        several = len(self.url.endpoints) > 1
        try:
            async with asyncio.timeout(
                min(self._connect_timeout_s, SILENT_AFTER_S) if several else self._connect_timeout_s
            ):
                variables, status = await self.read(role)
        except TimeoutError as exc:
            if several:
                # A node that neither answers nor fails (frozen, its host hung, packets
                # dropped) would hold every unit until it woke: leave it, try it last.
                self._silent = self._current
                self._drop_current_pools()
            raise DatabaseUnavailable("the database did not answer in time") from exc
        try:
            evaluate_node_role(_name_values(variables), _name_values(status))
        except NotWritable as exc:
            node = self.node
            self._drop_current_pools()
            where = f" at {node.address}" if node else ""
            raise NodeNotWritable(f"the database node{where} is not writable: {exc}") from exc

    async def close(self) -> None:
        self._closed = True
        pools = [p for p in (self._pool, self._read_pool) if p is not None]
        self._pool = self._read_pool = None
        self.node = None
        for pool in pools:
            pool.close()
            try:
                # Connections still in use come back first, briefly: by now the node's work is
                # stopped, and one that does not come back (its unit was cancelled, or the
                # server went away under it) must not hold the process for a unit's timeout.
                async with asyncio.timeout(min(self.unit_timeout_s, CLOSE_GRACE_S)):
                    await pool.wait_closed()
            except TimeoutError:
                pool.terminate()  # the server rolls back what they had not committed
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)

    def pool_stats(self) -> tuple[int, int]:
        used = sum(
            int(p.size) - int(p.freesize) for p in (self._pool, self._read_pool) if p is not None
        )
        return used, self._pool_max + self._read_max


def _node_failed(exc: BaseException) -> bool:
    """Whether ``exc`` says the node itself failed (not the unit): its connection was lost,
    a COMMIT's connection was, or it refuses writes (read-only, not in the primary component)."""
    if isinstance(exc, NoWritableNode):
        return False  # no pool was used
    if isinstance(exc, ConnectionLost):
        return True
    if isinstance(exc, CommitOutcomeUnknown):
        cause = exc.__cause__
        return cause is not None and is_connection_error(cause)
    if isinstance(exc, DatabaseUnavailable) and not isinstance(exc, DatabaseBusy):
        return _error_code(exc.__cause__) in _NODE_REFUSES if exc.__cause__ else False
    return False
