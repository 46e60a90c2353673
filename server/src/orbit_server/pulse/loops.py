"""Pulse's background loops: lease recovery, promotion of due tasks and admissions a submit
left (SPEC P2, P9, O2)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from orbit_server.errors import TransientError, Unavailable, is_outage
from orbit_server.pulse.admission import KeyAdmissions
from orbit_server.pulse.bulk import BulkService
from orbit_server.pulse.scheduler import PassReport, Scheduler
from orbit_server.pulse.worker import WorkerService

log = structlog.get_logger("orbit.pulse")


def log_skipped(logger: structlog.stdlib.BoundLogger, what: str, exc: TransientError) -> None:
    """A background pass that met a transient refusal: at DEBUG while the database is away
    (the store logs the outage once, and when it is back), else — busy, a full queue — a
    warning."""
    level = logger.debug if is_outage(exc) else logger.warning
    level(f"{what} skipped", code=exc.code, reason=exc.message)


async def recovery_loop(
    worker: WorkerService, admissions: KeyAdmissions, *, interval_s: float = 0.5
) -> None:
    """Expire ended leases, promote due tasks and finish key admissions that a submit left
    (decision 0012), in bounded passes, for as long as it runs.

    A full pass runs again at once; an empty one waits ``interval_s``. While the database is
    down the loop keeps trying and decides nothing (O2).
    """
    while True:
        try:
            expired = await worker.expire_leases()
            promoted = await worker.promote_due()
            admitted = await admissions.finish_stale()
        except Unavailable as exc:
            log_skipped(log, "recovery pass", exc)
            expired = promoted = admitted = 0
        if expired == 0 and promoted == 0 and admitted == 0:
            await asyncio.sleep(interval_s)


async def bulk_loop(bulk: BulkService, *, interval_s: float = 1.0) -> None:
    """Step bulk operations while there is work; between, wait ``interval_s`` (the longest an
    operation started through another node, or left by a node that died, waits) or for one
    started on this node. While the database is down the loop decides nothing."""
    while True:
        bulk.started.clear()
        try:
            settled = await bulk.step()
        except TransientError as exc:  # the database is down or busy: the step is done again
            log_skipped(log, "bulk operation step", exc)
            settled = 0
        except Exception:  # a bug must not stop every other operation and recovery pass
            log.exception("bulk operation step failed")
            settled = 0
        if settled == 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(bulk.started.wait(), interval_s)


async def settled_watch_loop(
    notify: Callable[[], Awaitable[int]], someone_waits: asyncio.Event, *, interval_s: float = 0.05
) -> None:
    """While anyone on this node long-polls a task, look every ``interval_s`` for waited tasks
    that settled through other nodes (one read for all of them). The first look comes one
    interval after someone starts waiting: most tasks settle on the node that waits for them
    before that, and then nobody is left to look for."""
    while True:
        await someone_waits.wait()
        await asyncio.sleep(interval_s)
        with contextlib.suppress(Unavailable):  # the waiters' own re-reads answer, or time out
            await notify()


async def retention_loop(prune: Callable[[], Awaitable[int]], *, interval_s: float = 60.0) -> None:
    """Prune finished history in bounded passes (SPEC P10): a full pass runs again at once."""
    while True:
        try:
            removed = await prune()
        except Unavailable as exc:
            log_skipped(log, "retention pass", exc)
            removed = 0
        if removed == 0:
            await asyncio.sleep(interval_s)


async def scheduler_loop(
    scheduler: Scheduler,
    report: Callable[[PassReport], None],
    *,
    lanes: int = 1,
    refresh_s: float = 5.0,
    retry_s: float = 1.0,
) -> None:
    """Fire due schedules and step backfills; between passes wait for the earliest due time
    (read from the due index after every pass), for a local change, or ``refresh_s`` — the
    longest a change made through another node waits to be seen. After a full pass, ``lanes``
    passes run at once (they lock disjoint schedules), until none is full. While the database
    is down the loop decides nothing and tries again every ``retry_s`` (O2)."""
    width = 1
    while True:
        scheduler.changed.clear()  # a change from here on wakes the wait below
        try:
            dues = await _together([scheduler.run_due for _ in range(width)])
            filled = await scheduler.run_backfills()
            for done in (*dues, filled):
                report(done)
            if filled.handled or any(d.handled >= scheduler.batch for d in dues):
                width = lanes
                continue  # a full pass: more may be due now
            width = 1
            next_due = await scheduler.next_due()
        except TransientError as exc:  # the database is down, a queue filled up meanwhile
            log_skipped(log, "scheduler pass", exc)
            await asyncio.sleep(retry_s)
            continue
        except Exception:  # a bug must not stop every schedule's slots on this node
            log.exception("scheduler pass failed")
            await asyncio.sleep(retry_s)
            continue
        wait_s = refresh_s
        if next_due is not None:
            wait_s = min(refresh_s, max(0.0, (next_due - scheduler.now()).total_seconds()))
        if wait_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(scheduler.changed.wait(), wait_s)


async def _together(calls: list[Callable[[], Awaitable[PassReport]]]) -> list[PassReport]:
    """Run the calls at once; the first failure is raised once all have ended."""
    if len(calls) == 1:
        return [await calls[0]()]
    done = await asyncio.gather(*(call() for call in calls), return_exceptions=True)
    for item in done:
        if isinstance(item, BaseException):
            raise item
    return [item for item in done if isinstance(item, PassReport)]
