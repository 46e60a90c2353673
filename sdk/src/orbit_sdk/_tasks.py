"""The task and queue methods of ``Client`` and ``AsyncClient``.

Both mixins only turn arguments into an :class:`~orbit_sdk._models.Operation` and hand it to the
client's ``_run``; what is sent and how answers are read lives in ``_models``, the waiting rule
lives here once and the paging rule in ``_calls``, so the two clients cannot drift apart.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from msgspec import UNSET, UnsetType

from orbit_sdk._calls import AsyncCalls, Calls
from orbit_sdk._models import (
    MAX_WAIT_MS,
    Attempt,
    Operation,
    Outcome,
    Queue,
    RetryPolicy,
    SideEffect,
    Task,
    TaskError,
    TaskPage,
    TaskRequest,
    queue_list,
    queue_update,
    task_attempts,
    task_cancel,
    task_get,
    task_list,
    task_resolve,
    task_retry,
    task_submit,
    task_submit_many,
)

__all__ = ["DEFAULT_POLL_MS", "AsyncTaskCalls", "TaskCalls"]

DEFAULT_POLL_MS = 30_000


class _TaskWait:
    """The deadline of one ``wait_for_task``: how long each long poll may hold, and when to stop."""

    def __init__(
        self, task_id: str, timeout: float | None, poll_ms: int, http_timeout: float
    ) -> None:
        if timeout is not None and not (math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"timeout must be a non-negative number of seconds: {timeout}")
        if not 1 <= poll_ms <= MAX_WAIT_MS:
            raise ValueError(f"poll_ms must be between 1 and {MAX_WAIT_MS}: {poll_ms}")
        self._task_id = task_id
        self._timeout = timeout
        self._poll_ms = poll_ms
        self._http_timeout = http_timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def poll(self) -> Operation[Task]:
        wait_ms = self._poll_ms
        if self._deadline is not None:
            left_ms = math.ceil((self._deadline - time.monotonic()) * 1000)
            wait_ms = max(0, min(wait_ms, left_ms))
        # The server holds the request for up to wait_ms before it answers.
        return task_get(self._task_id, wait_ms=wait_ms, timeout=self._http_timeout + wait_ms / 1000)

    def settled(self, task: Task) -> bool:
        """Whether to stop with ``task``; raises ``TimeoutError`` once the deadline has passed."""
        if task.is_settled:
            return True
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise TimeoutError(f"task {task.id} is still {task.state} after {self._timeout:g} s")
        return False


class TaskCalls(Calls):
    """Tasks and queues for the synchronous :class:`~orbit_sdk.Client`."""

    def submit(
        self,
        queue: str,
        type: str,
        params: Any = None,
        *,
        priority: int | None = None,
        run_at: datetime | str | None = None,
        delay_ms: int | None = None,
        idempotency_key: str | None = None,
        concurrency_key: str | None = None,
        fairness_key: str | None = None,
        side_effect: SideEffect | None = None,
        handler_version: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_ms: int | None = None,
        labels: Mapping[str, str] | None = None,
        traceparent: str | None = None,
    ) -> Task:
        """``POST /v1/tasks``: submit one task; only the arguments given are sent.

        ``params`` of ``None`` sends none (Orbit stores ``{}``). ``run_at`` is a timezone-aware
        ``datetime`` or an RFC 3339 string; give it or ``delay_ms``, not both. ``retry`` sends
        the fields that differ from Orbit's defaults. ``traceparent`` (W3C trace context) goes
        in the ``traceparent`` header. Replaying an ``idempotency_key`` with the same arguments
        answers the task it made; different arguments raise
        :class:`~orbit_sdk.IdempotencyConflictError`.
        """
        request = TaskRequest(
            queue=queue,
            type=type,
            params=params,
            priority=priority,
            run_at=run_at,
            delay_ms=delay_ms,
            idempotency_key=idempotency_key,
            concurrency_key=concurrency_key,
            fairness_key=fairness_key,
            side_effect=side_effect,
            handler_version=handler_version,
            retry=retry,
            timeout_ms=timeout_ms,
            labels=None if labels is None else dict(labels),
        )
        return self._run(task_submit(request, traceparent))

    def submit_many(
        self,
        tasks: Sequence[TaskRequest | Mapping[str, Any]],
        *,
        traceparent: str | None = None,
    ) -> list[Task]:
        """``POST /v1/tasks:batch``: 1 to 1,000 tasks, all or nothing; the tasks in order.

        Items are :class:`~orbit_sdk.TaskRequest` or mappings shaped like the HTTP body.
        """
        return self._run(task_submit_many(tasks, traceparent))

    def get_task(self, task_id: str) -> Task:
        """``GET /v1/tasks/{id}``. Raises :class:`~orbit_sdk.NotFoundError` for no such task."""
        return self._run(task_get(task_id))

    def wait_for_task(
        self, task_id: str, *, timeout: float | None = None, poll_ms: int = DEFAULT_POLL_MS
    ) -> Task:
        """Long-poll until the task is terminal or ``needs_review``, and return it.

        Each request lets the server hold it for up to ``poll_ms`` (at most 60,000). ``timeout``
        is in seconds (``None``: wait as long as it takes; ``0``: look once); past it the
        builtin ``TimeoutError`` is raised.
        """
        wait = _TaskWait(task_id, timeout, poll_ms, self._config.timeout)
        while True:
            task = self._run(wait.poll())
            if wait.settled(task):
                return task

    def list_tasks(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        type: str | None = None,
        label: str | tuple[str, str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TaskPage:
        """``GET /v1/tasks``: one page, newest first; filters combine.

        ``label`` is ``"key:value"`` or ``("key", "value")``. A page filtered by ``type`` or
        ``label`` can be short and still have a ``next_cursor``; :meth:`iter_tasks` follows it.
        """
        return self._run(
            task_list(queue=queue, state=state, type=type, label=label, limit=limit, cursor=cursor)
        )

    def iter_tasks(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        type: str | None = None,
        label: str | tuple[str, str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Iterator[Task]:
        """Every task :meth:`list_tasks` finds, following ``next_cursor`` page by page.

        ``limit`` is the page size; ``cursor`` where to start.
        """

        def page_at(at: str | None) -> Operation[TaskPage]:
            return task_list(
                queue=queue, state=state, type=type, label=label, limit=limit, cursor=at
            )

        for page in self._pages(page_at, cursor):
            yield from page.items

    def task_attempts(self, task_id: str) -> list[Attempt]:
        """``GET /v1/tasks/{id}/attempts``: one per lease, oldest first."""
        return self._run(task_attempts(task_id))

    def cancel_task(self, task_id: str, reason: str | None = None) -> Task:
        """``POST /v1/tasks/{id}/cancel``: waiting work stops at once, running work is asked to.

        Safe to repeat. Finished or ``needs_review`` tasks raise
        :class:`~orbit_sdk.StateConflictError`.
        """
        return self._run(task_cancel(task_id, reason))

    def retry_task(self, task_id: str) -> Task:
        """``POST /v1/tasks/{id}/retry`` (operator): a new attempt for a ``failed``,
        ``cancelled`` or ``needs_review`` task."""
        return self._run(task_retry(task_id))

    def resolve_task(
        self,
        task_id: str,
        *,
        outcome: Outcome,
        result: Any = None,
        error: TaskError | Mapping[str, Any] | None = None,
    ) -> Task:
        """``POST /v1/tasks/{id}/resolve`` (operator): decide a ``needs_review`` task.

        ``"succeeded"`` takes an optional ``result``; ``"failed"`` needs an ``error``
        (``TaskError`` or ``{"code", "message", "retryable"}``) and no result.
        """
        return self._run(task_resolve(task_id, outcome, result, error))

    def list_queues(self) -> list[Queue]:
        """``GET /v1/queues``: every queue of the key's scope, by name (all pages)."""
        return [queue for page in self._pages(queue_list, None) for queue in page.items]

    def update_queue(
        self,
        name: str,
        *,
        paused: bool | None = None,
        concurrency_limit: int | UnsetType | None = UNSET,
        key_concurrency: int | None = None,
        max_pending: int | UnsetType | None = UNSET,
    ) -> Queue:
        """``PUT /v1/queues/{name}`` (operator): change the settings given, create if new.

        Left out (``msgspec.UNSET``), ``concurrency_limit`` and ``max_pending`` keep their value;
        ``None`` removes the limit. ``paused`` and ``key_concurrency`` cannot be cleared, so
        ``None`` leaves them as they are.
        """
        return self._run(
            queue_update(
                name,
                paused=paused,
                concurrency_limit=concurrency_limit,
                key_concurrency=key_concurrency,
                max_pending=max_pending,
            )
        )


