"""``TaskContext``: what a handler gets about the attempt it runs, and its cancellation signal."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from orbit_sdk.worker._errors import TaskCancelled
from orbit_sdk.worker._protocol import MAX_PROGRESS_BYTES, WorkflowStep

__all__ = ["TaskContext", "WorkflowContext", "workflow_context"]

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class WorkflowContext:
    """The workflow step a task runs for (``TaskContext.workflow``).

    ``instance_id`` is the workflow instance, ``definition`` and ``version`` what it runs,
    ``step`` the step's id in the definition and ``step_key`` this execution of it (unique within
    the instance: ``charge``, ``charge:2`` on a second visit, ``thumbnails:i17`` for a map's
    item, ``published:r3`` for a poll's round). ``item`` is the map item's index (from 0) and
    ``round`` the poll's round (from 1), ``None`` otherwise.
    """

    instance_id: str
    definition: str
    version: str
    step: str
    step_key: str
    round: int | None = None
    item: int | None = None


def workflow_context(step: WorkflowStep | None) -> WorkflowContext | None:
    """The handler's view of the workflow step a delivery names (None for a plain task)."""
    if step is None:
        return None
    return WorkflowContext(
        instance_id=step.id, definition=step.definition, version=step.version,
        step=step.step, step_key=step.key, round=step.round, item=step.item,
    )  # fmt: skip


class _TaskLoggerAdapter(logging.LoggerAdapter[logging.Logger]):
    """Adds the attempt's identity to every record, keeping the call's own ``extra``."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


class TaskContext:
    """One attempt of a task, as its handler sees it.

    ``params`` is the task's input; ``attempts`` counts the attempts started before this one.
    ``deadline`` is when the attempt must have finished (its lease never extends past it).
    ``side_effect`` is what the submitter declared (``"idempotent"`` or ``"unsafe"``).
    ``workflow`` is the workflow step the task runs for (:class:`WorkflowContext`), ``None``
    for a plain task; :meth:`progress` reports how far the handler has got.

    Cancellation is cooperative: when Orbit asks to cancel the task, or the attempt is lost,
    :attr:`cancelled` turns true and :attr:`cancel_event` is set (check it from sync code);
    async code can ``await ctx.wait_cancelled()``, and an async handler still running is also
    cancelled with ``asyncio.CancelledError``. A handler that then raises
    :class:`TaskCancelled` (see :meth:`raise_if_cancelled`) or lets ``CancelledError`` out
    reports the attempt ``cancelled``; one that returns reports its result.
    """

    def __init__(
        self,
        *,
        task_id: str,
        attempt: int,
        queue: str,
        type: str,
        params: Any = None,
        deadline: datetime,
        handler_version: str | None = None,
        side_effect: str = "idempotent",
        labels: Mapping[str, str] | None = None,
        attempts: int = 0,
        max_attempts: int | None = None,
        traceparent: str | None = None,
        logger: logging.Logger | None = None,
        workflow: WorkflowContext | None = None,
    ) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.queue = queue
        self.type = type
        self.params = params
        self.deadline = deadline
        self.handler_version = handler_version
        self.side_effect = side_effect
        self.labels: Mapping[str, str] = dict(labels or {})
        self.attempts = attempts
        self.max_attempts = max_attempts
        self.traceparent = traceparent
        self.workflow = workflow
        self.logger: logging.LoggerAdapter[logging.Logger] = _TaskLoggerAdapter(
            logger or logging.getLogger("orbit_sdk.worker.task"),
            {"task_id": task_id, "attempt": attempt, "queue": queue, "task_type": type},
        )
        self.cancel_event = threading.Event()
        self._cancelled_async = asyncio.Event()
        self._cancel_reason: str | None = None
        self._cancel_requested = False
        self._progress_lock = threading.Lock()
        self._progress: dict[str, Any] | None = None  # reported, not yet sent

    def __repr__(self) -> str:
        return (
            f"TaskContext(task_id={self.task_id!r}, attempt={self.attempt}, "
            f"queue={self.queue!r}, type={self.type!r}, cancelled={self.cancelled})"
        )

    @property
    def cancelled(self) -> bool:
        """Whether the attempt should stop: a cancel request, or the attempt was lost."""
        return self.cancel_event.is_set()

    @property
    def cancel_reason(self) -> str | None:
        """Why the attempt was cancelled (``None`` while it is not, or when no reason was given)."""
        return self._cancel_reason

    @property
    def cancel_requested(self) -> bool:
        """Whether Orbit asked to cancel the task (as opposed to the attempt being lost)."""
        return self._cancel_requested

    async def wait_cancelled(self) -> None:
        """Return once the attempt is cancelled."""
        await self._cancelled_async.wait()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`TaskCancelled` when the attempt is cancelled."""
        if self.cancelled:
            raise TaskCancelled(self._cancel_reason or "the task was cancelled")

    def progress(self, details: Mapping[str, Any]) -> None:
        """Report how far the handler has got: a small JSON object, such as
        ``{"done": 40, "total": 100, "stage": "upload"}``.

        The latest report is sent with the worker's next heartbeat, and Orbit shows it on the
        task (``progress`` of ``GET /v1/tasks/{id}``) and in the console; reports made between
        two heartbeats replace each other, so call it as often as is convenient. Safe from
        sync handlers (any thread) and async ones.

        Raises ``ValueError`` when ``details`` is not a JSON object with string keys or its
        JSON is larger than 4 KiB.
        """
        if not isinstance(details, Mapping):
            raise ValueError(f"progress details must be a JSON object, not {type(details)!r}")
        if not all(isinstance(key, str) for key in details):
            raise ValueError("progress details must have string keys")
        try:
            encoded = _encoder.encode(dict(details))
        except (TypeError, msgspec.EncodeError) as exc:
            raise ValueError(f"progress details cannot be encoded as JSON: {exc}") from None
        if len(encoded) > MAX_PROGRESS_BYTES:
            raise ValueError(
                f"progress details are {len(encoded)} bytes as JSON; at most "
                f"{MAX_PROGRESS_BYTES} are allowed"
            )
        copy = msgspec.json.decode(encoded)  # the value as reported, whatever changes later
        with self._progress_lock:
            self._progress = copy

    def _take_progress(self) -> dict[str, Any] | None:
        """The progress reported since the last call (for the next heartbeat), if any."""
        with self._progress_lock:
            progress, self._progress = self._progress, None
        return progress

    def _cancel(self, reason: str | None, *, requested: bool) -> bool:
        """Signal cancellation (on the event loop's thread); ``True`` the first time."""
        self._cancel_requested = self._cancel_requested or requested
        if self.cancel_event.is_set():
            return False
        self._cancel_reason = reason
        self.cancel_event.set()
        self._cancelled_async.set()
        return True
