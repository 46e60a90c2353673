"""The node's coalescer for the hot path (decisions 0005, 0008, 0022): the start confirmations,
renewals and results of all worker connections of a node go through one mechanism that
gathers them into few transactions — while one batch of a kind commits, the next one gathers,
nobody waits for a timer, and each caller gets its own answers after the commit that holds
its items.

Eager starts (decision 0007) are held here for up to ``HOLD_S`` instead of being recorded at
once: a result that comes within the hold takes its start out of the queue and records both in
the result's transaction; a start still held when the hold ends joins the starts' queue and
is recorded alone — on the node's clock, whether or not its worker is still connected. A
result whose start is being recorded alone waits for that commit. Nothing is answered before
it is committed.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from orbit_server.errors import Unavailable
from orbit_server.pulse.worker import (
    LeaseRef,
    Outcome,
    Renew,
    Renewal,
    Report,
    StartAnswer,
    StartVerdict,
    WorkerService,
)

I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741

MAX_ITEMS = 500  # most items in one transaction
LANES = 3  # transactions of one kind in flight at once: one gathers while the others commit
HOLD_S = 0.05  # how long an eager start waits for its result before it is recorded alone

_HeldKey = tuple[str, str, int]  # (session id, task id, attempt)


class _State(enum.Enum):
    HELD = "held"  # an eager start waiting for its result
    QUEUED = "queued"  # waiting for a transaction
    FLUSHING = "flushing"  # in a transaction
    TAKEN = "taken"  # an eager start a result took with it
    DONE = "done"


@dataclass(eq=False, slots=True)
class _Item(Generic[I, O]):
    value: I
    answer: asyncio.Future[O] | None = None  # its own answer (a held start), else its group's
    state: _State = _State.QUEUED


@dataclass(eq=False, slots=True)
class _Group(Generic[I, O]):
    """Items that came together (one request): kept in one transaction, and retried alone
    when a batch fails for a reason that is not an outage."""

    items: list[_Item[I, O]] = field(default_factory=list)
    answer: asyncio.Future[list[O]] | None = None  # answered at once, in item order


class _Queue(Generic[I, O]):
    """The items of one kind waiting for their transactions."""

    def __init__(
        self,
        run: Callable[[list[I]], Awaitable[list[O]]],
        *,
        max_items: int,
        lanes: int,
        ended: Callable[[list[_Item[I, O]]], None] | None = None,
    ) -> None:
        self._run = run
        self._max = max_items
        self._lanes = lanes
        self._ended = ended  # told of items whose transaction is over, committed or not
        self._waiting: deque[_Group[I, O]] = deque()
        self._flushers: set[asyncio.Task[None]] = set()
        self.batches = 0  # transactions run, for tests and metrics

    async def submit(self, values: Sequence[I]) -> list[O]:
        if not values:
            return []
        answer: asyncio.Future[list[O]] = asyncio.get_running_loop().create_future()
        self._put(_Group([_Item(value) for value in values], answer))
        return await answer

    def put(self, items: list[_Item[I, O]]) -> None:
        """Queue items answered one by one (in one group) for the next transaction."""
        if not items:
            return
        for item in items:
            item.state = _State.QUEUED
        self._put(_Group(items))

    def _put(self, group: _Group[I, O]) -> None:
        self._waiting.append(group)
        if len(self._flushers) < self._lanes:
            flusher = asyncio.get_running_loop().create_task(self._flush_all())
            self._flushers.add(flusher)
            flusher.add_done_callback(self._flushers.discard)

    def _next(self) -> list[_Group[I, O]]:
        groups: list[_Group[I, O]] = []
        count = 0
        while self._waiting:
            group = self._waiting[0]
            group.items = [i for i in group.items if i.state is _State.QUEUED]
            if groups and count + len(group.items) > self._max:
                break
            self._waiting.popleft()
            if group.items:
                groups.append(group)
                count += len(group.items)
        return groups

    async def _flush_all(self) -> None:
        while groups := self._next():
            items = [item for group in groups for item in group.items]
            for item in items:
                item.state = _State.FLUSHING
            try:
                await self._flush(groups)
            finally:
                for item in items:
                    item.state = _State.DONE
                if self._ended is not None:
                    self._ended(items)

    async def _flush(self, groups: list[_Group[I, O]]) -> None:
        items = [item for group in groups for item in group.items]
        try:
            self.batches += 1
            answers = await self._run([item.value for item in items])
        except Exception as exc:
            if len(groups) > 1 and not isinstance(exc, Unavailable):
                for one in groups:  # one caller's bad item must not fail the others
                    await self._flush([one])
                return
            for group in groups:
                for future in _futures(group):
                    if not future.done():
                        future.set_exception(exc)
            return
        position = 0
        for group in groups:
            got = answers[position : position + len(group.items)]
            position += len(group.items)
            if group.answer is not None:
                if not group.answer.done():
                    group.answer.set_result(got)
                continue
            for item, answer in zip(group.items, got, strict=True):
                if item.answer is not None and not item.answer.done():
                    item.answer.set_result(answer)


def _futures(group: _Group[I, O]) -> list[asyncio.Future[Any]]:
    if group.answer is not None:
        return [group.answer]
    return [item.answer for item in group.items if item.answer is not None]


class Coalescer:
    """The node's group commit of starts, renewals and results, shared by its connections."""

    def __init__(
        self,
        start: Callable[[list[LeaseRef]], Awaitable[list[StartAnswer]]],
        renew: Callable[[list[Renew]], Awaitable[list[Renewal]]],
        report: Callable[[list[Report]], Awaitable[list[Outcome]]],
        *,
        hold_s: float = HOLD_S,
        max_items: int = MAX_ITEMS,
        lanes: int = LANES,
    ) -> None:
        self.starts: _Queue[LeaseRef, StartAnswer] = _Queue(
            start, max_items=max_items, lanes=lanes, ended=self._recorded
        )
        self.renewals: _Queue[Renew, Renewal] = _Queue(renew, max_items=max_items, lanes=lanes)
        self.results: _Queue[Report, Outcome] = _Queue(report, max_items=max_items, lanes=lanes)
        self._hold_s = hold_s
        # eager starts not committed yet: held, or queued or being recorded after the hold
        self._held: dict[_HeldKey, _Item[LeaseRef, StartAnswer]] = {}

    @classmethod
    def of(cls, workers: WorkerService) -> Coalescer:
        return cls(workers.start_many, workers.renew, workers.report_many)

    async def start(self, refs: Sequence[LeaseRef]) -> list[StartAnswer]:
        """Record these starts now (in the next transaction of starts)."""
        return await self.starts.submit(refs)

    def hold_starts(
        self, refs: Sequence[LeaseRef], answered: Callable[[list[StartAnswer] | Exception], None]
    ) -> None:
        """Hold eager starts for their results; once every one is committed — with its result,
        or alone after the hold — ``answered`` gets their answers in order (or the error that
        failed their recording)."""
        loop = asyncio.get_running_loop()
        items: list[_Item[LeaseRef, StartAnswer]] = [
            _Item(ref, loop.create_future(), _State.HELD) for ref in refs
        ]
        for item in items:
            self._held[_key(item.value)] = item
        loop.call_later(self._hold_s, self._hold_over, items)
        futures = [item.answer for item in items if item.answer is not None]
        remaining = len(futures)

        def one_done(_: asyncio.Future[StartAnswer]) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining:
                return
            if any(f.cancelled() for f in futures):
                return
            errors = [e for f in futures if isinstance(e := f.exception(), Exception)]
            answered(errors[0] if errors else [f.result() for f in futures])

        for future in futures:
            future.add_done_callback(one_done)

    async def renew(self, items: Sequence[Renew]) -> list[Renewal]:
        """Extend leases, recording the progress items carry (in the next renewals' batch)."""
        return await self.renewals.submit(items)

    async def report(self, reports: Sequence[Report]) -> list[Outcome]:
        """Record results; an eager start still held (or queued) goes with its result, one
        being recorded alone is waited for, so that the result finds it started."""
        taken: list[tuple[int, _Item[LeaseRef, StartAnswer]]] = []
        recording: list[asyncio.Future[StartAnswer]] = []
        for i, report in enumerate(reports):
            item = self._held.get(_key(report.ref))
            if item is None or item.answer is None:
                continue
            if item.state is _State.FLUSHING:
                recording.append(item.answer)
            else:  # held or queued: it leaves the starts' queue, the result records it
                item.state = _State.TAKEN
                del self._held[_key(item.value)]
                taken.append((i, item))
        if recording:
            await asyncio.wait(recording)  # their errors are their requests' answers
        try:
            outcomes = await self.results.submit(reports)
        except BaseException:
            self._put_back([item for _, item in taken])
            raise
        for i, item in taken:
            started = outcomes[i] in (Outcome.ACCEPTED, Outcome.ALREADY)
            verdict = StartVerdict.STARTED if started else StartVerdict.STALE
            item.state = _State.DONE
            if item.answer is not None and not item.answer.done():
                item.answer.set_result(StartAnswer(item.value, verdict))
        return outcomes

    # -- inside -------------------------------------------------------------------------------

    def _hold_over(self, items: list[_Item[LeaseRef, StartAnswer]]) -> None:
        self.starts.put([item for item in items if item.state is _State.HELD])

    def _put_back(self, items: list[_Item[LeaseRef, StartAnswer]]) -> None:
        """The result that took these starts was not recorded: record them alone, now."""
        for item in items:
            self._held[_key(item.value)] = item
        self.starts.put(items)

    def _recorded(self, items: list[_Item[LeaseRef, StartAnswer]]) -> None:
        for item in items:
            key = _key(item.value)
            if self._held.get(key) is item:
                del self._held[key]


def _key(ref: LeaseRef) -> _HeldKey:
    return (ref.session_id, ref.task_id, ref.attempt)
