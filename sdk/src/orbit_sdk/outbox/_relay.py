"""The relay: claims due outbox rows, delivers them to Orbit, records what became of them.

One pass (:meth:`OutboxRelay.run_once`) is three short transactions with the network calls
between them, never inside: claim (lease rows to this relay for ``lease``), deliver (task rows
in one ``POST /v1/tasks:batch``, workflow starts and signals one call each, every one with the
row's idempotency key), record (delivered with the Orbit id, retry later, or parked). A relay
that dies between claim and record leaves leased rows; when the lease runs out another relay
claims and delivers them again, and the idempotency key makes that the same task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from orbit_sdk._client import AsyncClient
from orbit_sdk._errors import (
    AuthenticationError,
    OrbitError,
    PermissionDeniedError,
    TransientError,
    TransportError,
)
from orbit_sdk._models import MAX_BATCH
from orbit_sdk.outbox._store import ClaimedRow, Measure, Outcome, RelayStore
from orbit_sdk.outbox._write import KIND_SIGNAL, KIND_TASK, KIND_WORKFLOW

__all__ = ["OutboxRelay", "RelayStats", "backoff_delay"]

log = logging.getLogger("orbit_sdk.outbox")

_RETRY_STATUSES = frozenset({401, 403, 408, 425, 429})
_PRUNE_EVERY = timedelta(minutes=1)
_PRUNE_LIMIT = 1000
_PRUNE_ROUNDS = 10
_MEASURE_EVERY = timedelta(seconds=5)
_CALLS_AT_ONCE = 8


@dataclass(frozen=True, slots=True)
class RelayStats:
    """A snapshot of one relay. The row counts are of the whole table, as last measured; the
    counters are this relay's since it started."""

    backlog: int = 0
    """Rows due for delivery now (not delivered, not parked, their retry time reached)."""
    undelivered: int = 0
    """Rows not delivered and not parked, due or waiting for a retry."""
    parked_rows: int = 0
    """Rows parked in the table (they wait for an operator)."""
    oldest_undelivered_age_s: float | None = None
    """Seconds since the oldest undelivered, unparked row was written; ``None``: no such row."""
    delivered: int = 0
    parked: int = 0
    retried: int = 0
    """Deliveries that failed for a reason that may pass and were scheduled again."""
    measured_at: datetime | None = None


def backoff_delay(
    failures: int, *, initial: float, maximum: float, rand: Callable[[], float]
) -> float:
    """Seconds before the next attempt after ``failures`` failed ones: doubling from
    ``initial`` up to ``maximum``, then a random half of it taken off (jitter), so rows that
    failed together do not come back together."""
    ceiling = min(maximum, initial * 2 ** max(failures - 1, 0))
    return float(ceiling * (0.5 + rand() / 2))


@dataclass
class _Counters:
    delivered: int = 0
    parked: int = 0
    retried: int = 0
    measure: Measure | None = None
    measured_at: datetime | None = None
    last_prune: datetime | None = None
    last_measure: datetime | None = None
    log_times: dict[str, float] = field(default_factory=dict)


