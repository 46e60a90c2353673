"""The storage seam: a :class:`Database` runs units of work; a :class:`Tx` runs named queries.

A *unit of work* is an async function ``unit(tx) -> T`` that only talks to the database through
``tx``: no network I/O, no waiting on other tasks (STYLE rule 2). :meth:`Database.run` opens a
transaction, runs the unit, commits, and retries the *whole unit* on transient conflicts
(deadlock, lock wait timeout, SQLite busy), bounded. Its error contract:

* the unit's own exceptions propagate after a rollback;
* :class:`~orbit_server.errors.DatabaseUnavailable` — nothing was committed;
* :class:`~orbit_server.errors.CommitOutcomeUnknown` — COMMIT was sent but not confirmed.

Domain events the unit records with :meth:`Tx.publish` reach the node's :class:`EventBus` after
the COMMIT of the run that made them, and never from a run that rolled back.
"""

from __future__ import annotations

import abc
import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import msgspec
import structlog

from orbit_server.errors import DatabaseBusy, DatabaseUnavailable
from orbit_server.scope import Scope
from orbit_server.store.events import EventBus
from orbit_server.store.sql import Dialect, QueryBook

log = structlog.get_logger("orbit.store")

T = TypeVar("T")
Row = dict[str, Any]
Params = Mapping[str, Any]


class DuplicateKey(Exception):
    """An INSERT hit a unique index; the transaction is still usable."""


class TransientConflict(Exception):
    """Deadlock, lock wait timeout or SQLite busy: the whole unit may be retried."""


class ConnectionLost(Exception):
    """The connection failed before COMMIT; nothing of the unit was committed."""


class NodeNotWritable(DatabaseUnavailable):
    """The database server answers but may not take Orbit's writes now: read-only, or a
    Galera node that is not a synced member of the primary component (SPEC S2)."""


class Tx(Protocol):
    """One open transaction. Every method takes a query *name* and its parameters."""

    @property
    def dialect(self) -> Dialect: ...

    events: list[object]
    """The domain events recorded by this run of the unit, in order."""

    def publish(self, event: object) -> None:
        """Record a domain event, delivered to the node's bus after COMMIT (never on rollback
        or when the unit is run again)."""
        ...

    async def fetch_all(self, query: str, params: Params | None = None) -> list[Row]: ...

    async def fetch_one(self, query: str, params: Params | None = None) -> Row | None: ...

    async def fetch_union(self, query: str, many: Sequence[Params]) -> list[Row]:
        """The rows of ``query`` run once per set of parameters, in one statement."""
        ...

    async def execute(self, query: str, params: Params | None = None) -> int:
        """Run a statement; answers the number of rows it changed."""
        ...

    async def execute_many(self, query: str, rows: Sequence[Params]) -> int: ...

    def defer(self, query: str, params: Params | None = None) -> None:
        """A write whose row count the unit does not read: sent with the unit's next statement,
        or before its commit, in the same round trip where the database allows several
        statements in one (MySQL/MariaDB; SQLite runs it at once). An error it meets is raised
        by that next statement or the commit, and fails the unit as any other would."""
        ...

    def defer_many(self, query: str, rows: Sequence[Params]) -> None:
        """``execute_many`` as a deferred write (see ``defer``)."""
        ...

    async def execute_script(self, statements: Sequence[str]) -> None:
        """Raw DDL from migration files (never user input)."""
        ...