class AsyncTaskCalls(AsyncCalls):
    """Tasks and queues for :class:`~orbit_sdk.AsyncClient`; see :class:`TaskCalls`."""

    async def submit(
        self,
        queue: str,
        type: str,
        params: Any = None,
        *,
        priority: int | None = None,
        run_at: datetime | str | None = None,
        delay_ms: int | None = None,
        idempotency_key: str | None = None,
        concurrency_key: str | None = None,
        fairness_key: str | None = None,
        side_effect: SideEffect | None = None,
        handler_version: str | None = None,
        retry: RetryPolicy | None = None,
        timeout_ms: int | None = None,
        labels: Mapping[str, str] | None = None,
        traceparent: str | None = None,
    ) -> Task:
        """``POST /v1/tasks``; see :meth:`Client.submit <orbit_sdk.Client.submit>`."""
        request = TaskRequest(
            queue=queue,
            type=type,
            params=params,
            priority=priority,
            run_at=run_at,
            delay_ms=delay_ms,
            idempotency_key=idempotency_key,
            concurrency_key=concurrency_key,
            fairness_key=fairness_key,
            side_effect=side_effect,
            handler_version=handler_version,
            retry=retry,
            timeout_ms=timeout_ms,
            labels=None if labels is None else dict(labels),
        )
        return await self._run(task_submit(request, traceparent))

    async def submit_many(
        self,
        tasks: Sequence[TaskRequest | Mapping[str, Any]],
        *,
        traceparent: str | None = None,
    ) -> list[Task]:
        """``POST /v1/tasks:batch``; see :meth:`Client.submit_many`."""
        return await self._run(task_submit_many(tasks, traceparent))

    async def get_task(self, task_id: str) -> Task:
        """``GET /v1/tasks/{id}``."""
        return await self._run(task_get(task_id))

    async def wait_for_task(
        self,
        task_id: str,
        *,
        # The wait's deadline in seconds, as the sync client's; not an HTTP timeout.
        timeout: float | None = None,  # noqa: ASYNC109
        poll_ms: int = DEFAULT_POLL_MS,
    ) -> Task:
        """Long-poll until the task settles; see :meth:`Client.wait_for_task`."""
        wait = _TaskWait(task_id, timeout, poll_ms, self._config.timeout)
        while True:
            task = await self._run(wait.poll())
            if wait.settled(task):
                return task

    async def list_tasks(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        type: str | None = None,
        label: str | tuple[str, str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TaskPage:
        """``GET /v1/tasks``: one page; see :meth:`Client.list_tasks`."""
        return await self._run(
            task_list(queue=queue, state=state, type=type, label=label, limit=limit, cursor=cursor)
        )

    async def iter_tasks(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        type: str | None = None,
        label: str | tuple[str, str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AsyncIterator[Task]:
        """Every task :meth:`list_tasks` finds, following ``next_cursor`` (``async for``)."""

        def page_at(at: str | None) -> Operation[TaskPage]:
            return task_list(
                queue=queue, state=state, type=type, label=label, limit=limit, cursor=at
            )

        async for page in self._pages(page_at, cursor):
            for task in page.items:
                yield task

    async def task_attempts(self, task_id: str) -> list[Attempt]:
        """``GET /v1/tasks/{id}/attempts``."""
        return await self._run(task_attempts(task_id))

    async def cancel_task(self, task_id: str, reason: str | None = None) -> Task:
        """``POST /v1/tasks/{id}/cancel``; see :meth:`Client.cancel_task`."""
        return await self._run(task_cancel(task_id, reason))

    async def retry_task(self, task_id: str) -> Task:
        """``POST /v1/tasks/{id}/retry`` (operator)."""
        return await self._run(task_retry(task_id))

    async def resolve_task(
        self,
        task_id: str,
        *,
        outcome: Outcome,
        result: Any = None,
        error: TaskError | Mapping[str, Any] | None = None,
    ) -> Task:
        """``POST /v1/tasks/{id}/resolve`` (operator); see :meth:`Client.resolve_task`."""
        return await self._run(task_resolve(task_id, outcome, result, error))

    async def list_queues(self) -> list[Queue]:
        """``GET /v1/queues``: every queue of the key's scope, by name (all pages)."""
        return [queue async for page in self._pages(queue_list, None) for queue in page.items]

    async def update_queue(
        self,
        name: str,
        *,
        paused: bool | None = None,
        concurrency_limit: int | UnsetType | None = UNSET,
        key_concurrency: int | None = None,
        max_pending: int | UnsetType | None = UNSET,
    ) -> Queue:
        """``PUT /v1/queues/{name}`` (operator); see :meth:`Client.update_queue`."""
        return await self._run(
            queue_update(
                name,
                paused=paused,
                concurrency_limit=concurrency_limit,
                key_concurrency=key_concurrency,
                max_pending=max_pending,
            )
        )
