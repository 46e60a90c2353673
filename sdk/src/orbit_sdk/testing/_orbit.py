"""``OrbitTest``: one test's own environment on the test server, with clients, in-process
workers and helpers that run tasks and workflows to completion."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from orbit_sdk._client import AsyncClient, Client
from orbit_sdk._models import Attempt, Task
from orbit_sdk._workflow import Workflow
from orbit_sdk._workflow_models import WorkflowInstance, WorkflowStep
from orbit_sdk.testing._server import OrbitServer, TestEnvironment
from orbit_sdk.testing._worker import TestWorker
from orbit_sdk.worker import Worker

__all__ = ["DEFAULT_TIMEOUT_S", "OrbitTest"]

DEFAULT_TIMEOUT_S: Final = 30.0
STEP_POLL_S: Final = 0.05
WAIT_SLICE_S: Final = 1.0
SKIP_SLICE_S: Final = 0.2
"""With ``skip_waits``, how often a wait looks whether the task waits for its run time."""
SKIP_PAST: Final = timedelta(milliseconds=1)
"""How long one long poll of a wait lasts before the helpers look at their workers again."""


class OrbitTest:
    """A test's view of the test server: a fresh environment of its own (its key has every
    role), so nothing one test submits, publishes or configures is seen by another.

    ``client`` is a sync :class:`~orbit_sdk.Client` for the environment; :meth:`async_client`
    makes an :class:`~orbit_sdk.AsyncClient`. :meth:`worker` runs a worker's handlers in this
    process. :meth:`run_task` and :meth:`run_workflow` submit and wait for the end (with
    ``_async`` twins); :meth:`wait_for_step` waits for a workflow to reach a step;
    :meth:`attempts_of` lists a task's attempts; :meth:`advance_clock` moves
    the server's clock forward. :meth:`close` stops the workers and closes the client.
    """

    __test__ = False

    def __init__(self, server: OrbitServer, environment: TestEnvironment | None = None) -> None:
        self.server = server
        env = environment or server.new_environment()
        self.url = env.url
        self.api_key = env.api_key
        self.environment = env.environment
        self.lease_ms = server.lease_ms
        self.client = Client(self.url, self.api_key, timeout=30.0)
        self._workers: list[TestWorker] = []

    def __repr__(self) -> str:
        return f"OrbitTest(url={self.url!r}, environment={self.environment!r})"

    def async_client(self) -> AsyncClient:
        """A new async client for the environment; close it (``async with``)."""
        return AsyncClient(self.url, self.api_key, timeout=30.0)

    def worker(self, worker: Worker, *, concurrency: int = 4) -> TestWorker:
        """The handlers of ``worker``, ready to run here against this environment: use the
        answer with ``with`` or ``async with`` (see :class:`TestWorker`)."""
        made = TestWorker(worker, self, concurrency=concurrency)
        self._workers.append(made)
        return made

    def close(self) -> None:
        """Stop the workers still running and close the client."""
        try:
            for worker in self._workers:
                if worker.running:
                    worker.stop()
        finally:
            self._workers.clear()
            self.client.close()

    # -- tasks ------------------------------------------------------------------------------

    def run_task(
        self,
        queue: str,
        type: str,
        params: Any = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        skip_waits: bool = False,
        **submit: Any,
    ) -> Task:
        """Submit a task (``submit`` takes the keyword arguments of ``Client.submit``) and
        wait until it is settled: ``succeeded``, ``failed``, ``cancelled`` or
        ``needs_review``. A running worker is needed; raises ``TimeoutError`` after
        ``timeout`` seconds, and what ended a test worker early, if one ended.

        ``skip_waits``: whenever the task waits for its run time (a delay, a retry's backoff),
        move the server's clock to that time instead of waiting for it."""
        task = self.client.submit(queue, type, params, **submit)
        return self.wait_for_task(task.id, timeout=timeout, skip_waits=skip_waits)

    def wait_for_task(
        self, task_id: str, *, timeout: float = DEFAULT_TIMEOUT_S, skip_waits: bool = False
    ) -> Task:
        """Wait until the task is settled (see :meth:`run_task`)."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_workers()
            slice_s = min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
            if skip_waits:
                task = self.client.get_task(task_id)
                if task.is_settled:
                    return task
                if task.state == "scheduled":
                    gap = task.run_at - self.now()
                    if gap > timedelta(0):
                        self.advance_clock(gap + SKIP_PAST)
                slice_s = min(slice_s, SKIP_SLICE_S)
            try:
                return self.client.wait_for_task(task_id, timeout=slice_s, poll_ms=1000)
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(_not_settled("task", task_id, timeout)) from None

    def attempts_of(self, task_id: str) -> list[Attempt]:
        """The task's attempts, first to last (``state``, ``cause``, ``error``, ...)."""
        return self.client.task_attempts(task_id)

    async def run_task_async(
        self,
        queue: str,
        type: str,
        params: Any = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,  # noqa: ASYNC109 - a deadline, as the sync twin's
        **submit: Any,
    ) -> Task:
        """:meth:`run_task` for async tests."""
        async with self.async_client() as client:
            task = await client.submit(queue, type, params, **submit)
            deadline = time.monotonic() + timeout
            while True:
                self._check_workers()
                slice_s = min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
                try:
                    return await client.wait_for_task(task.id, timeout=slice_s, poll_ms=1000)
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(_not_settled("task", task.id, timeout)) from None

    async def attempts_of_async(self, task_id: str) -> list[Attempt]:
        """:meth:`attempts_of` for async tests."""
        async with self.async_client() as client:
            return await client.task_attempts(task_id)

    # -- workflows --------------------------------------------------------------------------

    def run_workflow(
        self,
        definition: Workflow | Mapping[str, Any],
        input: Any = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        skip_waits: bool = False,
    ) -> WorkflowInstance:
        """Publish ``definition`` (a ``Workflow`` or its JSON as a mapping), start an instance
        with ``input`` and wait until it is ``succeeded``, ``failed`` or ``cancelled``.
        Raises ``TimeoutError`` after ``timeout`` seconds (a workflow that waits for a signal
        or an operator does not end by itself).

        ``skip_waits``: whenever the instance has nothing running and waits for a time (a
        timer, a poll's next round, a signal's timeout), move the server's clock to it."""
        instance = self.start_workflow(definition, input)
        return self.wait_for_workflow(instance.id, timeout=timeout, skip_waits=skip_waits)

    def start_workflow(
        self, definition: Workflow | Mapping[str, Any], input: Any = None
    ) -> WorkflowInstance:
        """Publish ``definition`` and start an instance with ``input``, without waiting."""
        published = self.client.publish_workflow(definition)
        return self.client.start_workflow(published.name, input, version=published.version)

    def wait_for_step(
        self,
        workflow_id: str,
        key: str,
        *,
        states: Collection[str] = ("waiting",),
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> WorkflowStep:
        """Wait until the instance's step execution ``key`` (a step id, for its first visit)
        is in one of ``states``: by default until a timer, signal or poll step waits, which is
        when moving the clock makes its wait end. Raises ``TimeoutError`` after ``timeout``
        seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_workers()
            for step in self.client.iter_workflow_steps(workflow_id):
                if step.key == key and step.state in states:
                    return step
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"step {key} of workflow {workflow_id} was not {'/'.join(states)} "
                    f"within {timeout} s"
                )
            time.sleep(STEP_POLL_S)  # the steps have no long poll

    def wait_for_workflow(
        self, workflow_id: str, *, timeout: float = DEFAULT_TIMEOUT_S, skip_waits: bool = False
    ) -> WorkflowInstance:
        """Wait until the instance is ``succeeded``, ``failed`` or ``cancelled`` (see
        :meth:`run_workflow`)."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_workers()
            slice_s = min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
            if skip_waits:
                instance = self.client.get_workflow(workflow_id)
                if instance.is_terminal:
                    return instance
                gap = _idle_wait(instance, self.now())
                if gap is not None:
                    self.advance_clock(gap + SKIP_PAST)
                slice_s = min(slice_s, SKIP_SLICE_S)
            try:
                return self.client.wait_for_workflow(workflow_id, timeout=slice_s, poll_ms=1000)
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(_not_settled("workflow", workflow_id, timeout)) from None

    async def run_workflow_async(
        self,
        definition: Workflow | Mapping[str, Any],
        input: Any = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,  # noqa: ASYNC109 - a deadline, as the sync twin's
        skip_waits: bool = False,
    ) -> WorkflowInstance:
        """:meth:`run_workflow` for async tests."""
        async with self.async_client() as client:
            published = await client.publish_workflow(definition)
            instance = await client.start_workflow(published.name, input, version=published.version)
            deadline = time.monotonic() + timeout
            while True:
                self._check_workers()
                slice_s = min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
                if skip_waits:
                    instance = await client.get_workflow(instance.id)
                    if instance.is_terminal:
                        return instance
                    now = await client.request("GET", "/v1/dev/clock")
                    gap = _idle_wait(instance, datetime.fromisoformat(now["now"]))
                    if gap is not None:
                        await self.advance_clock_async(gap + SKIP_PAST)
                    slice_s = min(slice_s, SKIP_SLICE_S)
                try:
                    return await client.wait_for_workflow(
                        instance.id, timeout=slice_s, poll_ms=1000
                    )
                except TimeoutError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(_not_settled("workflow", instance.id, timeout)) from None

    # -- the clock --------------------------------------------------------------------------

    def advance_clock(self, by: timedelta | float) -> datetime:
        """Move the server's clock forward by ``by`` (a ``timedelta`` or seconds) and answer
        its new time. Backoffs, delays, timeouts, leases and workflow timers that come due are
        handled within about a second. Shared by every test of the session: it never goes
        back."""
        answer = self.client.request("POST", "/v1/dev/clock:advance", json=_advance(by))
        return datetime.fromisoformat(answer["now"])

    async def advance_clock_async(self, by: timedelta | float) -> datetime:
        """:meth:`advance_clock` for async tests."""
        async with self.async_client() as client:
            answer = await client.request("POST", "/v1/dev/clock:advance", json=_advance(by))
        return datetime.fromisoformat(answer["now"])

    def now(self) -> datetime:
        """The server's clock (the real time plus what tests advanced it by)."""
        return datetime.fromisoformat(self.client.request("GET", "/v1/dev/clock")["now"])

    def _check_workers(self) -> None:
        for worker in self._workers:
            if worker.error is not None:
                raise RuntimeError(f"{worker!r} stopped: {worker.error}") from worker.error


def _idle_wait(instance: WorkflowInstance, now: datetime) -> timedelta | None:
    """How far the clock must move for the instance's first timed wait to end, when nothing
    of it runs meanwhile (a running task would lose its lease to the jump); else ``None``."""
    if instance.is_terminal or any(s.state in ("pending", "running") for s in instance.steps):
        return None
    ends = [wait.until for wait in instance.waits if wait.until is not None]
    if not ends:
        return None
    gap = min(ends) - now
    return gap if gap > timedelta(0) else None


def _advance(by: timedelta | float) -> dict[str, int]:
    step = by if isinstance(by, timedelta) else timedelta(seconds=by)
    if step < timedelta(0):
        raise ValueError(f"the clock only moves forward: {by!r}")
    return {"by_ms": round(step.total_seconds() * 1000)}


def _not_settled(what: str, object_id: str, timeout: float) -> str:
    return (
        f"{what} {object_id} did not end within {timeout} s: is a worker running its tasks "
        "(orbit.worker(...) as a context manager)?"
    )
