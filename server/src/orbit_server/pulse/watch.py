"""Local wake-ups: for callers waiting on a task (``GET /v1/tasks/{id}?wait_ms=``) and for the
dispatch loops waiting for claimable work in a queue.

Only a shortcut: a missed or remote change is still seen by the waiter's periodic re-read (the
dispatch loop's bounded poll). Changes made by other nodes are also found for all of a node's
waiters at once by ``TaskService.notify_settled`` (one read for every waited task, run by a
loop every 50 ms while anyone waits). Memory is bounded by the number of waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from orbit_server.pulse.domain_events import CancelRequested, RoomMade, TaskSettled, WorkCommitted
from orbit_server.scope import Scope
from orbit_server.store.events import EventBus


class TaskWatch:
    def __init__(self, poll_s: float = 0.25) -> None:
        self.poll_s = poll_s
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self.someone_waits = asyncio.Event()  # set while any task is waited for
        self._queues: dict[tuple[Scope, str], asyncio.Event] = {}
        self._work: set[tuple[Scope, str]] = set()  # queues known to have new claimable work
        self._cancel_listeners: list[Callable[[str, str | None], None]] = []
        # Set whenever a task settled here; the consumers of result events wait on it.
        self.settled = asyncio.Event()

    def follow(self, bus: EventBus) -> None:
        """Wake this node's waiters on the events its units commit."""
        bus.subscribe(WorkCommitted, lambda e: self.notify_queue(e.scope, e.queue, work=True))
        bus.subscribe(RoomMade, lambda e: self.notify_queue(e.scope, e.queue))
        bus.subscribe(TaskSettled, lambda e: self.notify(e.task_id))
        bus.subscribe(CancelRequested, lambda e: self.notify_cancel_requested(e.task_id, e.reason))

    @contextlib.contextmanager
    def watching(self, task_id: str) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiters.setdefault(task_id, set()).add(event)
        self.someone_waits.set()
        try:
            yield event
        finally:
            waiters = self._waiters.get(task_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[task_id]
            if not self._waiters:
                self.someone_waits.clear()

    def waited(self) -> list[str]:
        """The tasks someone waits for on this node."""
        return list(self._waiters)

    def notify(self, task_id: str) -> None:
        """``task_id`` settled (here, or found settled by a read)."""
        self.settled.set()
        for event in self._waiters.get(task_id, ()):
            event.set()

    async def wait(self, changed: asyncio.Event, remaining_s: float) -> None:
        """Until a local change, the next re-read, or the deadline, whichever comes first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(remaining_s, self.poll_s)):
                await changed.wait()

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def queue_event(self, scope: Scope, queue: str) -> asyncio.Event:
        """The event set when work may have become claimable in a queue (one per queue; the
        dispatch loop of the queue owns it and forgets it with ``forget_queue``)."""
        return self._queues.setdefault((scope, queue), asyncio.Event())

    def forget_queue(self, scope: Scope, queue: str) -> None:
        self._queues.pop((scope, queue), None)
        self._work.discard((scope, queue))

    def notify_queue(self, scope: Scope, queue: str, *, work: bool = False) -> None:
        """Wake the queue's dispatch loop; ``work`` when this node just committed claimable
        work into it (a submit, a promotion), so the loop may claim without looking first."""
        event = self._queues.get((scope, queue))
        if event is not None:
            if work:
                self._work.add((scope, queue))
            event.set()

    def take_work(self, scope: Scope, queue: str) -> bool:
        """Whether work was committed into the queue here since the last call."""
        if (scope, queue) in self._work:
            self._work.discard((scope, queue))
            return True
        return False

    def on_cancel_requested(self, listener: Callable[[str, str | None], None]) -> None:
        """Call ``listener(task_id, reason)`` when a cancel of running work commits here."""
        self._cancel_listeners.append(listener)

    def notify_cancel_requested(self, task_id: str, reason: str | None) -> None:
        for listener in self._cancel_listeners:
            listener(task_id, reason)
