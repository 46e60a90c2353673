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
        definition JSON. Publishing the same content again answers the version there is.
        Other content under the same name and version raises
        :class:`~orbit_sdk.ConflictError` (``version_exists``); a definition Orbit refuses
        raises :class:`~orbit_sdk.ProtocolError` (``definition_invalid``) whose ``details``
        give the reasons.
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

        Without ``version`` it runs the latest version. ``input`` of ``None`` sends none.
        Replaying an ``idempotency_key`` with the same arguments answers the instance it
        started; different arguments raise :class:`~orbit_sdk.IdempotencyConflictError`.
        """
        operation = workflow_start(
            definition, input, version=version, idempotency_key=idempotency_key
        )
        return self._run(operation)

    def get_workflow(self, workflow_id: str) -> WorkflowInstance:
        """``GET /v1/workflows/{id}``: the instance with its steps, waits and pending
        signals. Raises :class:`~orbit_sdk.NotFoundError` for no such instance."""
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
        """``GET /v1/workflows/{id}/steps``: one page of the instance's step executions."""
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

        A ``signal`` step waiting for that name takes it at once (``state`` ``delivered``);
        otherwise it stays ``pending`` until one does. With an ``idempotency_key``, sending
        it again answers the signal it made.
        """
        operation = workflow_signal(workflow_id, name, payload, idempotency_key=idempotency_key)
        return self._run(operation)

    def pause_workflow(self, workflow_id: str, reason: str | None = None) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/pause``: started tasks finish, nothing new starts and
        due waits are held until :meth:`resume_workflow`."""
        return self._run(workflow_pause(workflow_id, reason))

    def resume_workflow(self, workflow_id: str, reason: str | None = None) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/resume``: follow what happened while paused, re-arm
        the waits."""
        return self._run(workflow_resume(workflow_id, reason))

    def cancel_workflow(self, workflow_id: str, reason: str | None = None) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/cancel``: the instance ends ``cancelled`` and its active
        step tasks are cancelled."""
        return self._run(workflow_cancel(workflow_id, reason))

    def retry_workflow_step(self, workflow_id: str, key: str) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/retry``: run a failed or ``needs_review``
        step execution again. ``key`` is the execution's key (``charge``, ``charge:2``)."""
        return self._run(workflow_step_retry(workflow_id, key))

    def skip_workflow_step(
        self, workflow_id: str, key: str, output: Any = None
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/skip``: mark the step execution ``skipped``
        with ``output`` as its output, and go on."""
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
        """``POST /v1/workflows/{id}/steps/{key}/resolve``: decide a ``needs_review`` step.

        ``"succeeded"`` takes an ``output``; ``"failed"`` takes an ``error``
        (:class:`~orbit_sdk.WorkflowError` or ``{"code", "message"}``), and the step's
        ``on_failure`` applies.
        """
        return self._run(workflow_step_resolve(workflow_id, key, outcome, output, error))


class AsyncWorkflowCalls(AsyncCalls):
    """Workflows for :class:`~orbit_sdk.AsyncClient`; see :class:`WorkflowCalls`."""

    async def publish_workflow(self, definition: DefinitionSource) -> WorkflowDefinition:
        """``POST /v1/workflow-definitions``; see :meth:`Client.publish_workflow`."""
        return await self._run(workflow_definition_publish(definition))

    async def get_workflow_definition(self, name: str, version: str) -> WorkflowDefinition:
        """``GET /v1/workflow-definitions/{name}/versions/{version}``."""
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
        """``GET /v1/workflows/{id}``."""
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
        """``GET /v1/workflows/{id}/steps``: one page of step executions."""
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
        """``POST /v1/workflows/{id}/resume``."""
        return await self._run(workflow_resume(workflow_id, reason))

    async def cancel_workflow(
        self, workflow_id: str, reason: str | None = None
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/cancel``; see :meth:`Client.cancel_workflow`."""
        return await self._run(workflow_cancel(workflow_id, reason))

    async def retry_workflow_step(self, workflow_id: str, key: str) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/retry``."""
        return await self._run(workflow_step_retry(workflow_id, key))

    async def skip_workflow_step(
        self, workflow_id: str, key: str, output: Any = None
    ) -> WorkflowInstance:
        """``POST /v1/workflows/{id}/steps/{key}/skip``."""
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
