"""Pulse's background loops: lease recovery and promotion of due tasks (SPEC P2, P9, O2)."""

from __future__ import annotations

import asyncio

import structlog

from orbit_server.errors import Unavailable
from orbit_server.pulse.worker import WorkerService

log = structlog.get_logger("orbit.pulse")


async def recovery_loop(worker: WorkerService, *, interval_s: float = 0.5) -> None:
    """Expire ended leases and promote due tasks, in bounded passes, for as long as it runs.

    A full pass runs again at once; an empty one waits ``interval_s``. While the database is
    down the loop keeps trying and decides nothing (O2).
    """
    while True:
        try:
            expired = await worker.expire_leases()
            promoted = await worker.promote_due()
        except Unavailable as exc:
            log.warning("recovery pass skipped: database unavailable", reason=exc.message)
            expired = promoted = 0
        if expired == 0 and promoted == 0:
            await asyncio.sleep(interval_s)