class OutboxRelay:
    """Delivers ``orbit_outbox`` rows of the database at ``database_url`` to Orbit.

    Embed it in an application's event loop (``await relay.run()`` until :meth:`stop`) or call
    :meth:`run_once` from your own scheduler; ``orbit-outbox-relay`` runs one as a command.
    Several relays may run on one PostgreSQL or MySQL/MariaDB database at once (rows are
    claimed with ``FOR UPDATE SKIP LOCKED``); on SQLite run one.

    ``client`` is an :class:`orbit_sdk.AsyncClient` (default: one from ``ORBIT_URL`` and
    ``ORBIT_API_KEY``, closed by :meth:`aclose`). ``lease``: how long a claimed row is this
    relay's before another may claim it again; keep it well above the client's timeout.
    ``retention``: delivered rows are deleted after it (``None``: never). ``max_attempts``:
    park a row after this many failed deliveries (``None``: retry for ever, at most
    ``max_backoff`` apart). ``clock`` and ``rand`` are for tests.
    """

    def __init__(
        self,
        database_url: str,
        client: AsyncClient | None = None,
        *,
        batch_size: int = 100,
        poll_interval: float = 1.0,
        lease: timedelta = timedelta(seconds=120),
        retention: timedelta | None = timedelta(days=7),
        initial_backoff: float = 1.0,
        max_backoff: float = 300.0,
        max_attempts: int | None = None,
        relay_id: str | None = None,
        clock: Callable[[], datetime] | None = None,
        rand: Callable[[], float] | None = None,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}: {batch_size}")
        if poll_interval <= 0 or lease <= timedelta(0):
            raise ValueError("poll_interval and lease must be positive")
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1: {max_attempts}")
        self._store = RelayStore(database_url)
        self._own_client = client is None
        self._client = client if client is not None else AsyncClient()
        self._batch_size = batch_size
        self._poll_interval = poll_interval
        self._lease = lease
        self._retention = retention
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_attempts = max_attempts
        self.relay_id = (relay_id or f"{socket.gethostname()}:{os.getpid()}:{_suffix()}")[:64]
        self._clock = clock or (lambda: datetime.now(UTC))
        self._rand = rand or random.random
        self._counters = _Counters()
        self._stopping = asyncio.Event()

    @property
    def dialect(self) -> str:
        return self._store.dialect

    # -- running ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver until :meth:`stop` is called (or the task is cancelled): a pass right after
        a pass that found rows, else one every ``poll_interval`` seconds. A database or Orbit
        that is down is waited for, with backoff; the loop does not end on it."""
        self._stopping.clear()
        failures = 0
        while not self._stopping.is_set():
            try:
                handled = await self.run_once()
            except Exception as exc:  # the database is down: wait, try again
                failures += 1
                delay = backoff_delay(
                    failures, initial=self._poll_interval, maximum=30.0, rand=self._rand
                )
                self._warn("database", f"outbox relay pass failed, again in {delay:.1f} s: {exc}")
                await asyncio.to_thread(self._store.close)  # a new connection next time
                await self._wait(delay)
                continue
            failures = 0
            if handled == 0:
                await self._wait(self._poll_interval)

    def stop(self) -> None:
        """Make :meth:`run` return after the pass under way."""
        self._stopping.set()

    async def run_once(self) -> int:
        """One pass: claim a batch, deliver it, record the outcomes; prune and measure when
        due. Answers how many rows were claimed (0: nothing was due)."""
        now = self._clock()
        rows = await asyncio.to_thread(
            self._store.claim, self.relay_id, now, self._lease, self._batch_size
        )
        if rows:
            outcomes = await self._deliver(rows)
            await asyncio.to_thread(self._store.record, self.relay_id, self._clock(), outcomes)
            self._count(outcomes)
        await self._housekeeping()
        return len(rows)

    async def drain(self) -> int:
        """Pass after pass until one finds nothing due; answers the rows claimed in all."""
        total = 0
        while handled := await self.run_once():
            total += handled
        return total

    def stats(self) -> RelayStats:
        """The counters now and the table as last measured (at most a few seconds old while
        :meth:`run` runs)."""
        counters = self._counters
        measure = counters.measure
        age = None
        if measure is not None and measure.oldest_created_at is not None:
            age = max(0.0, (self._clock() - measure.oldest_created_at).total_seconds())
        return RelayStats(
            backlog=measure.due if measure else 0,
            undelivered=measure.undelivered if measure else 0,
            parked_rows=measure.parked if measure else 0,
            oldest_undelivered_age_s=age,
            delivered=counters.delivered,
            parked=counters.parked,
            retried=counters.retried,
            measured_at=counters.measured_at,
        )

    async def measure(self) -> RelayStats:
        """Measure the table now and answer :meth:`stats`."""
        now = self._clock()
        self._counters.measure = await asyncio.to_thread(self._store.measure, now)
        self._counters.measured_at = self._counters.last_measure = now
        return self.stats()

    def register_metrics(self, registry: Any = None) -> None:
        """Expose :meth:`stats` as Prometheus metrics (``orbit_outbox_*``) on ``registry``
        (default: ``prometheus_client``'s global one). Needs ``prometheus_client``."""
        from orbit_sdk.outbox._metrics import register

        register(self, registry)

    async def aclose(self) -> None:
        """Close the database connection, and the client if the relay made it."""
        await asyncio.to_thread(self._store.close)
        if self._own_client:
            await self._client.aclose()

    async def create_table(self) -> None:
        """Create ``orbit_outbox`` if it is missing (prefer your migrations; see the guide)."""
        await asyncio.to_thread(self._store.create_table)

    # -- delivering ---------------------------------------------------------------------------

    async def _deliver(self, rows: Sequence[ClaimedRow]) -> list[Outcome]:
        tasks = [row for row in rows if row.kind == KIND_TASK]
        others = [row for row in rows if row.kind != KIND_TASK]
        by_trace: dict[str | None, list[ClaimedRow]] = {}
        for row in tasks:
            by_trace.setdefault(row.payload.get("traceparent"), []).append(row)
        outcomes: list[Outcome] = []
        for traceparent, group in by_trace.items():
            outcomes += await self._deliver_tasks(group, traceparent)
        limit = asyncio.Semaphore(_CALLS_AT_ONCE)

        async def one(row: ClaimedRow) -> Outcome:
            async with limit:
                return await self._deliver_one(row)

        outcomes += await asyncio.gather(*(one(row) for row in others))
        return outcomes

    async def _deliver_tasks(
        self, rows: list[ClaimedRow], traceparent: str | None
    ) -> list[Outcome]:
        try:
            made = await self._client.submit_many(
                [row.payload["request"] for row in rows], traceparent=traceparent
            )
        except Exception as exc:
            if len(rows) > 1 and not _passing(exc):
                # The batch is all or nothing: find the rows Orbit refuses one by one.
                return [await self._deliver_one(row) for row in rows]
            return [self._failed(row, exc) for row in rows]
        return [
            Outcome(row.id, "delivered", result=task.id)
            for row, task in zip(rows, made, strict=True)
        ]

    async def _deliver_one(self, row: ClaimedRow) -> Outcome:
        payload = row.payload
        try:
            if row.kind == KIND_TASK:
                [task] = await self._client.submit_many(
                    [payload["request"]], traceparent=payload.get("traceparent")
                )
                return Outcome(row.id, "delivered", result=task.id)
            if row.kind == KIND_WORKFLOW:
                instance = await self._client.start_workflow(
                    payload["definition"],
                    payload.get("input"),
                    version=payload.get("version"),
                    idempotency_key=payload["idempotency_key"],
                )
                return Outcome(row.id, "delivered", result=instance.id)
            if row.kind == KIND_SIGNAL:
                signal = await self._client.signal_workflow(
                    payload["workflow_id"],
                    payload["name"],
                    payload.get("payload"),
                    idempotency_key=payload["idempotency_key"],
                )
                return Outcome(row.id, "delivered", result=signal.id)
            return self._failed(row, ValueError(f"unknown outbox row kind {row.kind!r}"))
        except Exception as exc:  # every failure is judged and recorded
            return self._failed(row, exc)

    def _failed(self, row: ClaimedRow, exc: BaseException) -> Outcome:
        error = _describe(exc)
        failures = row.attempts + 1
        out_of_attempts = self._max_attempts is not None and failures >= self._max_attempts
        if not _passing(exc) or out_of_attempts:
            log.warning("outbox row %s parked after %d attempt(s): %s", row.id, failures, error)
            return Outcome(row.id, "parked", error=error)
        delay = backoff_delay(
            failures, initial=self._initial_backoff, maximum=self._max_backoff, rand=self._rand
        )
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, int | float):
            delay = max(delay, float(retry_after))
        self._warn("orbit", f"outbox delivery failed, retrying in {delay:.1f} s: {error}")
        next_at = self._clock() + timedelta(seconds=delay)
        return Outcome(row.id, "retry", error=error, next_attempt_at=next_at)

    def _count(self, outcomes: list[Outcome]) -> None:
        for outcome in outcomes:
            if outcome.verdict == "delivered":
                self._counters.delivered += 1
            elif outcome.verdict == "retry":
                self._counters.retried += 1
            else:
                self._counters.parked += 1

    # -- housekeeping -------------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        now = self._clock()
        counters = self._counters
        if self._retention is not None and (
            counters.last_prune is None or now - counters.last_prune >= _PRUNE_EVERY
        ):
            counters.last_prune = now
            cutoff = now - self._retention
            for _ in range(_PRUNE_ROUNDS):  # bounded, so that a pass stays short
                pruned = await asyncio.to_thread(self._store.prune, cutoff, _PRUNE_LIMIT)
                if pruned < _PRUNE_LIMIT:
                    break
        if counters.last_measure is None or now - counters.last_measure >= _MEASURE_EVERY:
            await self.measure()

    async def _wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    def _warn(self, topic: str, message: str) -> None:
        # One line per topic per 10 s: an outage is told, not repeated for every row.
        now = time.monotonic()
        if now - self._counters.log_times.get(topic, -1e9) >= 10:
            self._counters.log_times[topic] = now
            log.warning(message)


def _passing(exc: BaseException) -> bool:
    """Whether a failed delivery may succeed if tried again: the network, Orbit overloaded or
    unavailable, a 5xx, or credentials an operator can fix. Any other answer of Orbit (the
    request is invalid, the idempotency key was used for another request, the workflow
    finished) is final, and so is a row the relay cannot read."""
    if isinstance(exc, TransientError | TransportError | AuthenticationError):
        return True
    if isinstance(exc, PermissionDeniedError):
        return True
    if isinstance(exc, OrbitError):
        return exc.status is None or exc.status >= 500 or exc.status in _RETRY_STATUSES
    return not isinstance(exc, KeyError | TypeError | ValueError)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OrbitError) and exc.code:
        text = f"{exc.code}: {text}"
    return text[:2000]


def _suffix() -> str:
    return f"{random.getrandbits(32):08x}"
