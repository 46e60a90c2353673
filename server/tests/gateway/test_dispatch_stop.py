"""Stopping the dispatcher (the first step of a drain) cancels its loops and waits for them;
a cancellation of the stop itself — a second signal cutting the drain short — is not taken for
one of theirs."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from orbit_server.clock import FakeClock
from orbit_server.gateway.dispatch import Dispatcher
from orbit_server.observability.metrics import Metrics
from orbit_server.pulse.watch import TaskWatch
from orbit_server.pulse.worker import WorkerService
from orbit_server.scope import Scope
from orbit_server.store import Database


async def test_a_cancelled_stop_does_not_wait_for_a_stubborn_loop(
    db: Database, clock: FakeClock
) -> None:
    watch = TaskWatch()
    dispatcher = Dispatcher(WorkerService(db, clock, lease_ms=30_000), watch, Metrics(),
                            max_leases=10)  # fmt: skip
    release, cancelled = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:  # a loop that takes its time to end after a cancel
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            await release.wait()

    loop = asyncio.create_task(stubborn())
    dispatcher._loops[(Scope("acme", "prod"), "q")] = loop
    stopping = asyncio.create_task(dispatcher.stop())
    await cancelled.wait()  # the stop cancelled the loop, which has not ended yet
    stopping.cancel()  # the second signal
    with pytest.raises(asyncio.CancelledError):
        await stopping  # the stop ends at once instead of waiting for the loop
    release.set()
    with contextlib.suppress(asyncio.CancelledError):
        await loop
