"""Local wake-ups for callers waiting on a task (``GET /v1/tasks/{id}?wait_ms=``).

Only a shortcut: a missed or remote change is still seen by the waiter's periodic re-read.
Memory is bounded by the number of waiting requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class TaskWatch:
    def __init__(self, poll_s: float = 0.25) -> None:
        self.poll_s = poll_s
        self._waiters: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def watching(self, task_id: str) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiters.setdefault(task_id, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._waiters.get(task_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[task_id]

    def notify(self, task_id: str) -> None:
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
