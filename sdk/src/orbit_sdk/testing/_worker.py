"""``TestWorker``: a worker's handlers, run in this process against the test server.

It builds a new :class:`~orbit_sdk.worker.Worker` for the test's environment and registers the
given worker's handlers on it, each wrapped so that injected faults apply; the given worker is
not changed. It runs on a thread of its own (``with``) or on the test's event loop
(``async with``), over the real worker runtime and WebSocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from orbit_sdk._models import Attempt
from orbit_sdk.testing._faults import Fault, FaultPlan, InjectedFailure, LostAttempt
from orbit_sdk.worker import TaskContext, Worker
from orbit_sdk.worker._registry import HandlerSpec

if TYPE_CHECKING:
    from orbit_sdk.testing._orbit import OrbitTest

__all__ = ["TestWorker", "handlers_of"]

STOP_GRACE_S: Final = 5.0
JOIN_TIMEOUT_S: Final = 30.0
LOSS_POLL_S: Final = 0.05
START_WAIT_S: Final = 10.0
"""How long a lost attempt waits for Orbit to have it as started before the clock jumps."""


def handlers_of(worker: Worker) -> list[HandlerSpec]:
    """Every handler registered on ``worker`` (each version)."""
    registry = worker._registry
    return [spec for versions in registry._by_kind.values() for spec in versions.values()]


class TestWorker:
    """The handlers of a worker, running against one test environment.

    Use it with ``with`` (on a thread of its own, for sync tests) or ``async with`` (on the
    running event loop); it stops gracefully at the end of the block, and an error that ended
    the worker (a refused key, a forbidden queue) is raised there. :meth:`fail_next` and
    :meth:`lose_next` inject faults into the next attempts of a handler.
    """

    __test__ = False

    def __init__(self, source: Worker, orbit: OrbitTest, *, concurrency: int = 4) -> None:
        self._orbit = orbit
        self.faults = FaultPlan()
        self.worker = Worker(
            orbit.url,
            orbit.api_key,
            concurrency=concurrency,
            worker_id=f"test-{secrets.token_hex(4)}",
            shutdown_grace=STOP_GRACE_S,
        )
        self._released = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        specs = handlers_of(source)
        if not specs:
            raise ValueError("the worker has no handlers: register one with @worker.handler")
        for spec in specs:
            self.worker.handler(
                queue=spec.queue, type=spec.type, version=spec.version, side_effect=spec.side_effect
            )(self._wrap(spec))

    def __repr__(self) -> str:
        return f"TestWorker({self.worker!r}, environment={self._orbit.environment!r})"

    # -- failure injection ------------------------------------------------------------------

    def fail_next(
        self,
        queue: str,
        type: str,
        *,
        times: int = 1,
        error: BaseException | type[BaseException] | None = None,
    ) -> None:
        """Make the next ``times`` attempts of ``queue``/``type`` raise ``error`` instead of
        running the handler (default: :class:`InjectedFailure`, retryable). An exception class
        is instantiated per attempt; an instance is raised as it is."""
        self.faults.add(queue, type, Fault("fail", error), times)

    def lose_next(self, queue: str, type: str, *, times: int = 1) -> None:
        """Make the next ``times`` attempts of ``queue``/``type`` get lost, as if the worker
        went silent: the handler does not run, the attempt holds its lease, and the server's
        clock moves past the lease so that Orbit ends the attempt as lost (``timeout``) and
        retries the task (``idempotent``) or puts it in ``needs_review`` (``unsafe``). Moving
        the clock loses every attempt running at that moment."""
        self.faults.add(queue, type, Fault("lose"), times)

    @property
    def error(self) -> BaseException | None:
        """What ended the worker early (it stopped on its own), if anything did."""
        return self._error

    # -- running ----------------------------------------------------------------------------

    def start(self) -> None:
        """Run on a thread of its own until :meth:`stop`."""
        if self._thread is not None or self._task is not None:
            raise RuntimeError("the test worker runs already")
        self._thread = threading.Thread(target=self._run_thread, name="orbit-test-worker")
        self._thread.start()

    def stop(self) -> None:
        """Stop gracefully and wait; raises what ended the worker early, if anything did."""
        self._released.set()
        if self._thread is not None:
            self.worker.stop()
            self._thread.join(JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                raise RuntimeError(f"the test worker did not stop in {JOIN_TIMEOUT_S} s")
            self._thread = None
        self._raise_error()

    async def start_async(self) -> None:
        """Run on the current event loop until :meth:`stop_async`."""
        if self._thread is not None or self._task is not None:
            raise RuntimeError("the test worker runs already")
        self._task = asyncio.create_task(self._run_async())

    async def stop_async(self) -> None:
        """Stop gracefully and wait; raises what ended the worker early, if anything did."""
        self._released.set()
        if self._task is not None:
            self.worker.stop()
            await asyncio.wait_for(asyncio.shield(self._task), JOIN_TIMEOUT_S)
            self._task = None
        self._raise_error()

    def __enter__(self) -> TestWorker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        except Exception:
            if exc is None:
                raise
            # the test's own failure is the one to see; the worker's error is still in .error

    async def __aenter__(self) -> TestWorker:
        await self.start_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.stop_async()
        except Exception:
            if exc is None:
                raise

    @property
    def running(self) -> bool:
        if self._thread is not None:
            return self._thread.is_alive()
        return self._task is not None and not self._task.done()

    def _run_thread(self) -> None:
        asyncio.run(self._run_async())

    async def _run_async(self) -> None:
        try:
            await self.worker.run_async()
        except Exception as exc:  # kept for stop() and the helpers' waits to raise
            self._error = exc

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    # -- the wrapped handlers ---------------------------------------------------------------

    def _wrap(self, spec: HandlerSpec) -> Callable[[TaskContext], Any]:
        func = spec.func
        if spec.is_async:

            @functools.wraps(func)
            async def run_async(ctx: TaskContext) -> Any:
                fault = self.faults.take(ctx.queue, ctx.type)
                if fault is None:
                    return await func(ctx)
                if fault.kind == "fail":
                    raise _error_of(fault, ctx)
                deadline = time.monotonic() + START_WAIT_S
                async with self._orbit.async_client() as client:
                    while time.monotonic() < deadline and not self._released.is_set():
                        # the start is on its way; only HTTP tells when it is in
                        if await _is_running(client.task_attempts(ctx.task_id), ctx.attempt):
                            break
                        await asyncio.sleep(LOSS_POLL_S)
                await self._orbit.advance_clock_async(self._loss_jump())
                while not ctx.cancelled and not self._released.is_set():
                    await _wait_briefly(ctx.wait_cancelled())
                raise LostAttempt("the test worker stopped before the loss reached it")

            return run_async

        @functools.wraps(func)
        def run_sync(ctx: TaskContext) -> Any:
            fault = self.faults.take(ctx.queue, ctx.type)
            if fault is None:
                return func(ctx)
            if fault.kind == "fail":
                raise _error_of(fault, ctx)
            deadline = time.monotonic() + START_WAIT_S
            while time.monotonic() < deadline and not self._released.is_set():
                if _running(self._orbit.attempts_of(ctx.task_id), ctx.attempt):
                    break
                time.sleep(LOSS_POLL_S)  # the start is on its way
            self._orbit.advance_clock(self._loss_jump())
            while not ctx.cancel_event.wait(LOSS_POLL_S) and not self._released.is_set():
                pass
            raise LostAttempt("the test worker stopped before the loss reached it")

        return run_sync

    def _loss_jump(self) -> timedelta:
        return timedelta(milliseconds=self._orbit.lease_ms + 1_000)


def _error_of(fault: Fault, ctx: TaskContext) -> BaseException:
    error = fault.error
    if error is None:
        return InjectedFailure(f"injected failure of {ctx.queue}/{ctx.type} attempt {ctx.attempt}")
    if isinstance(error, type):
        return error(f"injected failure of {ctx.queue}/{ctx.type} attempt {ctx.attempt}")
    return error


def _running(attempts: list[Attempt], number: int) -> bool:
    """Whether Orbit has the attempt as started: only a running attempt can be lost (one
    whose lease ends before it starts is released, as if it had never been given)."""
    return any(a.number == number and a.state == "running" for a in attempts)


async def _is_running(attempts: Awaitable[list[Attempt]], number: int) -> bool:
    return _running(await attempts, number)


async def _wait_briefly(waiting: Awaitable[None]) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(waiting, LOSS_POLL_S)