Unit = Callable[[Tx], Awaitable[T]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries of a whole unit on transient conflicts."""

    max_attempts: int = 6
    base_delay_s: float = 0.005
    max_delay_s: float = 0.25

    def delay(self, attempt: int) -> float:
        """Full-jitter exponential backoff before retry ``attempt`` (1-based)."""
        ceiling = min(self.max_delay_s, self.base_delay_s * (2 ** (attempt - 1)))
        return random.uniform(0, ceiling)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the startup probe learned about the database server."""

    dialect: Dialect
    version: str
    warnings: tuple[str, ...] = ()


class Availability:
    """Whether the database answers, as this process sees it, and the lines that say so: one
    warning when it stops answering, a reminder every ``report_every_s`` while it stays away
    (with how many units and checks it refused meanwhile), one info line when it answers
    again. It is the one holder of that state: units of work, readiness checks and anything
    else that meets the outage report it here, and log it themselves at DEBUG only (see
    :func:`~orbit_server.errors.is_outage`), so an outage is a few lines, not hundreds a
    second. A database that answers but is busy (``DatabaseBusy``) is no outage.

    ``now`` is a monotonic clock in seconds (injectable for tests)."""

    def __init__(
        self, report_every_s: float = 60.0, *, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.report_every_s = report_every_s
        self._now = now
        self.down_since: float | None = None
        self.refused = 0
        self.reason: str | None = None
        self._reported = 0.0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, error: DatabaseUnavailable) -> None:
        if isinstance(error, DatabaseBusy):
            return  # it answers, it is only busy: no outage to tell
        now = self._now()
        self.refused += 1
        self.reason = error.message
        if self.down_since is None:
            self.down_since = self._reported = now
            log.warning("database unavailable: refusing work until it answers again",
                        reason=error.message)  # fmt: skip
        elif now - self._reported >= self.report_every_s:
            self._reported = now
            log.warning("database still unavailable", down_s=round(now - self.down_since, 1),
                        refused=self.refused, reason=error.message)  # fmt: skip

    def answered(self) -> None:
        if self.down_since is not None:
            log.info("database available again",
                     down_s=round(self._now() - self.down_since, 1),
                     refused=self.refused)  # fmt: skip
            self.down_since, self.refused, self.reason = None, 0, None


class Database(abc.ABC):
    """A database backend. Build one with :func:`orbit_server.store.open_database`."""

    dialect: Dialect
    queries: QueryBook

    def __init__(self, retry: RetryPolicy | None = None, unit_timeout_s: float = 30.0) -> None:
        self.retry = retry or RetryPolicy()
        self.unit_timeout_s = unit_timeout_s
        self.availability = Availability()
        self.bus = EventBus()

    async def run(self, unit: Unit[T], *, write: bool = True, timeout_s: float | None = None) -> T:
        """Run ``unit`` in one transaction and commit; retry it whole on transient conflicts.

        ``timeout_s`` bounds each attempt (default: the backend's unit timeout); a unit that
        overruns is abandoned and rolled back (503), a COMMIT that overruns is an unknown outcome.
        """
        limit_s = self.unit_timeout_s if timeout_s is None else timeout_s
        events: list[object] = []

        async def recording(tx: Tx) -> T:
            nonlocal events
            result = await unit(tx)
            events = tx.events  # this run's: an earlier run's never reach the bus
            return result

        attempt = 0
        while True:
            attempt += 1
            try:
                result = await self._run_once(recording, write=write, timeout_s=limit_s)
            except DatabaseUnavailable as exc:
                self.availability.failed(exc)
                raise
            except (TransientConflict, ConnectionLost) as exc:
                # A lost connection is retried once (a pooled connection may have gone stale
                # while the server restarted); a second loss means the server is down, and
                # waiting for more connect timeouts would only delay the 503.
                limit = self.retry.max_attempts if isinstance(exc, TransientConflict) else 2
                if attempt >= limit:
                    error = self._exhausted(exc)
                    if isinstance(error, DatabaseUnavailable):
                        self.availability.failed(error)  # lock conflicts are only busy
                    raise error from exc
                await asyncio.sleep(self.retry.delay(attempt))
            else:
                self.availability.answered()
                if events:
                    await self.bus.deliver(events)
                return result

    def read(self, unit: Unit[T]) -> Awaitable[T]:
        """Run a read-only unit (no write lock on SQLite)."""
        return self.run(unit, write=False)

    @abc.abstractmethod
    async def _run_once(self, unit: Unit[T], *, write: bool, timeout_s: float) -> T: ...

    @abc.abstractmethod
    def _exhausted(self, exc: Exception) -> Exception:
        """The error to raise when retries are exhausted."""

    @abc.abstractmethod
    async def connect(self) -> ServerInfo:
        """Open connections and run the startup probe; raises if the server is refused."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise :class:`~orbit_server.errors.DatabaseUnavailable` unless the server answers."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    def database_node(self) -> tuple[str, str] | None:
        """(``host:port``, role) of the database server in use, when it is a network server
        (docs/operations/database-ha.md); None for an embedded database or before a node is
        chosen."""
        return None

    @abc.abstractmethod
    def pool_stats(self) -> tuple[int, int]:
        """(connections in use, pool maximum) for metrics."""


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in slices of at most ``size``: what one statement takes of a long list."""
    for at in range(0, len(items), size):
        yield items[at : at + size]


def utc(moment: datetime) -> datetime:
    """Aware UTC for values read back from a column (naive values are stored as UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def to_db_time(moment: datetime) -> datetime:
    """Naive UTC with microseconds, the form both dialects store."""
    if moment.tzinfo is UTC:  # the clock's own values: no conversion to compute
        return moment.replace(tzinfo=None)
    if moment.tzinfo is None:
        raise ValueError("timestamps given to the store must be timezone-aware")
    return moment.astimezone(UTC).replace(tzinfo=None)


def json_or_none(value: Any) -> str | None:
    """A nullable JSON column's text: NULL for None, else the value's JSON."""
    return None if value is None else msgspec.json.encode(value).decode()


def json_value(text: str | None) -> Any:
    """A nullable JSON column's value: None for NULL, else the decoded JSON."""
    return None if text is None else msgspec.json.decode(text)


def scope_params(scope: Scope) -> dict[str, Any]:
    """The ``:tenant`` and ``:environment`` parameters of a scoped query."""
    return {"tenant": scope.tenant, "environment": scope.environment}


def row_scope(row: Row) -> Scope:
    """The scope of a row that has ``tenant`` and ``environment`` columns."""
    return Scope(str(row["tenant"]), str(row["environment"]))


def json_table_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows for a MySQL/MariaDB ``JSON_TABLE`` as JSON text: times in the database's text
    form, absent values left out (an absent path reads as NULL)."""
    return msgspec.json.encode(
        [
            {
                key: to_db_time(value).strftime("%Y-%m-%d %H:%M:%S.%f")
                if isinstance(value, datetime)
                else value
                for key, value in row.items()
                if value is not None
            }
            for row in rows
        ]
    ).decode()
