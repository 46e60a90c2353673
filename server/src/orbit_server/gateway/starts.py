"""Eager starts held back briefly (decision 0008).

A worker runs an eager attempt (idempotent, no gate: decision 0007) as soon as it has sent the
attempt's ``start``, and sends its result without waiting for ``started``. The connection
holds such a start for up to ``HOLD_S`` instead of recording it at once: a result that comes
within the hold records the start and the result together, in the result's transaction; a
start still held when the hold ends is recorded on its own, as any other. Either way nothing
is answered before it is committed, and a start is never lost with a worker that dies — the
hold ends on the node's clock, not the worker's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from orbit_server.gateway.batch import Batcher
from orbit_server.pulse.worker import LeaseRef, StartAnswer, StartVerdict

HOLD_S = 0.05  # how long an eager start waits for its result before it is recorded alone

Key = tuple[str, int]  # (task id, attempt)


@dataclass(eq=False)
class _Frame:
    """One ``start`` request: its items, and their answers as they come."""

    request_id: int
    refs: Sequence[LeaseRef]
    answers: list[StartAnswer | None]
    failed: bool = False
    recording: list[asyncio.Task[None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Held:
    """A held start taken by a result: resolved once that result is committed."""

    frame: _Frame
    index: int


class HeldStarts:
    """The eager starts of one connection that are not recorded yet."""

    def __init__(
        self,
        starts: Batcher[LeaseRef, StartAnswer],
        answer: Callable[[int, list[StartAnswer]], None],
        fail: Callable[[int, Exception], None],
        *,
        hold_s: float = HOLD_S,
    ) -> None:
        self._starts = starts
        self._answer = answer  # (request id, answers in item order) once all are known
        self._fail = fail  # (request id, error) when recording failed
        self._hold_s = hold_s
        self._held: dict[Key, Held] = {}
        self._recording: dict[Key, asyncio.Future[None]] = {}

    def hold(
        self,
        request_id: int,
        refs: Sequence[LeaseRef],
        answers: list[StartAnswer | None],
        eager: Iterable[int],
    ) -> None:
        """Hold the items ``eager`` of a ``start`` request; the others are answered already
        (``answers``). The request is answered when every item is."""
        frame = _Frame(request_id, refs, answers)
        for i in eager:
            self._held[(refs[i].task_id, refs[i].attempt)] = Held(frame, i)
        asyncio.get_running_loop().call_later(self._hold_s, self._hold_over, frame)

    def take(self, key: Key) -> Held | None:
        """A result came for ``key``: its start, if still held, goes with it."""
        return self._held.pop(key, None)

    def resolve(self, held: Held, *, started: bool) -> None:
        """The result that took ``held`` was committed (``started``: it was accepted)."""
        verdict = StartVerdict.STARTED if started else StartVerdict.STALE
        held.frame.answers[held.index] = StartAnswer(held.frame.refs[held.index], verdict)
        self._done(held.frame)

    def put_back(self, taken: Iterable[Held]) -> None:
        """The result that took these could not be recorded: record their starts alone."""
        frames: dict[int, _Frame] = {}
        for held in taken:
            ref = held.frame.refs[held.index]
            self._held[(ref.task_id, ref.attempt)] = held
            frames[id(held.frame)] = held.frame
        for frame in frames.values():
            self._hold_over(frame)

    async def recorded(self, keys: Iterable[Key]) -> None:
        """Wait until the starts of ``keys`` that are being recorded alone are committed, so
        that their results find them started."""
        waiting = [f for key in keys if (f := self._recording.get(key)) is not None]
        if waiting:
            await asyncio.gather(*(asyncio.shield(f) for f in waiting))

    # -- recording what the hold did not take --------------------------------------------------

    def _hold_over(self, frame: _Frame) -> None:
        indexes = [
            i
            for i, ref in enumerate(frame.refs)
            if (held := self._held.get((ref.task_id, ref.attempt))) is not None
            and held.frame is frame
        ]
        if not indexes:
            return
        loop = asyncio.get_running_loop()
        for i in indexes:
            key = (frame.refs[i].task_id, frame.refs[i].attempt)
            del self._held[key]
            self._recording[key] = loop.create_future()
        frame.recording.append(loop.create_task(self._record(frame, indexes)))

    async def _record(self, frame: _Frame, indexes: list[int]) -> None:
        keys = [(frame.refs[i].task_id, frame.refs[i].attempt) for i in indexes]
        try:
            answers = await self._starts.submit([frame.refs[i] for i in indexes])
        except Exception as exc:
            if not frame.failed:
                frame.failed = True
                self._fail(frame.request_id, exc)
            return
        finally:
            for key in keys:
                future = self._recording.pop(key, None)
                if future is not None and not future.done():
                    future.set_result(None)
        for i, answer in zip(indexes, answers, strict=True):
            frame.answers[i] = answer
        self._done(frame)

    def _done(self, frame: _Frame) -> None:
        if frame.failed or any(a is None for a in frame.answers):
            return
        self._answer(frame.request_id, [a for a in frame.answers if a is not None])
