"""Failure injection: make a handler's next attempts fail or get lost, without editing it."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Literal

__all__ = ["Fault", "FaultPlan", "InjectedFailure", "LostAttempt"]


class InjectedFailure(Exception):
    """What an injected failure raises by default: a retryable error, so Orbit retries the task
    under its retry policy (give ``error=NonRetryableError(...)`` to fail it for good)."""


class LostAttempt(Exception):
    """Ends a lost attempt's handler when the test worker stops before the loss reached it."""


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected outcome: ``fail`` raises ``error``; ``lose`` holds the attempt and moves
    the server's clock past its lease, so that Orbit ends it as lost."""

    kind: Literal["fail", "lose"]
    error: BaseException | type[BaseException] | None = None


class FaultPlan:
    """The faults waiting for each (queue, type), taken one per attempt, in order.
    Thread-safe: sync handlers run on the worker's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[tuple[str, str], deque[Fault]] = {}

    def add(self, queue: str, type: str, fault: Fault, times: int) -> None:
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise ValueError(f"times must be a positive integer: {times!r}")
        with self._lock:
            self._waiting.setdefault((queue, type), deque()).extend([fault] * times)

    def take(self, queue: str, type: str) -> Fault | None:
        """The fault for the attempt starting now, if one waits."""
        with self._lock:
            waiting = self._waiting.get((queue, type))
            return waiting.popleft() if waiting else None

    def pending(self, queue: str, type: str) -> int:
        """How many injected faults have not met an attempt yet."""
        with self._lock:
            return len(self._waiting.get((queue, type), ()))
