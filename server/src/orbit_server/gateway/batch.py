"""Group commit for the hot path (issue: performance): the requests of all worker connections of
a node — start confirmations, renewals, results — are coalesced into few transactions. While
one batch commits, the next one gathers; nobody waits for a timer. Each caller gets the answers
for its own items, after the commit that holds them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from orbit_server.errors import Unavailable
from orbit_server.pulse.worker import LeaseRef, Outcome, Renewal, Report, StartAnswer, WorkerService

I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741

MAX_ITEMS = 500  # most items in one transaction
LANES = 3  # transactions of one batcher in flight at once: one gathers while the other commits


class Batcher(Generic[I, O]):
    def __init__(
        self,
        run: Callable[[list[I]], Awaitable[list[O]]],
        *,
        max_items: int = MAX_ITEMS,
        lanes: int = LANES,
    ) -> None:
        self._run = run
        self._max = max_items
        self._lanes = lanes
        self._waiting: list[tuple[list[I], asyncio.Future[list[O]]]] = []
        self._flushers: set[asyncio.Task[None]] = set()
        self.batches = 0  # transactions run, for tests and metrics

    async def submit(self, items: Sequence[I]) -> list[O]:
        if not items:
            return []
        future: asyncio.Future[list[O]] = asyncio.get_running_loop().create_future()
        self._waiting.append((list(items), future))
        if len(self._flushers) < self._lanes:
            flusher = asyncio.create_task(self._flush_all())
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flushers.discard)
        return await future

    async def _flush_all(self) -> None:
        while self._waiting:
            groups = [self._waiting.pop(0)]
            count = len(groups[0][0])
            while self._waiting and count + len(self._waiting[0][0]) <= self._max:
                groups.append(self._waiting.pop(0))
                count += len(groups[-1][0])
            await self._flush(groups)

    async def _flush(self, groups: list[tuple[list[I], asyncio.Future[list[O]]]]) -> None:
        items = [item for batch, _ in groups for item in batch]
        try:
            self.batches += 1
            answers = await self._run(items)
        except Exception as exc:
            if len(groups) > 1 and not isinstance(exc, Unavailable):
                for one in groups:  # one caller's bad item must not fail the others
                    await self._flush([one])
                return
            for _, future in groups:
                if not future.done():
                    future.set_exception(exc)
            return
        position = 0
        for group, future in groups:
            if not future.done():
                future.set_result(answers[position : position + len(group)])
            position += len(group)


@dataclass
class NodeBatches:
    """The node's batchers, shared by its worker connections."""

    starts: Batcher[LeaseRef, StartAnswer]
    renewals: Batcher[LeaseRef, Renewal]
    results: Batcher[Report, Outcome]

    @classmethod
    def of(cls, workers: WorkerService) -> NodeBatches:
        return cls(
            starts=Batcher(workers.start_many),
            renewals=Batcher(workers.renew),
            results=Batcher(workers.report_many),
        )
