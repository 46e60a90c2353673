"""The workflow methods of ``Client`` and ``AsyncClient``.

As in ``_tasks``, both mixins only turn arguments into an
:class:`~orbit_sdk._models.Operation` (built in ``_workflow_models``) and hand it to the
client's ``_run``; the waiting rule lives here once.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import timedelta
from typing import Any

from orbit_sdk._calls import AsyncCalls, Calls
from orbit_sdk._models import MAX_WAIT_MS, Operation, Outcome
from orbit_sdk._tasks import DEFAULT_POLL_MS
from orbit_sdk._workflow_models import (
    DefinitionSource,
    WorkflowDefinition,
    WorkflowDefinitionPage,
    WorkflowError,
    WorkflowInstance,
    WorkflowPage,
    WorkflowSignal,
    WorkflowStep,
    WorkflowStepPage,
    workflow_cancel,
    workflow_definition_get,
    workflow_definition_list,
    workflow_definition_publish,
    workflow_get,
    workflow_list,
    workflow_pause,
    workflow_resume,
    workflow_signal,
    workflow_start,
    workflow_step_list,
    workflow_step_resolve,
    workflow_step_retry,
    workflow_step_skip,
)

__all__ = ["AsyncWorkflowCalls", "WorkflowCalls"]


class _WorkflowWait:
    """The deadline of one ``wait_for_workflow``: how long each long poll may hold, and when
    to stop."""

    def __init__(
        self,
        workflow_id: str,
        timeout: timedelta | float | None,
        poll_ms: int,
        http_timeout: float,
    ) -> None:
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        if timeout is not None and not (math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"timeout must be a non-negative number of seconds: {timeout}")
        if not 1 <= poll_ms <= MAX_WAIT_MS:
            raise ValueError(f"poll_ms must be between 1 and {MAX_WAIT_MS}: {poll_ms}")
        self._workflow_id = workflow_id
        self._timeout = timeout
        self._poll_ms = poll_ms
        self._http_timeout = http_timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def poll(self) -> Operation[WorkflowInstance]:
        wait_ms = self._poll_ms
        if self._deadline is not None:
            left_ms = math.ceil((self._deadline - time.monotonic()) * 1000)
            wait_ms = max(0, min(wait_ms, left_ms))
        # The server holds the request for up to wait_ms before it answers.
        timeout = self._http_timeout + wait_ms / 1000
        return workflow_get(self._workflow_id, wait_ms=wait_ms, timeout=timeout)

    def finished(self, instance: WorkflowInstance) -> bool:
        """Whether to stop with ``instance``; raises ``TimeoutError`` once the deadline has
        passed."""
        if instance.is_terminal:
            return True
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise TimeoutError(
                f"workflow {instance.id} is still {instance.state} after {self._timeout:g} s"
            )
        return False


class WorkflowCalls(Calls):
    """Workflows for the synchronous :class:`~orbit_sdk.Client`."""

    def publish_workflow(self, definition: DefinitionSource) -> WorkflowDefinition:
        """``POST /v1/workflow-definitions``: publish a definition version.

        ``definition`` is a :class:`~orbit_sdk.Workflow` or a mapping shaped like the
        definition JSON. Orbit checks all of it before it stores anything. Publishing the
        same content again answers the version there is and changes nothing. Other content
        under the same name and version raises :class:`~orbit_sdk.ConflictError`
        (``version_exists``); a definition Orbit refuses raises
        :class:`~orbit_sdk.ProtocolError` (``definition_invalid``) whose
        ``details["reasons"]`` list every problem found.
        """
        return self._run(workflow_definition_publish(definition))

    def get_workflow_definition(self, name: str, version: str) -> WorkflowDefinition:
        """``GET /v1/workflow-definitions/{name}/versions/{version}``, with its JSON.
        Raises :class:`~orbit_sdk.NotFoundError` for no such version."""
        return self._run(workflow_definition_get(name, version))

    def list_workflow_definitions(
        self, *, name: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> WorkflowDefinitionPage:
        """``GET /v1/workflow-definitions``: one page of versions, of ``name``'s only when
        given; the items have no ``definition`` JSON."""
        return self._run(workflow_definition_list(name=name, limit=limit, cursor=cursor))

    def iter_workflow_definitions(
        self, *, name: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Iterator[WorkflowDefinition]:
        """Every version :meth:`list_workflow_definitions` finds, following ``next_cursor``;
        ``limit`` is the page size."""

        def page_at(at: str | None) -> Operation[WorkflowDefinitionPage]:
            return workflow_definition_list(name=name, limit=limit, cursor=at)

        for page in self._pages(page_at, cursor):
            yield from page.items

    def start_workflow(
        self,
        definition: str,
        input: Any = None,
        *,
        version: str | None = None,
        idempotency_key: str | None = None,
    ) -> WorkflowInstance:
        """``POST /v1/workflows``: start an instance of the definition named ``definition``.

        Without ``version`` it runs the version published last; the instance keeps its version
        to its end. ``input`` of ``None`` sends none (the instance's input is null). The first
        steps are entered, and their tasks created, before it answers.

        With an ``idempotency_key``, the same request again (the same name, ``version`` given
        or left out alike, the same input) answers the instance the key started, whatever its
        state, also after a newer version was published; another request with the key raises
        :class:`~orbit_sdk.IdempotencyConflictError`. No such definition or version raises
        :class:`~orbit_sdk.NotFoundError`; a first step's task that would overfill its queue
        raises :class:`~orbit_sdk.QueueFullError`, and nothing is started.
        """
        operation = workflow_start(
            definition, input, version=version, idempotency_key=idempotency_key
        )
        return self._run(operation)

    def get_workflow(self, workflow_id: str) -> WorkflowInstance:
        """``GET /v1/workflows/{id}``: the instance with its step executions (the newest 500,
        without map items and poll rounds: :meth:`iter_workflow_steps` reads every one), what
        it waits for and the signals no step has taken yet. Raises
        :class:`~orbit_sdk.NotFoundError` for no such instance."""
        return self._run(workflow_get(workflow_id))

    def wait_for_workflow(
        self,
        workflow_id: str,
        *,
        timeout: timedelta | float | None = None,
        poll_ms: int = DEFAULT_POLL_MS,
    ) -> WorkflowInstance:
        """Long-poll until the instance is ``succeeded``, ``failed`` or ``cancelled``, and
        return it.

        An instance that is ``paused`` or in ``needs_review`` is not finished: the wait goes
        on. Each request lets the server hold it for up to ``poll_ms`` (at most 60,000).
        ``timeout`` is a ``timedelta`` or seconds (``None``: wait as long as it takes; ``0``:
        look once); past it the builtin ``TimeoutError`` is raised.
        """
        wait = _WorkflowWait(workflow_id, timeout, poll_ms, self._config.timeout)
        while True:
            instance = self._run(wait.poll())
            if wait.finished(instance):
                return instance

    def list_workflows(
        self,
        *,
        definition: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> WorkflowPage:
        """``GET /v1/workflows``: one page; filters combine. The items have no steps, waits or
        pending signals."""
        return self._run(
            workflow_list(definition=definition, state=state, limit=limit, cursor=cursor)
        )

    def iter_workflows(
        self,
        *,
        definition: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Iterator[WorkflowInstance]:
        """Every instance :meth:`list_workflows` finds, following ``next_cursor`` page by
        page; ``limit`` is the page size."""

        def page_at(at: str | None) -> Operation[WorkflowPage]:
            return workflow_list(definition=definition, state=state, limit=limit, cursor=at)

        for page in self._pages(page_at, cursor):
            yield from page.items

    def workflow_steps(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> WorkflowStepPage:
        """``GET /v1/workflows/{id}/steps``: one page of the instance's step executions, map
        items and poll rounds included, in the order they began."""
        return self._run(workflow_step_list(workflow_id, limit=limit, cursor=cursor))

    def iter_workflow_steps(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> Iterator[WorkflowStep]:
        """Every step execution of the instance, following ``next_cursor``."""

        def page_at(at: str | None) -> Operation[WorkflowStepPage]:
            return workflow_step_list(workflow_id, limit=limit, cursor=at)

        for page in self._pages(page_at, cursor):
            yield from page.items

    def signal_workflow(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> WorkflowSignal:
        """``POST /v1/workflows/{id}/signals``: send the signal ``name`` with ``payload``.

        A ``signal`` step waiting for that name takes it at once (``state`` ``delivered``,
        ``step`` the execution's key); otherwise it is kept ``pending``, and the next
        ``signal`` step of that name takes it (the oldest first). A paused instance takes
        signals too and follows them when resumed. With an ``idempotency_key``, the same name
        and payload again answer the first signal and change nothing, also once the instance
        has finished; another name or payload raises
        :class:`~orbit_sdk.IdempotencyConflictError`. A ``succeeded``, ``failed`` or
        ``cancelled`` instance raises :class:`~orbit_sdk.StateConflictError`; a step the
        signal lets the instance enter whose task would overfill its queue raises
        :class:`~orbit_sdk.QueueFullError`, and the signal is not recorded.
        """
        operation = workflow_signal(workflow_id, name, payload, idempotency_key=idempotency_key)
        return self._run(operation)

    def pause_workflow(self, workflow_id: str, reason: str | None = None) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/pause``: hold the instance until
        :meth:`resume_workflow`.

        Its started tasks run to their end and their outcomes are recorded; its tasks not yet
        started are not handed to workers; nothing is followed, and waits that come due are
        held (they fire on resume). Pausing a paused instance changes nothing; a
        ``succeeded``, ``failed`` or ``cancelled`` one raises
        :class:`~orbit_sdk.StateConflictError`.
        """
        return self._run(workflow_pause(workflow_id, reason))

    def resume_workflow(self, workflow_id: str, reason: str | None = None) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/resume``: go on from what was recorded while paused, in
        the same call, and re-arm the waits (those due meanwhile fire at once). An instance
        that is not ``paused`` raises :class:`~orbit_sdk.StateConflictError`. Like the other
        calls that move an instance on (signal, retry, skip), it raises
        :class:`~orbit_sdk.QueueFullError` and changes nothing when a task it would create
        meets a full queue."""
        return self._run(workflow_resume(workflow_id, reason))

    def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/cancel``: the instance ends ``cancelled``, its active
        step executions are cancelled, and so are their pending and running tasks (a running
        one is asked to stop). Cancelling a cancelled instance changes nothing; a
        ``succeeded`` or ``failed`` one raises :class:`~orbit_sdk.StateConflictError`."""
        return self._run(workflow_cancel(workflow_id, reason))

    def retry_workflow_step(self, workflow_id: str, key: str) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/retry``: run the failed step that ended the
        instance again, with a new task; the instance is ``running`` again.

        ``key`` is that execution's key (the instance's ``error.step``: ``charge``,
        ``charge:2``). Only a ``task`` step outside parallel branches, maps and polls can be
        retried; any other execution raises :class:`~orbit_sdk.StateConflictError`, and so
        does a step in ``needs_review``: decide it with :meth:`resolve_workflow_step`, or run
        its task again with :meth:`retry_task` (``step.task_id``).
        """
        return self._run(workflow_step_retry(workflow_id, key))

    def skip_workflow_step(
        self, workflow_id: str, key: str, output: Any = None
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/skip``: end the step execution ``skipped``
        with ``output`` as its output, and go on as if it had succeeded with it.

        It takes an active execution (``pending``, ``running``, ``waiting``,
        ``needs_review``) of an instance that has not finished, or the failed top-level step
        that ended a ``failed`` instance, which then runs again. A pending or running task of
        the step is cancelled (one in ``needs_review`` stays there), and so is the work inside
        a ``parallel``, ``map`` or ``poll``. Map items and poll rounds cannot be skipped (skip
        their step), nor can ended executions: :class:`~orbit_sdk.StateConflictError`.
        """
        return self._run(workflow_step_skip(workflow_id, key, output))

    def resolve_workflow_step(
        self,
        workflow_id: str,
        key: str,
        *,
        outcome: Outcome,
        output: Any = None,
        error: WorkflowError | Mapping[str, Any] | None = None,
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/resolve``: decide a ``needs_review`` step
        execution (a map item or a poll round too).

        ``"succeeded"`` takes an ``output``: the task's result, which the step's ``output``
        expression maps; ``"failed"`` takes an ``error`` (:class:`~orbit_sdk.WorkflowError`
        or ``{"code", "message"}``), and the step's ``on_failure`` applies. The step's task is
        resolved; the instance moves on when Orbit handles that result, usually within
        milliseconds, so the answer may still show the step in ``needs_review``. An execution
        that is not in ``needs_review`` raises :class:`~orbit_sdk.StateConflictError`.
        """
        return self._run(workflow_step_resolve(workflow_id, key, outcome, output, error))


class AsyncWorkflowCalls(AsyncCalls):
    """Workflows for :class:`~orbit_sdk.AsyncClient`; see :class:`WorkflowCalls`."""

    async def publish_workflow(self, definition: DefinitionSource) -> WorkflowDefinition:
        """``POST /v1/workflow-definitions``; see :meth:`Client.publish_workflow`."""
        return await self._run(workflow_definition_publish(definition))

    async def get_workflow_definition(self, name: str, version: str) -> WorkflowDefinition:
        """``GET /v1/workflow-definitions/{name}/versions/{version}``; see
        :meth:`Client.get_workflow_definition`."""
        return await self._run(workflow_definition_get(name, version))

    async def list_workflow_definitions(
        self, *, name: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> WorkflowDefinitionPage:
        """``GET /v1/workflow-definitions``: one page of versions."""
        return await self._run(workflow_definition_list(name=name, limit=limit, cursor=cursor))

    async def iter_workflow_definitions(
        self, *, name: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> AsyncIterator[WorkflowDefinition]:
        """Every version, following ``next_cursor`` (``async for``)."""

        def page_at(at: str | None) -> Operation[WorkflowDefinitionPage]:
            return workflow_definition_list(name=name, limit=limit, cursor=at)

        async for page in self._pages(page_at, cursor):
            for definition in page.items:
                yield definition

    async def start_workflow(
        self,
        definition: str,
        input: Any = None,
        *,
        version: str | None = None,
        idempotency_key: str | None = None,
    ) -> WorkflowInstance:
        """``POST /v1/workflows``; see :meth:`Client.start_workflow`."""
        operation = workflow_start(
            definition, input, version=version, idempotency_key=idempotency_key
        )
        return await self._run(operation)

    async def get_workflow(self, workflow_id: str) -> WorkflowInstance:
        """``GET /v1/workflows/{id}``; see :meth:`Client.get_workflow`."""
        return await self._run(workflow_get(workflow_id))

    async def wait_for_workflow(
        self,
        workflow_id: str,
        *,
        # The wait's deadline, as the sync client's; not an HTTP timeout.
        timeout: timedelta | float | None = None,  # noqa: ASYNC109
        poll_ms: int = DEFAULT_POLL_MS,
    ) -> WorkflowInstance:
        """Long-poll until the instance is terminal; see :meth:`Client.wait_for_workflow`."""
        wait = _WorkflowWait(workflow_id, timeout, poll_ms, self._config.timeout)
        while True:
            instance = await self._run(wait.poll())
            if wait.finished(instance):
                return instance

    async def list_workflows(
        self,
        *,
        definition: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> WorkflowPage:
        """``GET /v1/workflows``: one page; see :meth:`Client.list_workflows`."""
        return await self._run(
            workflow_list(definition=definition, state=state, limit=limit, cursor=cursor)
        )

    async def iter_workflows(
        self,
        *,
        definition: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> AsyncIterator[WorkflowInstance]:
        """Every instance :meth:`list_workflows` finds, following ``next_cursor``
        (``async for``)."""

        def page_at(at: str | None) -> Operation[WorkflowPage]:
            return workflow_list(definition=definition, state=state, limit=limit, cursor=at)

        async for page in self._pages(page_at, cursor):
            for instance in page.items:
                yield instance

    async def workflow_steps(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> WorkflowStepPage:
        """``GET /v1/workflows/{id}/steps``: one page of step executions; see
        :meth:`Client.workflow_steps`."""
        return await self._run(workflow_step_list(workflow_id, limit=limit, cursor=cursor))

    async def iter_workflow_steps(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> AsyncIterator[WorkflowStep]:
        """Every step execution of the instance, following ``next_cursor`` (``async for``)."""

        def page_at(at: str | None) -> Operation[WorkflowStepPage]:
            return workflow_step_list(workflow_id, limit=limit, cursor=at)

        async for page in self._pages(page_at, cursor):
            for step in page.items:
                yield step

    async def signal_workflow(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> WorkflowSignal:
        """``POST /v1/workflows/{id}/signals``; see :meth:`Client.signal_workflow`."""
        operation = workflow_signal(workflow_id, name, payload, idempotency_key=idempotency_key)
        return await self._run(operation)

    async def pause_workflow(self, workflow_id: str, reason: str | None = None) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/pause``; see :meth:`Client.pause_workflow`."""
        return await self._run(workflow_pause(workflow_id, reason))

    async def resume_workflow(
        self, workflow_id: str, reason: str | None = None
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/resume``; see :meth:`Client.resume_workflow`."""
        return await self._run(workflow_resume(workflow_id, reason))

    async def cancel_workflow(
        self, workflow_id: str, reason: str | None = None
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/cancel``; see :meth:`Client.cancel_workflow`."""
        return await self._run(workflow_cancel(workflow_id, reason))

    async def retry_workflow_step(self, workflow_id: str, key: str) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/retry``; see
        :meth:`Client.retry_workflow_step`."""
        return await self._run(workflow_step_retry(workflow_id, key))

    async def skip_workflow_step(
        self, workflow_id: str, key: str, output: Any = None
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/skip``; see
        :meth:`Client.skip_workflow_step`."""
        return await self._run(workflow_step_skip(workflow_id, key, output))

    async def resolve_workflow_step(
        self,
        workflow_id: str,
        key: str,
        *,
        outcome: Outcome,
        output: Any = None,
        error: WorkflowError | Mapping[str, Any] | None = None,
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/resolve``; see
        :meth:`Client.resolve_workflow_step`."""
        return await self._run(workflow_step_resolve(workflow_id, key, outcome, output, error))
